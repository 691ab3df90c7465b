"""One search call (DESIGN §4): mask -> legs with floors -> RRF -> rerank -> expand -> cite.

The principal's mask is computed first and applied inside each leg, so a denied passage
is never scored, fused, reranked, expanded or cited. Every stage reports what it kept and
dropped; candidates keep each leg's rank for the trace (ids only, never text).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from quarry.core.embedding import Embedder
from quarry.core.filters import validity
from quarry.core.fusion import rrf
from quarry.core.index import TenantIndex, pack_row
from quarry.core.records import (
    Candidate,
    Excerpt,
    Passage,
    Principal,
    SearchRequest,
    SearchResult,
    StageReport,
)
from quarry.core.tokenizer import identifiers, is_lookup, tokenize


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
    top_k_ceiling: int = Field(20, ge=1)
    delivered_token_ceiling: int = Field(1500, ge=16)
    expand: bool = True
    pin_identifiers: bool = Field(
        True, description="for identifier lookups, passages holding every queried identifier verbatim rank first")


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


# A second stage: given the query and the fused candidates (with their passages), return
# the candidates reordered, each carrying rerank_score/rerank_rank. quarry.core.rerank
# provides implementations; None keeps the fused order.
SecondStage = Callable[[str, Sequence[Candidate], Sequence[Passage], int], list[Candidate]]


def _count_tokens(text: str) -> int:
    from quarry.core.chunking import count_tokens

    return count_tokens(text)


def truncate_tokens(text: str, limit: int) -> str:
    """The longest prefix of ``text`` (cut at a word boundary) within ``limit`` tokens."""
    if _count_tokens(text) <= limit:
        return text
    words = text.split(" ")
    lo, hi = 0, len(words)
    while lo < hi:  # binary search on word count
        mid = (lo + hi + 1) // 2
        if _count_tokens(" ".join(words[:mid])) <= limit:
            lo = mid
        else:
            hi = mid - 1
    return " ".join(words[:lo])


def _excerpt(p: Passage, text: str, expanded_to: str | None, truncated: bool, valid_at: dt.date | None) -> Excerpt:
    e = p.envelope
    return Excerpt(
        passage_id=p.passage_id, doc_id=e.doc_id, version=e.version, anchor=p.anchor, heading_path=p.heading_path,
        title=e.title, doc_type=e.doc_type, text=text, expanded_to=expanded_to, truncated=truncated,
        effective_from=e.effective_from, effective_to=e.effective_to, validity=validity(e, valid_at),
        authority=e.authority, authority_rank=e.authority_rank, entities=e.entities, supersedes=e.supersedes,
        superseded_by=e.superseded_by, condition=e.condition, events=e.events, source_url=e.source_url,
        token_count=_count_tokens(text),
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
            n = _count_tokens(parent.text)
            if n <= left:
                out.append(_excerpt(p, parent.text, parent.parent_id, False, valid_at))
                delivered_parents.add(parent.parent_id)
                left -= n
                continue
        n = _count_tokens(p.text)
        if n <= left:
            out.append(_excerpt(p, p.text, None, False, valid_at))
            left -= n
        else:
            cut = truncate_tokens(p.text, left)
            truncated = True
            if cut:
                ex = _excerpt(p, cut, None, True, valid_at)
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


def hybrid_search(
    index: TenantIndex,
    principal: Principal,
    request: SearchRequest,
    embedder: Embedder,
    settings: SearchSettings = SearchSettings(),
    second_stage: SecondStage | None = None,
    query_vector: np.ndarray | None = None,
) -> SearchResult:
    if principal.tenant != index.tenant:
        raise PermissionError("principal and index belong to different tenants")
    if request.top_k > settings.top_k_ceiling:
        raise ValueError(f"top_k {request.top_k} exceeds the server ceiling {settings.top_k_ceiling}")
    masks = index.masks(principal, request.doc_type, request.valid_at)
    visible = int(sum(int(m.sum()) for m in masks))
    stages = [StageReport(name="filter", kept=visible, note="rows visible to the principal under the filters")]

    lex = lexical_leg(index, masks, request.query, settings.lexical_width, settings.lexical_floor)
    stages.append(StageReport(name="lexical", kept=len(lex.rows), dropped=lex.dropped))
    qvec = query_vector if query_vector is not None else embedder.encode([request.query])[0]
    den = dense_leg(index, masks, qvec, settings.dense_width, settings.dense_floor)
    stages.append(StageReport(name="dense", kept=len(den.rows), dropped=den.dropped))

    cands = fuse(lex, den, index, settings)
    union = len(set(lex.rows) | set(den.rows))
    stages.append(StageReport(name="fuse", kept=len(cands), dropped=union - len(cands)))

    if second_stage is not None and cands:
        passages = [index.passage_at(c.row) for c in cands]  # the second stage reads every candidate
        ranked = second_stage(request.query, cands, passages, request.top_k)
        stages.append(StageReport(name="rerank", kept=len(ranked), dropped=len(cands) - len(ranked)))
        by_id = {p.passage_id: p for p in passages}
        survivors = [by_id[c.passage_id] for c in ranked]
        trace = {c.passage_id: c for c in cands}
        trace.update({c.passage_id: c for c in ranked})
        cands = sorted(trace.values(), key=lambda c: c.fused_rank)
    else:
        survivors = [index.passage_at(c.row) for c in cands[: request.top_k]]  # parse only what is delivered
        stages.append(StageReport(name="rerank", kept=len(survivors), dropped=len(cands) - len(survivors),
                                  note="skipped: fused order stands"))

    excerpts, truncated = expand(index, principal, survivors, settings.delivered_token_ceiling,
                                 request.valid_at, settings.expand)
    stages.append(StageReport(name="expand", kept=len(excerpts), dropped=len(survivors) - len(excerpts),
                              note="truncated" if truncated else ""))
    return SearchResult(
        excerpts=tuple(excerpts),
        candidates=tuple(cands),
        stages=tuple(stages),
        generation=index.generation,
        delivered_tokens=sum(e.token_count for e in excerpts),
        truncated=truncated,
        message="" if excerpts else empty_message(request),
    )
