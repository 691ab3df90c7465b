"""The Reranker deployment: the second stage behind a handle, chosen per tenant and
generation, the cross-encoder batched across concurrent searches."""

from __future__ import annotations

import asyncio
import importlib
import threading
import time

from ray import serve

from quarry.core.lru import LRU
from quarry.core.rank.rerank import RerankInput, apply_rerank
from quarry.core.rank.second_stage import (
    SecondStageChoice,
    candidate_passages,
    choose_second_stage,
    decision_changed,
    rerank_inputs,
)
from quarry.core.records import Candidate, Passage
from quarry.core.search.records import RankedCandidate, RerankOutcome, RerankRequest, StageInfo

from quarry.serve.deployments.generations import GenerationIndexes
from quarry.serve.deployments.purges import PurgeWatch, clear_text_caches, drop_unpublished_copies
from quarry.serve.settings import ServeSettings


def load_factory(path: str):
    mod, _, attr = path.partition(":")
    if not mod or not attr:
        raise ValueError(f"factory must be 'module:callable', got {path!r}")
    return getattr(importlib.import_module(mod), attr)

class ServedStage:
    """What the Reranker serves for one (tenant, generation), and when it was last checked."""

    __slots__ = ("kind", "ranker", "info", "checked_at", "lock")

    def __init__(self, choice: SecondStageChoice):
        self.kind, self.ranker, self.info = choice.kind, choice.ranker, choice.info
        self.checked_at = time.monotonic()
        self.lock = threading.Lock()  # one LightGBM predict at a time per model


@serve.deployment(name="Reranker")
class Reranker:
    """The second stage behind a handle, chosen per tenant and generation by
    ``quarry.core.rank.second_stage.choose_second_stage`` (the gate-promoted learned ranker, else
    the cross-encoder built by ``reranker_factory``, ``module:callable`` returning a
    ``quarry.core.rank.rerank.Reranker``, else none). The cross-encoder is batched across
    concurrent searches with ``@serve.batch``.

    Requests carry ids and small records only (tenant, generation, query, candidate ranks
    and scores); passages are read here from the same memory-mapped index generation.
    """

    def __init__(self, settings: ServeSettings):
        self.settings = settings
        self.cross = load_factory(settings.reranker_factory)(**settings.reranker_options) \
            if settings.reranker_factory else None
        self.cross_name = getattr(self.cross, "name", settings.reranker_factory) if self.cross else None
        self._stages: LRU[tuple[str, int], ServedStage] = LRU(settings.lru_tenants)
        self._indexes = GenerationIndexes(settings.index_root, settings.lru_tenants, settings.tenant_cache_bytes)
        self._lock = threading.Lock()
        self._key_locks: dict[tuple[str, int], threading.Lock] = {}
        self.score_batch.set_max_batch_size(settings.reranker_batch_size)
        self.batch_sizes: list[int] = []  # queries per @serve.batch call (recent), for tests and operators
        self._purges = PurgeWatch(settings.index_root, settings.generation_check_ms / 1000,
                                  self._indexes.epochs, self._drop_tenant)

    def _drop_tenant(self, tenant: str, epoch: str | None) -> None:
        """The tenant was purged: forget its indexes, stages, local copies and text caches."""
        self._indexes.drop_tenant(tenant)
        for key, _ in self._stages.items():
            if key[0] == tenant:
                self._stages.pop(key)
        clear_text_caches()
        drop_unpublished_copies(self.settings.index_root, tenant)

    # -- choosing the stage ------------------------------------------------------------
    def _choose(self, tenant: str, gen: int) -> ServedStage:
        return ServedStage(choose_second_stage(self.settings.index_root, tenant, gen, cross_encoder=self.cross_name,
                                          learned_enabled=self.settings.learned_ranker))

    def _stage(self, tenant: str, gen: int) -> ServedStage:
        """Cached per (tenant, generation); the recorded decision is re-read every
        ``stage_check_s`` so a ranker promoted (or demoted) for the live generation is
        picked up without a restart."""
        key = (tenant, gen)
        stage = self._stages.get(key)
        if stage is not None and time.monotonic() - stage.checked_at < self.settings.stage_check_s:
            return stage
        with self._lock:
            klock = self._key_locks.setdefault(key, threading.Lock())
        with klock:
            cur = self._stages.peek(key)
            if cur is not None and cur is not stage and time.monotonic() - cur.checked_at < self.settings.stage_check_s:
                return cur
            if cur is not None and not decision_changed(self.settings.index_root, tenant, gen, cur.info):
                cur.checked_at = time.monotonic()
                return cur
            fresh = self._choose(tenant, gen)
            evicted = self._stages.put(key, fresh)
            with self._lock:
                for old, _ in evicted:
                    self._key_locks.pop(old, None)
            return fresh

    # -- serving -----------------------------------------------------------------------
    async def recent_batch_sizes(self) -> list[int]:
        return list(self.batch_sizes)

    async def describe(self, tenant: str, generation: int) -> StageInfo:
        """The stage served for this tenant's generation and the gate decision behind it."""
        return (await asyncio.to_thread(self._stage, tenant, generation)).info

    @serve.batch(max_batch_size=16, batch_wait_timeout_s=0.005)
    async def score_batch(self, items: list[tuple[str, list[RerankInput]]]) -> list[list[float]]:
        # One item = one query's candidates; the batch spans concurrent searches.
        self.batch_sizes.append(len(items))  # observed batch sizes, for tests and /healthz
        del self.batch_sizes[:-256]
        many = getattr(self.cross, "score_many", None)  # one model pass over every query's pairs
        if many is not None:
            return await asyncio.to_thread(lambda: [list(map(float, s)) for s in many(items)])
        return await asyncio.to_thread(lambda: [list(map(float, self.cross.score(q, c))) for q, c in items])

    def _learned(self, stage: ServedStage, query: str, cands: list[Candidate], passages: list[Passage], top_k: int):
        with stage.lock:
            return stage.ranker(query, cands, passages, top_k)

    async def rerank(self, req: RerankRequest) -> RerankOutcome:
        """The kept top-k of ``req.candidates`` (already filtered for the principal by the
        Retriever) with scores and ranks, or ``skipped`` with the stage info saying why."""
        stage = await asyncio.to_thread(self._stage, req.tenant, req.generation)
        if not stage.info.enabled:
            return RerankOutcome(status="skipped", info=stage.info)
        cands = list(req.candidates)
        index = await asyncio.to_thread(self._indexes.get, req.tenant, req.generation)
        passages = candidate_passages(index, cands)
        if stage.kind == "learned":
            ranked = await asyncio.to_thread(self._learned, stage, req.query, cands, passages, req.top_k)
            out = [(c.passage_id, float(c.rerank_score), int(c.rerank_rank)) for c in ranked]
        else:
            scores = await self.score_batch((req.query, rerank_inputs(passages)))
            out = apply_rerank(scores, [c.passage_id for c in cands], req.top_k)
        return RerankOutcome(status="applied", info=stage.info, ranked=tuple(
            RankedCandidate(passage_id=pid, rerank_score=sc, rerank_rank=r) for pid, sc, r in out))
