"""Running one case at one final width as one principal: each query through the real
search path, the decision over what the run delivered, the tenant-isolation check on
every result, and the scored :class:`CaseOutcome` with the :class:`CaseContext` the
counterfactuals re-resolve.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from quarry.core.embed.factory import EmbedderSpec, embedder_for_index
from quarry.core.evidence import resolve as resolver  # looked up per call: tests swap in doubles
from quarry.core.index import layout
from quarry.core.index.shards import TenantIndex
from quarry.core.rank.gate import load_second_stage
from quarry.core.records import TOP_K_DEFAULT, Decision, Passage, Principal, SearchRequest, SearchResult
from quarry.core.search.in_process import search
from quarry.core.search.resolution import relevance_to, resolve_delivered
from quarry.eval.case_model import EvidenceCase, FrozenModel, Split, outcome_id
from quarry.eval.case_scoring import BOUNDARIES, decision_verdicts, holds_terms, matches, resolution_failures

__all__ = ["CaseContext", "CaseOutcome", "IndexMissing", "QueryTrace", "case_query", "leaks_of", "load_tenant",
           "resolve_evidence", "run_case", "run_search", "survivors"]


def _any(case_id: str, passage_ids: Iterable[str]) -> bool:
    return any(matches(case_id, p) for p in passage_ids)


def run_search(index, principal: Principal, request: SearchRequest, embedder, settings,
               second_stage=None) -> SearchResult:
    """The one call into the search path: the composed in-process ``search()``, the same
    stages as serving, with the decision record filled."""
    return search(index, principal, request, embedder, settings, second_stage=second_stage)


def survivors(result: SearchResult, top_k: int) -> list[str]:
    """Passage ids the second stage kept: those it ranked (rerank_rank set), or the fused
    top_k when no second stage ran."""
    ranked = [c for c in result.candidates if c.rerank_rank is not None]
    if ranked:
        return [c.passage_id for c in sorted(ranked, key=lambda c: c.rerank_rank)[:top_k]]
    return [c.passage_id for c in sorted(result.candidates, key=lambda c: c.fused_rank)[:top_k]]


def case_query(case: EvidenceCase) -> str:
    """The case's task as the resolver sees it: its queries, joined."""
    return " ".join(case.queries)


def resolve_evidence(passages: Sequence[Passage], principal: Principal, valid_at: dt.date,
                     query: str | None, relevance: Mapping[str, float] | None = None) -> Decision:
    """The one call into ``quarry.core.evidence.resolve.resolve`` for evaluation (the runner and the
    counterfactuals): ``query`` lets the resolver tell governing from related evidence;
    ``relevance`` are the passages' cosines to it (:func:`~quarry.core.search.resolution.relevance_to`)."""
    return resolver.resolve(list(passages), principal, valid_at, query=query, relevance=relevance)


# --------------------------------------------------------------------------- per-case outcome


class QueryTrace(FrozenModel):
    """One search of a case, ids only (never text)."""

    query: str
    candidates: tuple[str, ...]  # passage ids in fused order
    survivors: tuple[str, ...]
    delivered: tuple[str, ...]
    generation: int


class CaseOutcome(FrozenModel):
    """One run of a case: at one final width, as one principal (``id`` says which)."""

    id: str  # outcome_id(case_id, width, groups)
    case_id: str
    split: Split
    width: int  # the final k the searches asked for
    groups: tuple[str, ...]  # the principal's groups
    kinds: tuple[str, ...]
    tenant: str
    answerable: bool
    queries: tuple[QueryTrace, ...]
    candidates: bool  # every minimum-evidence id among the candidates
    candidate_recall: float | None  # fraction of minimum-evidence ids among the candidates
    second_stage: bool
    delivered: bool
    resolution: bool
    first_lost: str | None  # the first boundary the case failed, None when it survived all
    precision: float | None  # relevant delivered excerpts / delivered excerpts
    abstained: bool | None  # unanswerable cases only: honest abstention
    asserted_by: tuple[str, ...] = ()  # unanswerable: selected passages holding every decisive term
    failures: tuple[str, ...] = ()
    leaks: tuple[str, ...] = ()
    decision: Decision


