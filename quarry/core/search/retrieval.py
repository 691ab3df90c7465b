"""The first stage of a search (DESIGN §4): the principal's mask, the lexical (BM25) and
dense (FAISS) legs with their floors, and reciprocal rank fusion.

The mask is applied inside each leg, so a denied passage is never scored, fused,
reranked, expanded, resolved or cited. Candidates keep each leg's rank for the trace
(ids only, never text). Serving, ``quarry search``, ranker training and evaluation all
run :func:`first_stage`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from quarry.core.embed.embedders import Embedder
from quarry.core.index.rows import pack_row
from quarry.core.index.shards import TenantIndex
from quarry.core.records import Candidate, Principal, SearchRequest, StageReport
from quarry.core.search.fusion import rrf
from quarry.core.search.records import FirstStage
from quarry.core.search.settings import SearchSettings
from quarry.core.text.tokenizer import identifiers, is_lookup, tokenize


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
