"""One search call (DESIGN §4) as separate stages, composed in one order everywhere:

1. :func:`first_stage`: the principal's mask, lexical and dense legs with floors, RRF;
2. :func:`apply_second_stage`: a ranker's output (ids, scores, ranks) applied to the
   fused candidates, or the fused top-k when none ran;
3. :func:`expansion`: survivors expanded to parent sections under a token ceiling;
4. resolution: :func:`gather_evidence` (the delivered passages, their evidence-graph
   neighbours under the same principal and ``valid_at``, their stored facts; the
   contradiction search through :func:`first_stage` only when the graph links nothing),
   then :func:`resolve_stage`, a pure function of that evidence;
5. :func:`assemble`: the response, each excerpt carrying its verdict.

:func:`search` runs them in-process (``quarry search``, evaluation, tests). The Serve
Gateway composes the same functions through its deployments, passing the records of
``quarry.core.search.records``; nothing here calls back into serve. The mask is applied
inside each leg, so a denied passage is never scored, fused, reranked, expanded, resolved
or cited. Candidates keep each leg's rank for the trace (ids only, never text).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from quarry.core.embed.embedders import Embedder
from quarry.core.evidence.graph import EvidenceSet, facts_for, neighbours
from quarry.core.index.filters import validity
from quarry.core.search.fusion import rrf
from quarry.core.index.rows import pack_row
from quarry.core.index.shards import TenantIndex
from quarry.core.records import (
    TOP_K_CEILING,
    TOP_K_MAX,
    Candidate,
    Decision,
    Excerpt,
    Passage,
    Principal,
    SearchRequest,
    SearchResult,
    StageReport,
)
from quarry.core.evidence.resolve import follow_up_queries
from quarry.core.evidence.resolve import resolve as resolve_evidence
from quarry.core.search.records import (
    Expansion,
    FirstStage,
    FollowUp,
    RankedCandidate,
    RerankOutcome,
    Resolution,
    Survivors,
    StageInfo,
)
from quarry.core.text.units import count_tokens
from quarry.core.text.tokenizer import identifiers, is_lookup, tokenize

class SearchSettings(BaseModel):
    """Server-side search configuration, validated once at the edge."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    rrf_k: int = Field(60, ge=0)
    lexical_width: int = Field(50, ge=1, le=1000)
    dense_width: int = Field(50, ge=1, le=1000)
    candidate_width: int = Field(50, ge=1, le=1000)
    lexical_weight: float = Field(1.0, ge=0)
    dense_weight: float = Field(1.0, ge=0)
    lexical_floor: float = Field(0.0, ge=0, description="BM25 hits must score strictly above this")
    dense_floor: float = Field(0.15, ge=-1, le=1, description="cosine hits must score strictly above this")
    top_k_ceiling: int = Field(TOP_K_CEILING, ge=1, le=TOP_K_MAX)
    delivered_token_ceiling: int = Field(1500, ge=16)
    expand: bool = True
    pin_identifiers: bool = Field(
        True, description="for identifier lookups, passages holding every queried identifier verbatim rank first")
    follow_up_width: int = Field(3, ge=1, le=50, description="candidates each contradiction-search query adds")
    max_follow_ups: int = Field(2, ge=0, le=10, description="contradiction-search queries per search")
    graph_hops: int = Field(3, ge=0, le=6, description="evidence-graph links followed from the delivered "
                                                      "passages (0: off)")
    graph_limit: int = Field(48, ge=1, le=500, description="passages the evidence graph may add to one resolution")
    follow_up_dense: bool = Field(
        True, description="contradiction-search queries run the dense leg too (their encodings are batched); "
                          "off: BM25 only, no encoding, cheaper but noisier (README, Resolve)")


@dataclass(frozen=True)
class LegHits:
    """One leg's ranked hits: tenant-wide row ids and scores, best first."""

    rows: tuple[int, ...]
    scores: tuple[float, ...]
    dropped: int  # visible hits the floor removed
    exact: frozenset[int] = frozenset()  # rows holding every identifier of the query verbatim

    def ranks(self) -> dict[int, int]:
        return {r: i for i, r in enumerate(self.rows, start=1)}


def _merge(index: TenantIndex, per_shard, width: int) -> tuple[tuple[int, ...], tuple[float, ...]]:
    """Merge per-shard hits by score; ties break by passage id so sharding never changes order."""
    items = []
    for si, (rows, scores) in enumerate(per_shard):
        sh = index.shards[si]
        items.extend((float(s), sh.passage_ids[int(r)], pack_row(si, int(r))) for r, s in zip(rows, scores))
    items.sort(key=lambda t: (-t[0], t[1]))
    items = items[:width]
    return tuple(t[2] for t in items), tuple(t[0] for t in items)