@dataclass
class CaseContext:
    """What a case's run leaves behind for counterfactuals: the index, the principal, the
    evidence the decision was made over (delivered excerpts in delivery order, then any
    passage the path's contradiction search added) and the decision."""

    case: EvidenceCase
    index: Any
    principal: Principal
    delivered: list[Passage]
    decision: Decision
    results: list[SearchResult] = field(default_factory=list)
    width: int = TOP_K_DEFAULT
    outcome_id: str = ""
    query_vector: Any = None  # the case question's vector (the embedder's), for re-resolving

    def relevance(self, passages: Sequence[Passage]) -> dict[str, float] | None:
        """The passages' cosines to the case question (None without its vector or for a
        hashing-embedder index, as :func:`~quarry.core.search.resolution.question_relevance`)."""
        if self.query_vector is None or EmbedderSpec.from_manifest(self.index.manifest).hashing:
            return None
        return relevance_to(self.index, self.query_vector, passages)

    @property
    def label(self) -> str:
        return self.outcome_id or self.case.id


def leaks_of(case: EvidenceCase, index, principal: Principal, result: SearchResult) -> list[str]:
    """Ids in a result that the principal must not see: not a passage of its tenant's index,
    another tenant's envelope, an ACL the groups cannot read, or a listed foreign doc."""
    ids = [c.passage_id for c in result.candidates] + [e.passage_id for e in result.excerpts]
    if result.decision is not None:
        ids += list(decision_verdicts(result.decision))
    out = []
    for pid in dict.fromkeys(ids):
        p = index.passage(pid, principal)
        if p is None:
            out.append(f"{pid}: not a passage this principal can read in tenant {principal.tenant!r}")
        elif p.tenant != principal.tenant or not principal.can_read(p.tenant, p.envelope.acl):
            out.append(f"{pid}: belongs to tenant {p.tenant!r} / acl {list(p.envelope.acl)}")
        elif any(matches(f, pid) for f in case.foreign):
            out.append(f"{pid}: listed as another tenant's document")
    return out


