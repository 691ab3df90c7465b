"""Resolution (DESIGN §4): the evidence a decision is made over, and the decision.

:func:`gather_evidence` collects the delivered passages, their evidence-graph neighbours
under the same principal and ``valid_at``, and their stored facts; only when the graph
links nothing does the contradiction search run (a few narrow first stages).
:func:`resolve_stage` is then a pure function of that evidence (the Resolver deployment
runs exactly it).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from quarry.core.embed.embedders import Embedder
from quarry.core.embed.factory import EmbedderSpec
from quarry.core.evidence.graph import EvidenceSet, facts_for, neighbours
from quarry.core.evidence.resolve import follow_up_queries
from quarry.core.evidence.resolve import resolve as resolve_evidence
from quarry.core.evidence.rules import outside_dates
from quarry.core.index.shards import TenantIndex
from quarry.core.records import Decision, Passage, Principal, SearchRequest, StageReport
from quarry.core.search.records import FirstStage, FollowUp, Resolution
from quarry.core.search.retrieval import first_stage
from quarry.core.search.settings import SearchSettings


def plan_resolution(passages: Sequence[Passage], principal: Principal, valid_at: dt.date | None,
                    settings: SearchSettings, authority: Mapping[str, int] | None = None,
                    ) -> tuple[Decision, tuple[str, ...]]:
    """The first decision over the delivered passages and the contradiction-search
    queries it asks for (deduplicated, at most ``settings.max_follow_ups``)."""
    decision = resolve_evidence(passages, principal, valid_at, authority)
    queries = tuple(dict.fromkeys(q.strip() for q in follow_up_queries(decision, passages) if q.strip()))
    return decision, queries[: settings.max_follow_ups]


def follow_up_request(request: SearchRequest, query: str, settings: SearchSettings) -> SearchRequest:
    """A follow-up keeps the request's filters (doc_type, valid_at) at a small width."""
    return SearchRequest(query=query[:2000], top_k=settings.follow_up_width, doc_type=request.doc_type,
                         valid_at=request.valid_at)


def follow_up_found(query: str, first: FirstStage, known: set[str] | frozenset[str],
                    settings: SearchSettings) -> FollowUp:
    """The follow-up's top candidates not already among the delivered passages."""
    found = tuple(c.passage_id for c in first.candidates[: settings.follow_up_width] if c.passage_id not in known)
    return FollowUp(query=query, found=found, generation=first.generation)


def gather_evidence(
    index: TenantIndex, principal: Principal, request: SearchRequest, delivered: Sequence[Passage],
    settings: SearchSettings, encode: Callable[[list[str]], Sequence[np.ndarray]] | None = None,
    pool: Sequence[Passage] = (),
) -> EvidenceSet:
    """What resolution decides over: the delivered passages, their neighbours in the
    evidence graph (what supersedes them, the events that can end their conditions, other
    values for their subjects: lookups, no encoding) under the principal's mask at
    ``valid_at``, and every passage's stored facts. ``pool`` (the ranked candidates after
    the delivered ones, :func:`quarry.core.search.expansion.pool_passages`) is decided over
    like the delivered passages and reported only where it takes part. Only when the graph
    links the delivered passages to nothing does the query-based contradiction search run (at
    most ``max_follow_ups`` narrow first stages, ``encode`` batching their dense encodings)."""
    ids = [p.passage_id for p in delivered]
    shown = set(ids)
    pooled = [p for p in pool if p.passage_id not in shown and principal.can_read(p.tenant, p.envelope.acl)]
    pooled = pooled[: max(0, settings.resolution_pool - len(ids))]
    pooled_ids = [p.passage_id for p in pooled]
    linked = neighbours(index, principal, request.valid_at, ids + pooled_ids, settings.graph_hops,
                        settings.graph_limit) if settings.graph_hops and ids else []
    linked = [pid for pid in linked if pid not in set(pooled_ids)]
    added = [p for p in (index.passage(pid, principal) for pid in linked) if p is not None]
    follow_ups: list[FollowUp] = []
    if not added and ids and settings.max_follow_ups:
        _, queries = plan_resolution(delivered, principal, request.valid_at, settings)
        known = set(ids)
        narrow = settings.model_copy(update={"candidate_width": settings.follow_up_width})
        dense = settings.follow_up_dense and encode is not None
        vectors = list(encode(list(queries))) if dense and queries else [None] * len(queries)  # one batch
        for q, vec in zip(queries, vectors):
            fs = first_stage(index, principal, follow_up_request(request, q, settings), None, narrow, vec,
                             dense=dense)
            fu = follow_up_found(q, fs, known, settings)
            follow_ups.append(fu)
            for pid in fu.found:
                if (p := index.passage(pid, principal)) is not None:
                    added.append(p)
                    known.add(pid)
    outside = out_of_force(index, principal, request, settings, encode,
                           {*ids, *pooled_ids, *(p.passage_id for p in added)})
    passages = (*delivered, *pooled, *added, *outside)
    return EvidenceSet(passages=passages, delivered=tuple(ids), pooled=tuple(pooled_ids),
                       out_of_force=tuple(p.passage_id for p in outside),
                       facts=facts_for(index, [p.passage_id for p in passages]),
                       from_graph=tuple(p.passage_id for p in added if p.passage_id in set(linked)),
                       follow_ups=tuple(follow_ups),
                       relevance=question_relevance(index, request.query, passages, encode))