def lexical_leg(index: TenantIndex, masks: Sequence[np.ndarray], query: str, width: int, floor: float) -> LegHits:
    tokens = tokenize(query)
    idents = identifiers(tokens) if is_lookup(tokens) else []
    per_shard, dropped, exact = [], 0, set()
    for si, (sh, m) in enumerate(zip(index.shards, masks)):
        rows, scores = sh.lexical(sh.vocab_ids(tokens), m, width, floor=0.0)
        keep = scores > floor
        dropped += int((~keep).sum())
        rows, scores = rows[keep], scores[keep]
        per_shard.append((rows, scores))
        if idents and rows.size:
            has_all = np.ones(rows.size, dtype=bool)
            for ident in idents:
                ids = sh.vocab_ids([ident])
                if not ids:
                    has_all[:] = False
                    break
                has_all &= sh.bm25.get_scores_from_ids(ids)[rows] > 0
            exact.update(pack_row(si, int(r)) for r in rows[has_all])
    rows, scores = _merge(index, per_shard, width)
    return LegHits(rows, scores, dropped, frozenset(exact) & frozenset(rows))


def dense_leg(index: TenantIndex, masks: Sequence[np.ndarray], qvec: np.ndarray, width: int, floor: float) -> LegHits:
    per_shard, dropped = [], 0
    for sh, m in zip(index.shards, masks):
        rows, scores = sh.dense_search(qvec, m, width, floor=-1.0 - 1e-6)
        keep = scores > floor
        dropped += int((~keep).sum())
        per_shard.append((rows[keep], scores[keep]))
    rows, scores = _merge(index, per_shard, width)
    return LegHits(rows, scores, dropped)


def fuse(lex: LegHits, den: LegHits, index: TenantIndex, settings: SearchSettings) -> list[Candidate]:
    """RRF over the two legs; candidates keep both legs' ranks and scores."""
    pid = lambda gid: index.shards[gid >> 32].passage_ids[gid & 0xFFFFFFFF]  # noqa: E731
    lists = [[pid(r) for r in lex.rows], [pid(r) for r in den.rows]]
    fused = rrf(lists, k=settings.rrf_k, weights=[settings.lexical_weight, settings.dense_weight])
    if settings.pin_identifiers and lex.exact:
        exact_ids = {pid(r) for r in lex.exact}
        fused.sort(key=lambda kv: kv[0] not in exact_ids)  # stable: RRF order within each tier
    lr, dr = lex.ranks(), den.ranks()
    ls = dict(zip(lex.rows, lex.scores))
    ds = dict(zip(den.rows, den.scores))
    out = []
    for rank, (passage_id, score) in enumerate(fused[: settings.candidate_width], start=1):
        gid = index.row_of(passage_id)
        out.append(Candidate(
            passage_id=passage_id, doc_id=index.shards[gid >> 32].doc_ids[gid & 0xFFFFFFFF], row=gid,
            lexical_rank=lr.get(gid), lexical_score=ls.get(gid), dense_rank=dr.get(gid), dense_score=ds.get(gid),
            fused_rank=rank, fused_score=score, exact_match=gid in lex.exact,
        ))
    return out


def truncate_tokens(text: str, limit: int) -> str:
    """The longest prefix of ``text`` (cut at a word boundary) within ``limit`` tokens."""
    if count_tokens(text) <= limit:
        return text
    words = text.split(" ")
    lo, hi = 0, len(words)
    while lo < hi:  # binary search on word count
        mid = (lo + hi + 1) // 2
        if count_tokens(" ".join(words[:mid])) <= limit:
            lo = mid
        else:
            hi = mid - 1
    return " ".join(words[:lo])


def excerpt(p: Passage, text: str | None = None, expanded_to: str | None = None, truncated: bool = False,
            valid_at: dt.date | None = None, token_count: int | None = None) -> Excerpt:
    """The one envelope view of a passage, as search delivers it and fetch returns it:
    ``text`` is what is shown (default the passage's own), ``expanded_to`` the parent
    section it was expanded to; ``token_count`` is text's count when the caller has it
    (the index stores one per passage and section)."""
    e = p.envelope
    text = p.text if text is None else text
    return Excerpt(
        passage_id=p.passage_id, doc_id=e.doc_id, version=e.version, anchor=p.anchor, heading_path=p.heading_path,
        parent_id=p.parent_id,
        title=e.title, doc_type=e.doc_type, text=text, expanded_to=expanded_to, truncated=truncated,
        effective_from=e.effective_from, effective_to=e.effective_to, validity=validity(e, valid_at),
        authority=e.authority, authority_rank=e.authority_rank, entities=e.entities, supersedes=e.supersedes,
        superseded_by=e.superseded_by, condition=e.condition, events=e.events, source_url=e.source_url,
        token_count=count_tokens(text) if token_count is None else token_count,
    )


