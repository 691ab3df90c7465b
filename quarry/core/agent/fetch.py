"""The fetch tool and citable text (DESIGN §5), over one tenant index under the verified
principal's permissions. A fetched passage carries the same envelope fields as a search
excerpt (``quarry.core.search.expansion.excerpt`` builds both), so REST, MCP and the in-process
callers see one view. Not found and not permitted are the same ``None``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any, Literal

from quarry.core.evidence.graph import facts_for, neighbours
from quarry.core.evidence.resolve import resolve
from quarry.core.index.shards import TenantIndex
from quarry.core.records import Decision, Excerpt, Frozen, Passage, Principal
from quarry.core.search.expansion import excerpt


class SectionView(Frozen):
    """A parent section as fetch returns it (sections carry no envelope of their own)."""

    parent_id: str
    anchor: str
    heading_path: tuple[str, ...]
    text: str
    token_count: int
    title: str
    doc_id: str
    version: str
    trust: Literal["untrusted"] = "untrusted"


class FetchResult(Frozen):
    kind: Literal["passage", "section", "document"]
    generation: int
    passages: tuple[Excerpt, ...] = ()  # passage and document kinds, each with its verdict
    section: SectionView | None = None  # section kind
    # the fetched passages resolved like searched ones (with their evidence-graph
    # neighbours, as of today): a superseded passage fetched by id is rejected, not citable
    decision: Decision | None = None

    @property
    def ids(self) -> list[str]:
        """What the run records as fetched: the passage ids, or the section's id."""
        return [p.passage_id for p in self.passages] or ([self.section.parent_id] if self.section else [])

    def to_json(self) -> dict[str, Any]:
        """The response body: ``passages`` or ``section``, never both."""
        body: dict[str, Any] = {"kind": self.kind, "generation": self.generation}
        if self.section is not None:
            body["section"] = self.section.model_dump(mode="json")
        else:
            body["passages"] = [p.model_dump(mode="json") for p in self.passages]
        if self.decision is not None:
            body["decision"] = self.decision.model_dump(mode="json")
        return body


def _resolved(index: TenantIndex, principal: Principal, kind: str, passages: Sequence[Passage],
              valid_at: dt.date | None) -> FetchResult:
    """Fetched passages resolved like searched ones: their graph neighbours under the same
    principal, every rule applied, each excerpt carrying its verdict."""
    ids = [p.passage_id for p in passages]
    linked = [x for x in (index.passage(pid, principal) for pid in neighbours(index, principal, valid_at, ids))
              if x is not None]
    allp = [*passages, *linked]
    decision = resolve(allp, principal, valid_at, facts=facts_for(index, [p.passage_id for p in allp]),
                       delivered=ids)
    day = decision.valid_at
    out = tuple(excerpt(p, valid_at=day).model_copy(update={"verdict": decision.verdict(p.passage_id)})
                for p in passages)
    return FetchResult(kind=kind, generation=index.generation, passages=out, decision=decision)


def fetch(index: TenantIndex, principal: Principal, id_: str, valid_at: dt.date | None = None) -> FetchResult | None:
    """A passage id, a section (parent) id, or a document id -> what the principal may read.
    Passages come resolved as of ``valid_at`` (default today)."""
    p = index.passage(id_, principal)
    if p is not None:
        return _resolved(index, principal, "passage", [p], valid_at)
    sec = index.parent(id_, principal)
    if sec is not None:
        e = sec.envelope
        return FetchResult(kind="section", generation=index.generation, section=SectionView(
            parent_id=sec.parent_id, anchor=sec.anchor, heading_path=tuple(sec.heading_path), text=sec.text,
            token_count=sec.token_count, title=e.title, doc_id=e.doc_id, version=e.version))
    doc = index.document(id_, principal)
    if doc:
        return _resolved(index, principal, "document", doc, valid_at)
    return None


def citable_texts(index: TenantIndex, principal: Principal, ids: Sequence[str]) -> dict[str, str]:
    """Citable text per id: a passage's own text plus its parent section (what an expanded
    excerpt showed), or a section's text. Ids the principal cannot read are left out."""
    out: dict[str, str] = {}
    for pid in ids:
        p = index.passage(pid, principal)
        if p is not None:
            sec = index.parent(p.parent_id, principal)
            out[pid] = p.text + ("\n" + sec.text if sec is not None else "")
            continue
        sec = index.parent(pid, principal)
        if sec is not None:
            out[pid] = sec.text
    return out