def out_of_force(index: TenantIndex, principal: Principal, request: SearchRequest, settings: SearchSettings,
                 encode: Callable[[list[str]], Sequence[np.ndarray]] | None, known: set[str]) -> list[Passage]:
    """Passages the ``valid_at`` filter kept from delivery that the same search without it
    ranks among its first ``resolution_pool`` candidates (at most ``out_of_force`` of them):
    a rule that starts next week, an offer that lapsed. Resolution rejects each as
    ``not_yet_effective`` or ``no_longer_effective``, so the decision says what changes
    soon or what no longer holds, instead of staying silent about it. Only the validity
    filter is lifted: the principal's tenant, ACL, tombstones and ``doc_type`` mask the
    search as before, so nothing the principal may not read is ever scored."""
    if request.valid_at is None or not settings.out_of_force or not settings.resolution_pool:
        return []
    day = request.valid_at
    vector = list(encode([request.query]))[0] if encode is not None else None
    wide = SearchRequest(query=request.query, top_k=settings.resolution_pool, doc_type=request.doc_type)
    fs = first_stage(index, principal, wide, None, settings.model_copy(update={"candidate_width": settings.resolution_pool}),
                     vector, dense=vector is not None)
    out: list[Passage] = []
    for c in fs.candidates[: settings.resolution_pool]:
        if c.passage_id in known or (p := index.passage(c.passage_id, principal)) is None:
            continue
        if outside_dates(p.envelope, day):
            out.append(p)
            if len(out) == settings.out_of_force:
                break
    return out


def question_relevance(index: TenantIndex, query: str, passages: Sequence[Passage],
                       encode: Callable[[list[str]], Sequence[np.ndarray]] | None) -> dict[str, float]:
    """Each passage's cosine to the question: its stored dense vector (the index's, read
    back, never re-encoded) against the question's (``encode``; the search's own encoding,
    from the query cache when serving). Empty without an encoder, and for an index built
    with the hashing embedder: it places texts by their words, which the question's tiers
    already count, so its cosines say nothing of meaning."""
    if encode is None or not passages or not query.strip() or EmbedderSpec.from_manifest(index.manifest).hashing:
        return {}
    return relevance_to(index, list(encode([query]))[0], passages)


def relevance_to(index: TenantIndex, query_vector: np.ndarray, passages: Sequence[Passage]) -> dict[str, float]:
    """Cosine of each passage's stored dense vector to ``query_vector``."""
    q = np.asarray(query_vector, dtype=np.float32)
    q = q / (np.linalg.norm(q) or 1.0)
    out: dict[str, float] = {}
    for p in passages:
        v = index.passage_vector(p.passage_id)
        if v is not None and v.shape == q.shape:
            out[p.passage_id] = float(q @ (v / (np.linalg.norm(v) or 1.0)))
    return out


def resolve_stage(request: SearchRequest, evidence: EvidenceSet, principal: Principal,
                  authority: Mapping[str, int] | None = None) -> Resolution:
    """The resolution stage: a pure function of the question and the evidence it is given
    (the Resolver deployment runs exactly this)."""
    decision = resolve_evidence(evidence.passages, principal, request.valid_at, authority, query=request.query,
                                facts=evidence.facts, delivered=(*evidence.delivered, *evidence.pooled),
                                relevance=evidence.relevance)
    if evidence.pooled:  # a pooled passage that takes no part is no excerpt of this search: not listed
        shown = set(evidence.delivered)
        decision = decision.model_copy(update={"related": tuple(r for r in decision.related if r.passage_id in shown)})
    fus = evidence.follow_ups
    added = sum(len(f.found) for f in fus)
    note = (f"{len(decision.governing)} governing, {len(decision.supporting)} supporting, "
            f"{len(decision.unresolved)} unresolved, {len(decision.related)} related; evidence graph added "
            f"{len(evidence.from_graph)} passage(s)"
            + (f"; {len(evidence.out_of_force)} passage(s) not in force at valid_at decided over"
               if evidence.out_of_force else "")
            + (f"; contradiction search: {len(fus)} follow-up quer{'y' if len(fus) == 1 else 'ies'} added "
               f"{added} passage(s)" if fus else ""))
    return Resolution(decision=decision, follow_ups=tuple(fus),
                      report=StageReport(name="resolve", kept=len(decision.selected), dropped=len(decision.rejected),
                                         note=note))


def nothing_resolved(request: SearchRequest) -> Resolution:
    decision = Decision(valid_at=request.valid_at or dt.date.today())
    return Resolution(decision=decision, report=StageReport(name="resolve", kept=0, note="nothing to resolve"))


def resolve_delivered(index: TenantIndex, principal: Principal, query: str, delivered: Sequence[Passage],
                      valid_at: dt.date | None, settings: SearchSettings = SearchSettings(),
                      embedder: Embedder | None = None) -> Decision:
    """Resolution over passages delivered by several searches (an agent's run, evaluation):
    the same graph step and resolver as one search."""
    request = SearchRequest(query=query[:2000] or "-", top_k=1, valid_at=valid_at)
    encode = embedder.encode if embedder is not None else None
    return resolve_stage(request, gather_evidence(index, principal, request, delivered, settings, encode),
                         principal).decision