def expand(
    index: TenantIndex, principal: Principal, passages: Sequence[Passage], ceiling: int,
    valid_at: dt.date | None, do_expand: bool = True,
) -> tuple[list[Excerpt], bool]:
    """Deliver survivors in order, each expanded to its parent section when that fits the
    remaining token budget, else its own text, else a truncated prefix (flagged). The
    total never exceeds ``ceiling``; anything cut or left out sets ``truncated``."""
    out: list[Excerpt] = []
    left, truncated = ceiling, False
    delivered_parents: set[str] = set()
    for p in passages:
        if left <= 0:
            truncated = True
            break
        parent = index.parent(p.parent_id, principal) if do_expand else None
        if parent is not None and parent.parent_id not in delivered_parents and parent.text != p.text:
            n = parent.token_count  # counted at build time (count_tokens), like p.token_count
            if n <= left:
                out.append(excerpt(p, parent.text, parent.parent_id, False, valid_at, n))
                delivered_parents.add(parent.parent_id)
                left -= n
                continue
        n = p.token_count
        if n <= left:
            out.append(excerpt(p, p.text, None, False, valid_at, n))
            left -= n
        else:
            cut = truncate_tokens(p.text, left)
            truncated = True
            if cut:
                ex = excerpt(p, cut, None, True, valid_at)
                out.append(ex)
                left -= ex.token_count
            break
    return out, truncated


def empty_message(request: SearchRequest) -> str:
    """What was tried and what to change. It never hints at evidence the caller cannot see."""
    filters = []
    if request.doc_type:
        filters.append(f"doc_type ({len(request.doc_type)} types)")  # never echo the values (issue 13)
    if request.valid_at:
        filters.append(f"valid_at={request.valid_at.isoformat()}")
    tried = "lexical (exact terms and identifiers) and semantic search over the documents you can access"
    if filters:
        tried += " with filters " + ", ".join(filters)
    advice = ["rephrase with the terms a source document would use", "search for an exact identifier or name"]
    if filters:
        advice.insert(0, "remove or widen the filters")
    return f"No evidence found. Tried {tried}. To change: " + "; ".join(advice) + "."




# -- 1. first stage ------------------------------------------------------------------

def candidate_width(settings: SearchSettings, requested: int | None, top_k: int) -> int:
    """The fused width handed to the second stage: the request's (server-capped upstream)
    or the configured one, never fewer than ``top_k``."""
    return max(requested or settings.candidate_width, top_k)


def first_stage(
    index: TenantIndex,
    principal: Principal,
    request: SearchRequest,
    embedder: Embedder | None,
    settings: SearchSettings = SearchSettings(),
    query_vector: np.ndarray | None = None,
    dense: bool = True,
) -> FirstStage:
    """Filter -> legs -> fuse: the one first stage that serving, ``quarry search``, ranker
    training and evaluation all run. ``query_vector`` skips encoding (callers that encode
    queries in batches); otherwise ``embedder`` encodes ``request.query``. ``dense=False``
    runs the lexical leg only (contradiction search, unless ``follow_up_dense``)."""
    if principal.tenant != index.tenant:
        raise PermissionError("principal and index belong to different tenants")
    masks = index.masks(principal, request.doc_type, request.valid_at)
    visible = int(sum(int(m.sum()) for m in masks))
    stages = [StageReport(name="filter", kept=visible, note="rows visible to the principal under the filters")]
    lex = lexical_leg(index, masks, request.query, settings.lexical_width, settings.lexical_floor)
    stages.append(StageReport(name="lexical", kept=len(lex.rows), dropped=lex.dropped))
    if not dense:
        den = LegHits((), (), 0)
        stages.append(StageReport(name="dense", kept=0, note="off: lexical leg only"))
    else:
        if query_vector is None:
            if embedder is None:
                raise ValueError("first_stage needs an embedder or a query_vector")
            query_vector = embedder.encode([request.query])[0]
        den = dense_leg(index, masks, query_vector, settings.dense_width, settings.dense_floor)
        stages.append(StageReport(name="dense", kept=len(den.rows), dropped=den.dropped))
    cands = fuse(lex, den, index, settings)
    union = len(set(lex.rows) | set(den.rows))
    stages.append(StageReport(name="fuse", kept=len(cands), dropped=union - len(cands)))
    return FirstStage(tenant=index.tenant, generation=index.generation, candidates=tuple(cands),
                      stages=tuple(stages), lexical_rows=lex.rows, dense_rows=den.rows)


