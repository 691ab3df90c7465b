"""The four counterfactuals of seed 000 §11.12, run for every answerable evidence case,
once per principal (the case's groups, then each ``also_groups``) at one final width, the
case's ``top_k``, to bound time.

Three of them are questions about *resolution* asked of the stored evidence path, so they
operate on the passages the case's run delivered and call ``resolve()`` again; the fourth
is a question about *retrieval* and runs the real search path again:

``remove_source``
    For each minimum-evidence document in turn, drop its passages from the delivered
    evidence and resolve again. The decision must become incomplete (an expected id is no
    longer selected), no rejection may cite the removed passages, and every passage the
    removed source defeated must no longer stand rejected by it: with the proof gone the
    decision has to be uncertain, not unchanged.
``insert_rejected``
    Put the strongest rejected source (the rejected passage with the best fused rank; else
    the first must-reject document of the case, fetched from the index under the same
    principal) at position one and resolve again. The selected set must not change, and
    the record must reject that passage with a reason code.
``swap_dates``
    Keep every text fixed and move every date of the evidence (``effective_from``,
    ``effective_to``, event dates) forward by the same number of days, so the earliest
    lies the day after ``valid_at``: what was in force becomes not yet effective and
    events that had happened lie in the future, their order preserved. The decision must
    change. Applicable when dates can drive the decision: the case's evidence carries
    effective dates, or a delivered stopping condition meets a dated event.
``change_tenant``
    Re-run the case's queries as the same groups of another tenant against that tenant's
    index (real search). No candidate or excerpt may be a document of the original tenant.

Why not rebuild a corpus slice for the first three: a rebuild changes BM25 statistics and
the candidate set for reasons unrelated to the question asked, so a changed decision could
not be attributed to the counterfactual; the seed runs these "against the stored evidence
path". The isolation question needs no rebuild either: tenants never share an index, and
the test is that the other tenant's search cannot reach the original's documents.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from quarry.core.index import layout
from quarry.core.records import SELECTED_VERDICTS, Decision, Passage, Principal, SearchRequest
from quarry.eval import case_run  # run_search looked up per call: tests swap in doubles
from quarry.eval.case_model import Split
from quarry.eval.case_run import CaseContext, case_query, load_tenant, resolve_evidence
from quarry.eval.case_scoring import decision_verdicts, doc_of, matches

Kind = Literal["remove_source", "insert_rejected", "swap_dates", "change_tenant"]
KINDS: tuple[Kind, ...] = ("remove_source", "insert_rejected", "swap_dates", "change_tenant")


class CounterfactualResult(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    case_id: str  # the outcome id of the base run: case@k{width}/{principal}
    kind: Kind
    applicable: bool
    passed: bool
    detail: str
    case: str = ""  # the case id
    split: Split = "dev"


def _result(ctx: CaseContext, kind: Kind, applicable: bool, passed: bool, detail: str) -> CounterfactualResult:
    return CounterfactualResult(case_id=ctx.label, kind=kind, applicable=applicable, passed=passed, detail=detail,
                                case=ctx.case.id, split=ctx.case.split)


def _signature(d: Decision) -> tuple:
    return (frozenset(s.passage_id for s in d.governing),
            frozenset(s.passage_id for s in d.supporting),
            frozenset((r.passage_id, r.reason) for r in d.rejected),
            frozenset(frozenset(u.passage_ids) for u in d.unresolved),
            frozenset((r.passage_id, r.outdated) for r in d.related))


def _resolve(ctx: CaseContext, passages: Sequence[Passage]) -> Decision:
    return resolve_evidence(passages, ctx.principal, ctx.case.valid_at, case_query(ctx.case), ctx.relevance(passages))


def remove_source(ctx: CaseContext) -> CounterfactualResult:
    case, base = ctx.case, ctx.decision
    notes, ok, tried = [], True, 0
    for doc in case.minimum_evidence:
        removed = {p.passage_id for p in ctx.delivered if matches(doc, p.passage_id)}
        if not removed:
            notes.append(f"{doc}: not delivered, nothing to remove")
            continue
        tried += 1
        d = _resolve(ctx, [p for p in ctx.delivered if p.passage_id not in removed])
        verdicts = decision_verdicts(d)
        # complete: every minimum-evidence id still answered for (selected or unresolved)
        complete = all(any(matches(w, p) and (v in SELECTED_VERDICTS or v == "unresolved")
                           for p, v in verdicts.items())
                       for w in case.minimum_evidence)
        stale = [r.passage_id for r in d.rejected if r.by in removed]
        defeated = [r.passage_id for r in base.rejected if r.by in removed]
        still = [p for p in defeated if any(r.passage_id == p and r.by in removed for r in d.rejected)]
        bad = []
        if complete:
            bad.append("decision still complete")
        if stale or still:
            bad.append(f"still rejected by the removed source: {sorted(set(stale + still))}")
        if bad:
            ok = False
        notes.append(f"{doc}: " + ("; ".join(bad) if bad else
                                   f"incomplete{'; freed ' + str(sorted(defeated)) if defeated else ''}"))
    if not tried:
        return _result(ctx, "remove_source", False, False, "no minimum-evidence document was delivered")
    return _result(ctx, "remove_source", True, ok, " | ".join(notes))


def _best_rank(ctx: CaseContext, pid: str) -> int:
    ranks = [c.fused_rank for r in ctx.results for c in r.candidates if c.passage_id == pid]
    return min(ranks) if ranks else 10**9


def insert_rejected(ctx: CaseContext) -> CounterfactualResult:
    case, base = ctx.case, ctx.decision
    by_id = {p.passage_id: p for p in ctx.delivered}
    rejected = sorted((r.passage_id for r in base.rejected if r.passage_id in by_id),
                      key=lambda pid: (_best_rank(ctx, pid), pid))
    if rejected:
        strongest = by_id[rejected[0]]
    else:
        strongest = None
        for must in case.rejected:
            found = [p for p in ctx.index.document(doc_of(must.id), ctx.principal) if matches(must.id, p.passage_id)]
            if found:
                strongest = found[0]
                break
    if strongest is None:
        return _result(ctx, "insert_rejected", False, False,
                       "no rejected source in the run and none expected by the case")
    rest = [p for p in ctx.delivered if p.passage_id != strongest.passage_id]
    d = _resolve(ctx, [strongest, *rest])
    was = {s.passage_id for s in base.selected}
    now = {s.passage_id for s in d.selected} - {strongest.passage_id}
    rej = next((f"{r.reason} by {r.by}" for r in d.rejected if r.passage_id == strongest.passage_id), None)
    # a related passage the rules would reject (outdated) is never citable: rejected too
    rej = rej or next((f"related, outdated: {r.outdated}" for r in d.related
                       if r.passage_id == strongest.passage_id and r.outdated is not None), None)
    bad = []
    if now != was - {strongest.passage_id}:
        bad.append(f"selected set changed: +{sorted(now - was)} -{sorted(was - now)}")
    if rej is None:
        bad.append(f"{strongest.passage_id} at rank one is {d.verdict(strongest.passage_id)}, not rejected")
    detail = "; ".join(bad) if bad else f"{strongest.passage_id} rejected ({rej}); selection unchanged"
    return _result(ctx, "insert_rejected", True, not bad, detail)


def _dates(p: Passage) -> list[dt.date]:
    e = p.envelope
    return [d for d in (e.effective_from, e.effective_to, *(ev.on for ev in e.events)) if d is not None]


def shift_dates(p: Passage, days: int) -> Passage:
    """The passage with every envelope date moved by ``days``; text untouched."""
    e = p.envelope
    step = dt.timedelta(days=days)
    env = e.model_copy(update={
        "effective_from": e.effective_from + step if e.effective_from else None,
        "effective_to": e.effective_to + step if e.effective_to else None,
        "events": tuple(ev.model_copy(update={"on": ev.on + step}) for ev in e.events),
    })
    return p.model_copy(update={"envelope": env})


def _date_driven(ctx: CaseContext) -> bool:
    """Dates can drive this decision: an evidence passage carries effective dates, or a
    delivered passage has a stopping condition and another records events."""
    evidence = [p for p in ctx.delivered if any(matches(i, p.passage_id) for i in ctx.case.relevant_ids)]
    if any(p.envelope.effective_from or p.envelope.effective_to for p in evidence):
        return True
    return any(p.envelope.condition for p in ctx.delivered) and any(p.envelope.events for p in ctx.delivered)


def swap_dates(ctx: CaseContext) -> CounterfactualResult:
    case = ctx.case
    dates = [d for p in ctx.delivered for d in _dates(p)]
    if not dates or not _date_driven(ctx):
        return _result(ctx, "swap_dates", False, False,
                       "no date can drive the decision: the case's evidence carries no effective "
                       "dates and no delivered condition meets a dated event")
    days = (case.valid_at - min(dates)).days + 1
    if days <= 0:  # every date already lies after valid_at: move them before it instead
        days = (case.valid_at - max(dates)).days - 1
    d = _resolve(ctx, [shift_dates(p, days) for p in ctx.delivered])
    changed = _signature(d) != _signature(ctx.decision)
    detail = (f"dates moved {days:+d} days: decision changed" if changed
              else f"dates moved {days:+d} days: decision unchanged (metadata does not drive it)")
    return _result(ctx, "swap_dates", True, changed, detail)


def other_tenant(index_root: str, tenant: str) -> str | None:
    others = [t for t in layout.list_tenants(index_root) if t != tenant]
    return others[0] if others else None


def change_tenant(ctx: CaseContext, index_root: str, settings, loaded: dict[str, tuple],
                  search_fn=None) -> CounterfactualResult:
    case = ctx.case
    other = other_tenant(index_root, case.tenant)
    if other is None:
        return _result(ctx, "change_tenant", False, False, "no other tenant under the index root")
    if other not in loaded:
        loaded[other] = load_tenant(index_root, other)
    index, emb, second = loaded[other]
    own_docs = {doc_of(pid) for sh in ctx.index.shards for pid in sh.passage_ids}
    principal = Principal(tenant=other, subject=ctx.principal.subject, groups=ctx.principal.groups)
    leaked = []
    for q in case.queries:
        req = SearchRequest(query=q, top_k=ctx.width, doc_type=case.doc_type,
                            valid_at=case.valid_at if case.filter_valid_at else None)
        res = (search_fn or case_run.run_search)(index, principal, req, emb, settings, second)
        for pid in [c.passage_id for c in res.candidates] + [e.passage_id for e in res.excerpts]:
            p = index.passage(pid, principal)
            if p is None or p.tenant != other or doc_of(pid) in own_docs:
                leaked.append(pid)
    leaked = sorted(set(leaked))
    return _result(ctx, "change_tenant", True, not leaked,
                   f"as tenant {other!r}: no candidate from {case.tenant!r}" if not leaked
                   else f"as tenant {other!r}: {len(leaked)} leaked: {leaked[:5]}")


def run_counterfactuals(contexts: Sequence[CaseContext], index_root: str, settings, loaded: dict[str, Any],
                        search_fn=None) -> list[CounterfactualResult]:
    out = []
    for ctx in contexts:
        if not ctx.case.answerable:
            continue
        out += [remove_source(ctx), insert_rejected(ctx), swap_dates(ctx),
                change_tenant(ctx, index_root, settings, loaded, search_fn)]
    return out