def run_case(case: EvidenceCase, index, embedder, settings, second_stage=None,
             search_fn: Callable[..., SearchResult] | None = None, *, width: int | None = None,
             groups: Sequence[str] | None = None, suffix: bool = True) -> tuple[CaseOutcome, CaseContext]:
    """Run ``case`` at final width ``width`` (default: its ``top_k``) as the principal with
    ``groups`` (default: the case's groups) and score it. The outcome id names the width
    and the principal (``outcome_id``) unless ``suffix`` is False."""
    search_fn = search_fn or run_search
    k = case.top_k if width is None else width
    groups = tuple(case.groups if groups is None else groups)
    principal = case.principal(groups=groups)
    traces, results, leaks = [], [], []
    delivered: dict[str, Passage] = {}
    for q in case.queries:
        req = SearchRequest(query=q, top_k=k, doc_type=case.doc_type,
                            valid_at=case.valid_at if case.filter_valid_at else None)
        res = search_fn(index, principal, req, embedder, settings, second_stage)
        results.append(res)
        leaks += leaks_of(case, index, principal, res)
        for e in res.excerpts:
            p = index.passage(e.passage_id, principal)
            if p is not None:
                delivered.setdefault(p.passage_id, p)
        traces.append(QueryTrace(query=q, candidates=tuple(c.passage_id for c in res.candidates),
                                 survivors=tuple(survivors(res, k)),
                                 delivered=tuple(e.passage_id for e in res.excerpts), generation=res.generation))
    # The path's own decision when it answers the case exactly (one query, same date);
    # otherwise resolve over everything the run delivered (and its evidence-graph
    # neighbours, as one search does), as of the case's date.
    only = results[0].decision if len(results) == 1 else None
    if only is not None and only.valid_at == case.valid_at:
        decision = only
    else:
        decision = resolve_delivered(index, principal, case_query(case), list(delivered.values()), case.valid_at,
                                     settings, embedder)
    # The evidence the decision was made over: the excerpts, plus whatever the graph or
    # the contradiction search folded in (counterfactuals re-resolve exactly this set).
    evidence = dict(delivered)
    for pid in decision_verdicts(decision):
        if pid not in evidence and (p := index.passage(pid, principal)) is not None:
            evidence[pid] = p

    cand = {p for t in traces for p in t.candidates}
    surv = {p for t in traces for p in t.survivors}
    deliv = {p for t in traces for p in t.delivered}
    need = case.minimum_evidence
    in_cand = [m for m in need if _any(m, cand)]
    stages = {
        "candidates": len(in_cand) == len(need),
        "second_stage": all(_any(m, surv) for m in need),
        "delivered": all(_any(m, deliv) for m in need),
    }
    fails = resolution_failures(case, decision)
    stages["resolution"] = not fails
    for m in need:
        if not _any(m, cand):
            fails.insert(0, f"{m}: not among the candidates")
    first_lost = next((b for b, _, _ in BOUNDARIES if not stages[b]), None) if case.answerable else None

    all_delivered = [p for t in traces for p in t.delivered]
    precision = None
    if case.answerable and all_delivered:
        rel = case.relevant_ids
        precision = sum(1 for p in all_delivered if _any_rel(rel, p)) / len(all_delivered)
    elif case.answerable:
        precision = 0.0

    abstained, asserted = None, ()
    if not case.answerable:
        texts = {pid: p.text for pid, p in delivered.items()}
        asserted = tuple(s.passage_id for s in decision.selected
                         if holds_terms(_text_of(s.passage_id, texts, index, principal), case.decisive_terms))
        abstained = not asserted
        if asserted:
            fails.append("selected evidence holds every decisive term: " + ", ".join(asserted))

    oid = outcome_id(case.id, k if suffix else None, groups)
    outcome = CaseOutcome(
        id=oid, case_id=case.id, split=case.split, width=k, groups=groups, kinds=case.kinds, tenant=case.tenant,
        answerable=case.answerable, queries=tuple(traces),
        candidates=stages["candidates"], candidate_recall=(len(in_cand) / len(need)) if need else None,
        second_stage=stages["second_stage"], delivered=stages["delivered"], resolution=stages["resolution"],
        first_lost=first_lost, precision=precision, abstained=abstained, asserted_by=asserted,
        failures=tuple(fails), leaks=tuple(leaks), decision=decision,
    )
    qvec = embedder.encode([case_query(case)])[0] if embedder is not None else None
    return outcome, CaseContext(case, index, principal, list(evidence.values()), decision, results, width=k,
                                outcome_id=oid, query_vector=qvec)


def _any_rel(relevant: frozenset[str], passage_id: str) -> bool:
    return any(matches(r, passage_id) for r in relevant)


def _text_of(pid: str, texts: dict[str, str], index, principal: Principal) -> str:
    if pid in texts:
        return texts[pid]
    p = index.passage(pid, principal)
    return p.text if p is not None else ""


class IndexMissing(FileNotFoundError):
    """No published index for a case's tenant under the index root."""


def load_tenant(index_root: str, tenant: str, generation: int | None = None):
    """(index, embedder, second_stage) for a tenant's live (or given) generation, as serving
    loads them: the embedder the manifest names and the gate-promoted second stage."""
    if generation is None and layout.current_generation(index_root, tenant) is None:
        raise IndexMissing(f"no published index for tenant {tenant!r} under {index_root}; build one with "
                           f"`quarry build --source quarry/sample_corpus --index-root {index_root}`")
    index = TenantIndex.load(index_root, tenant, generation)
    second, _decision = load_second_stage(index_root, tenant, index.generation)
    return index, embedder_for_index(index.manifest), second