def no_first_stage(tenant: str, generation: int = 0) -> FirstStage:
    """What a tenant without a published index gets: the same shape as finding nothing."""
    return FirstStage(tenant=tenant, generation=generation, candidates=(),
                      stages=(StageReport(name="filter", kept=0),))


# -- 2. second stage -----------------------------------------------------------------

# An in-process second stage: given the query and the fused candidates (with their
# passages), return the kept candidates reordered, each carrying rerank_score/rerank_rank.
# quarry.core.rank.model and quarry.core.rank.gate provide implementations; None keeps the fused order.
SecondStage = Callable[[str, Sequence[Candidate], Sequence[Passage], int], list[Candidate]]


def rerank_in_process(stage: SecondStage, query: str, candidates: Sequence[Candidate],
                      passages: Sequence[Passage], top_k: int, info: StageInfo | None = None) -> RerankOutcome:
    """Run an in-process second stage and return its output as the Reranker deployment does."""
    ranked = stage(query, candidates, passages, top_k)
    return RerankOutcome(status="applied", info=info or StageInfo(enabled=True, name=getattr(stage, "name", None)),
                         ranked=tuple(RankedCandidate(passage_id=c.passage_id, rerank_score=float(c.rerank_score),
                                                      rerank_rank=int(c.rerank_rank)) for c in ranked))


def _rerank_note(outcome: RerankOutcome | None) -> str:
    if outcome is None:
        return "skipped: fused order stands"
    if outcome.status == "applied":
        i = outcome.info
        note = " ".join(x for x in (i.kind, "second stage", i.name) if x)
        return note + (" (promoted by this index's gate)" if i.kind == "learned" else "")
    if outcome.status == "failed":
        return "skipped: the second stage was unavailable; fused order stands"
    return "skipped: no second stage is enabled for this index; fused order stands"


def apply_second_stage(first: FirstStage, outcome: RerankOutcome | None, top_k: int) -> Survivors:
    """Apply a second stage's ranked ids to the fused candidates. Without an applied stage
    the fused top-k survive. Relevance order only: resolution never reorders it."""
    cands = first.candidates
    if outcome is None or outcome.status != "applied":
        kept = tuple(c.passage_id for c in cands[:top_k])
        return Survivors(candidates=cands, survivors=kept, status=outcome.status if outcome else "skipped",
                         report=StageReport(name="rerank", kept=len(kept), dropped=len(cands) - len(kept),
                                            note=_rerank_note(outcome)))
    by_id = {c.passage_id: c for c in cands}
    unknown = [r.passage_id for r in outcome.ranked if r.passage_id not in by_id]
    if unknown:  # a stage may only reorder what the first stage let through
        raise ValueError(f"second stage returned {len(unknown)} id(s) that are not candidates, e.g. {unknown[0]!r}")
    for r in outcome.ranked:
        by_id[r.passage_id] = by_id[r.passage_id].model_copy(
            update={"rerank_score": r.rerank_score, "rerank_rank": r.rerank_rank})
    kept = tuple(r.passage_id for r in outcome.ranked[:top_k])
    return Survivors(candidates=tuple(by_id[c.passage_id] for c in cands), survivors=kept, status="applied",
                     report=StageReport(name="rerank", kept=len(kept), dropped=len(cands) - len(kept),
                                        note=_rerank_note(outcome)))


# -- 3. expansion --------------------------------------------------------------------

def survivor_passages(index: TenantIndex, first: FirstStage, survivors: Sequence[str],
                      parsed: Mapping[str, Passage] | None = None) -> list[Passage]:
    """The survivors' passages in delivered order, read by row (the first stage's mask let
    them through), reusing any the second stage already parsed."""
    rows = {c.passage_id: c.row for c in first.candidates}
    parsed = parsed or {}
    return [parsed.get(pid) or index.passage_at(rows[pid]) for pid in survivors]


def expansion(index: TenantIndex, principal: Principal, passages: Sequence[Passage],
              settings: SearchSettings, valid_at: dt.date | None) -> Expansion:
    excerpts, truncated = expand(index, principal, passages, settings.delivered_token_ceiling, valid_at,
                                 settings.expand)
    return Expansion(excerpts=tuple(excerpts), truncated=truncated,
                     report=StageReport(name="expand", kept=len(excerpts), dropped=len(passages) - len(excerpts),
                                        note="truncated" if truncated else ""))


