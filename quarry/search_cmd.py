"""``quarry search``: operators search a published index in-process as a given principal."""

from __future__ import annotations

import datetime as dt
import sys

from pydantic import ValidationError

from quarry.core.embed.factory import embedder_for_index
from quarry.core.errors import UsageError
from quarry.core.index.shards import TenantIndex
from quarry.core.records import TOP_K_CEILING, TOP_K_DEFAULT, Principal, SearchRequest
from quarry.core.search.in_process import search
from quarry.core.search.settings import SearchSettings
from quarry.core.text.units import heading_text


def add_arguments(p) -> None:
    p.add_argument("query", help="the search text (words or exact identifiers)")
    p.add_argument("--index-root", required=True, help="index root (local path or fsspec URI)")
    p.add_argument("--tenant", required=True, help="tenant whose index to search")
    p.add_argument("--groups", default="", help="comma-separated groups of the principal (e.g. all-staff,support)")
    p.add_argument("--subject", default="operator", help="subject recorded for the search")
    p.add_argument("--doc-type", default=None, help="comma-separated doc types to keep (e.g. policy,runbook)")
    p.add_argument("--valid-at", default=None, help="only evidence in force on this date (YYYY-MM-DD)")
    p.add_argument("--top-k", type=int, default=TOP_K_DEFAULT,
                   help=f"excerpts to return (default {TOP_K_DEFAULT}, at most {TOP_K_CEILING})")
    p.add_argument("--embedder", default=None,
                   help="local sentence-transformers dir or 'hashing:<dim>'; must be the index's model (default: it)")
    p.add_argument("--encoder", default=None, choices=("torch", "onnx", "onnx-int8"),
                   help="query encoder backend (default: the one that built the index)")
    p.add_argument("--json", action="store_true", help="print the full result as JSON")


def format_decision(decision) -> list[str]:
    """The decision record, one line per passage: what governs, what was rejected and by
    what, what could not be decided."""
    if decision is None:
        return []
    out = [f"decision (valid at {decision.valid_at.isoformat()}):"]
    out += [f"  governing   {s.passage_id}: {s.reason}" for s in decision.governing]
    out += [f"  supporting  {s.passage_id}: {s.reason}" for s in decision.supporting]
    out += [f"  rejected    {r.passage_id}: {r.reason}" + (f" by {r.by}" if r.by else "")
            + (f" ({r.detail})" if r.detail else "") for r in decision.rejected]
    out += [f"  unresolved  {' vs '.join(u.passage_ids)}: {u.reason}" for u in decision.unresolved]
    if len(out) == 1:
        out.append("  (no evidence to resolve)")
    return out


def format_result(result) -> str:
    if not result.excerpts:
        return "\n".join([result.message, *format_decision(result.decision)])
    out = []
    for i, e in enumerate(result.excerpts, 1):
        dates = f"{e.effective_from or '?'}..{e.effective_to or ''}"
        head = heading_text(e.title, e.heading_path)
        flags = (" [truncated]" if e.truncated else "") + (f" [{e.validity}]" if e.validity else "") + (
            f" [{e.verdict}]" if e.verdict else "")
        out.append(f"[{i}] {e.passage_id}  ({e.doc_type}, authority {e.authority}, effective {dates}){flags}\n"
                   f"    {head}\n    " + e.text.replace("\n", "\n    "))
    out += format_decision(result.decision)
    out.append("stages: " + ", ".join(f"{s.name}={s.kept}" for s in result.stages)
               + f"; delivered {result.delivered_tokens} tokens; generation {result.generation}")
    return "\n".join(out)


def run(args) -> int:
    ceiling = SearchSettings().top_k_ceiling
    if not 1 <= args.top_k <= ceiling:
        raise UsageError(f"--top-k {args.top_k} is out of range; use 1 to {ceiling}")

    try:
        request = SearchRequest(
            query=args.query, top_k=args.top_k,
            doc_type=tuple(t for t in args.doc_type.split(",") if t) if args.doc_type else None,
            valid_at=dt.date.fromisoformat(args.valid_at) if args.valid_at else None,
        )
    except (ValidationError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        index = TenantIndex.load(args.index_root, args.tenant)
    except FileNotFoundError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        embedder = embedder_for_index(index.manifest, args.embedder, encoder=args.encoder)
        getattr(embedder, "load", lambda: None)()  # an ONNX encoder's agreement check runs here
    except ValueError as e:  # a mismatched model, a disagreeing encoder, a bad path
        print(f"error: {e}", file=sys.stderr)
        return 2
    principal = Principal(tenant=args.tenant, subject=args.subject,
                          groups=frozenset(g for g in args.groups.split(",") if g))
    result = search(index, principal, request, embedder)
    print(result.model_dump_json(indent=2) if args.json else format_result(result))
    return 0
