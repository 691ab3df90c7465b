"""What a trace may hold and what an operator may read of it.

Operator model (README "Security model"): an operator reads traces of its own tenant, and
sees of each trace only the evidence its own groups could read. Ids of passages and
documents outside the operator's groups are replaced by ``"redacted"`` (ranks and scores
stay, so the shape of a search is still debuggable); a reader with the right groups sees
them. Visibility is checked against the live generation at read time: an id that is gone
or re-restricted since is redacted too (fail closed).

Traces never keep the caller's query verbatim: a salted hash (to group identical queries
of a tenant) and a short redacted form (numbers, identifiers and email addresses masked)
are stored instead.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

REDACTED = "redacted"
_EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
_HAS_DIGIT = re.compile(r"\S*\d\S*")  # ticket ids, amounts, account numbers, dates
# "{doc_id}@{version}#{anchor}": doc ids and versions never hold "@" or "#", so a string of
# this shape under any key (decision records, follow-ups, fields added later) is a passage id.
_PASSAGE_ID = re.compile(r"[^@#\s]+@[^@#\s]+#\S+")
_WS = re.compile(r"\s+")
_ID_FIELDS = ("passage_id", "doc_id", "row", "parent_id", "expanded_to")
_ID_LISTS = ("delivered", "new_ids", "passage_ids", "found")  # found: the resolver's follow-up hits
_ID_KEYS = ("passage_id", "by")  # by: the passage that defeats a rejected one


def redact_query(query: str, max_chars: int) -> str:
    if max_chars <= 0:
        return ""
    q = _HAS_DIGIT.sub("#", _EMAIL.sub("<email>", query))
    return _WS.sub(" ", q).strip()[:max_chars]


def query_fields(tenant: str, query: str, max_chars: int) -> dict[str, str]:
    """The trace's stand-in for the query: ``query_sha256`` and ``query_redacted``."""
    digest = hashlib.sha256(f"{tenant}\x00{query}".encode("utf-8", "replace")).hexdigest()[:16]
    return {"query_sha256": digest, "query_redacted": redact_query(query, max_chars)}


def _doc_of(passage_id: str) -> str:
    return passage_id.split("@", 1)[0]


def passage_ids(trace: Any) -> set[str]:
    """Every passage id a trace names: ``passage_id`` fields anywhere, and id lists."""
    out: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                if k in _ID_KEYS and isinstance(v, str):
                    out.add(v)
                elif k in _ID_LISTS and isinstance(v, list):
                    out.update(x for x in v if isinstance(x, str))
                else:
                    walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(trace)
    out |= _shaped_ids(trace)
    return out


def redact_trace(trace: dict[str, Any], visible: set[str]) -> dict[str, Any]:
    """A copy of ``trace`` with every id outside ``visible`` (passage ids the reader may
    read) replaced; ``redacted_ids`` counts the passages hidden."""
    named = passage_ids(trace)
    hidden = named - visible
    if not hidden:
        return {**trace, "redacted_ids": 0}
    visible_docs = {_doc_of(p) for p in named & visible}
    hidden_docs = {_doc_of(p) for p in hidden} - visible_docs

    def hide(s: str) -> bool:
        if s in hidden or s in hidden_docs or ("@" in s and _doc_of(s) in hidden_docs):
            return True
        # a free-text field (a decision's ``detail``) that mentions a hidden id: fail closed
        return any(h in s for h in hidden) or any(f"{d}@" in s for d in hidden_docs)

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            if isinstance(node.get("passage_id"), str) and node["passage_id"] in hidden:
                node = {**node, **{k: REDACTED for k in _ID_FIELDS if k in node}, "redacted": True}
                return {k: v if k in _ID_FIELDS else walk(v) for k, v in node.items()}
            return {k: walk(v) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v) for v in node]
        if isinstance(node, str) and hide(node):
            return REDACTED
        return node

    return {**walk(trace), "redacted_ids": len(hidden)}


def _shaped_ids(node: Any) -> set[str]:
    if isinstance(node, dict):
        return set().union(*(_shaped_ids(v) for v in node.values()))
    if isinstance(node, list):
        return set().union(*(_shaped_ids(v) for v in node))
    return {node} if isinstance(node, str) and _PASSAGE_ID.fullmatch(node) else set()