def nothing_expanded() -> Expansion:
    return Expansion(excerpts=(), truncated=False, report=StageReport(name="expand", kept=0))


# -- 4. resolution -------------------------------------------------------------------

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
) -> EvidenceSet:
    """What resolution decides over: the delivered passages, their neighbours in the
    evidence graph (what supersedes them, the events that can end their conditions, other
    values for their subjects: lookups, no encoding) under the principal's mask at
    ``valid_at``, and every passage's stored facts. Only when the graph links the delivered
    passages to nothing does the query-based contradiction search run (at most
    ``max_follow_ups`` narrow first stages, ``encode`` batching their dense encodings)."""
    ids = [p.passage_id for p in delivered]
    linked = neighbours(index, principal, request.valid_at, ids, settings.graph_hops, settings.graph_limit) \
        if settings.graph_hops and ids else []
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
    passages = (*delivered, *added)
    return EvidenceSet(passages=passages, delivered=tuple(ids),
                       facts=facts_for(index, [p.passage_id for p in passages]),
                       from_graph=tuple(p.passage_id for p in added if p.passage_id in set(linked)),
                       follow_ups=tuple(follow_ups))


def resolve_stage(request: SearchRequest, evidence: EvidenceSet, principal: Principal,
                  authority: Mapping[str, int] | None = None) -> Resolution:
    """The resolution stage: a pure function of the question and the evidence it is given
    (the Resolver deployment runs exactly this)."""
    decision = resolve_evidence(evidence.passages, principal, request.valid_at, authority, query=request.query,
                                facts=evidence.facts, delivered=evidence.delivered)
    fus = evidence.follow_ups
    added = sum(len(f.found) for f in fus)
    note = (f"{len(decision.governing)} governing, {len(decision.supporting)} supporting, "
            f"{len(decision.unresolved)} unresolved, {len(decision.related)} related; evidence graph added "
            f"{len(evidence.from_graph)} passage(s)"
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


# -- 5. the response -----------------------------------------------------------------

def assemble(request: SearchRequest, first: FirstStage, second: Survivors, expanded: Expansion,
             resolution: Resolution | None) -> SearchResult:
    """The search result: excerpts in relevance order, each with its verdict; the decision."""
    decision = resolution.decision if resolution is not None else None
    excerpts = expanded.excerpts
    if decision is not None:
        excerpts = tuple(e.model_copy(update={"verdict": decision.verdict(e.passage_id)}) for e in excerpts)
    stages = [*first.stages, second.report, expanded.report] + ([resolution.report] if resolution else [])
    return SearchResult(
        excerpts=excerpts, candidates=second.candidates, stages=tuple(stages), generation=first.generation,
        delivered_tokens=sum(e.token_count for e in excerpts), truncated=expanded.truncated,
        message="" if excerpts else empty_message(request), decision=decision,
    )


def search(
    index: TenantIndex,
    principal: Principal,
    request: SearchRequest,
    embedder: Embedder | None,
    settings: SearchSettings = SearchSettings(),
    second_stage: SecondStage | None = None,
    resolve: bool = True,
    query_vector: np.ndarray | None = None,
) -> SearchResult:
    """One search in-process: the same stages, in the same order, as the Serve composition."""
    if request.top_k > settings.top_k_ceiling:
        raise ValueError(f"top_k {request.top_k} exceeds the server ceiling {settings.top_k_ceiling}")
    first = first_stage(index, principal, request, embedder, settings, query_vector)
    outcome = None
    by_row: dict[str, Passage] = {}
    if second_stage is not None and first.candidates:
        passages = [index.passage_at(c.row) for c in first.candidates]  # the second stage reads every candidate
        by_row = {p.passage_id: p for p in passages}
        outcome = rerank_in_process(second_stage, request.query, first.candidates, passages, request.top_k)
    second = apply_second_stage(first, outcome, request.top_k)
    survivors = survivor_passages(index, first, second.survivors, by_row)  # parse only these
    expanded = expansion(index, principal, survivors, settings, request.valid_at)
    resolution = None
    if resolve:
        delivered_ids = {e.passage_id for e in expanded.excerpts}
        delivered = [p for p in survivors if p.passage_id in delivered_ids]
        encode = embedder.encode if embedder is not None else None
        resolution = resolve_stage(request, gather_evidence(index, principal, request, delivered, settings, encode),
                                   principal)
    return assemble(request, first, second, expanded, resolution)


# Older name, kept for its many callers: the same composition.
hybrid_search = search
