"""The search stages run in this process over a loaded index: the executor behind
``quarry search``, evaluation and tests, composed by the same :func:`compose` as serving.

:func:`search` is the one entry point: one search, in-process, in serving's order.
"""

from __future__ import annotations

import numpy as np

from quarry.core.embed.embedders import Embedder
from quarry.core.evidence.graph import EvidenceSet
from quarry.core.index.shards import TenantIndex
from quarry.core.records import Passage, Principal, SearchRequest, SearchResult
from quarry.core.search.composer import compose, run_inline
from quarry.core.search.expansion import expansion, pool_passages, survivor_passages
from quarry.core.search.records import Delivery, FirstStage, RerankOutcome, Resolution, Retrieval
from quarry.core.search.resolution import gather_evidence, resolve_stage
from quarry.core.search.retrieval import first_stage
from quarry.core.search.settings import SearchSettings
from quarry.core.search.survivors import SecondStage, apply_second_stage, rerank_in_process


class InProcessStages:
    """A :class:`~quarry.core.search.composer.StageExecutor` over one loaded index, for one
    search: its coroutines never suspend. ``second_stage`` None keeps the fused order (and
    takes the one-call retrieval); ``query_vector`` skips encoding the query. The
    configured candidate width is used as given (``width`` is a serving knob)."""

    def __init__(self, index: TenantIndex, embedder: Embedder | None, settings: SearchSettings = SearchSettings(),
                 second_stage: SecondStage | None = None, query_vector: np.ndarray | None = None):
        self.index, self.embedder, self.settings = index, embedder, settings
        self.second_stage, self.query_vector = second_stage, query_vector
        self._parsed: dict[str, Passage] = {}  # passages the second stage read, reused by the expansion

    def retrieves_in_one_call(self, tenant: str) -> bool:
        return self.second_stage is None

    async def first_stage(self, principal: Principal, request: SearchRequest, width: int | None) -> FirstStage:
        if self.query_vector is None and self.embedder is not None:  # kept: resolution compares passages to it
            self.query_vector = self.embedder.encode([request.query])[0]
        return first_stage(self.index, principal, request, self.embedder, self.settings, self.query_vector)

    async def retrieve(self, principal: Principal, request: SearchRequest, width: int | None,
                       with_evidence: bool) -> Retrieval:
        first = await self.first_stage(principal, request, width)
        delivery = await self.deliver(principal, request, first, apply_second_stage(first, None, request.top_k).survivors,
                                      with_evidence)
        return Retrieval(first=first, expansion=delivery.expansion, evidence=delivery.evidence)

    async def rerank(self, first: FirstStage, query: str, top_k: int) -> RerankOutcome | None:
        if self.second_stage is None or not first.candidates:
            return None
        passages = [self.index.passage_at(c.row) for c in first.candidates]  # the second stage reads every candidate
        self._parsed = {p.passage_id: p for p in passages}
        return rerank_in_process(self.second_stage, query, first.candidates, passages, top_k)

    async def deliver(self, principal: Principal, request: SearchRequest, first: FirstStage,
                      survivors: tuple[str, ...], with_evidence: bool) -> Delivery:
        passages = survivor_passages(self.index, first, survivors, self._parsed)  # parse only these
        expanded = expansion(self.index, principal, passages, self.settings, request.valid_at)
        if not with_evidence:
            return Delivery(expansion=expanded)
        shown = {e.passage_id for e in expanded.excerpts}
        delivered = [p for p in passages if p.passage_id in shown]
        encode = self._encoder(request.query)
        pool = pool_passages(self.index, first, survivors, self.settings.resolution_pool, self._parsed)
        return Delivery(expansion=expanded, evidence=gather_evidence(self.index, principal, request, delivered,
                                                                     self.settings, encode, pool))

    def _encoder(self, query: str):
        """The embedder's encode, reusing the search's own query vector for ``query``."""
        if self.embedder is None:
            return None
        known, embedder = self.query_vector, self.embedder

        def encode(texts: list[str]):
            if known is not None and texts == [query]:
                return [known]
            return embedder.encode(texts)
        return encode

    async def resolve(self, principal: Principal, request: SearchRequest, evidence: EvidenceSet) -> Resolution:
        return resolve_stage(request, evidence, principal)


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
    """One search in-process: the stages of :func:`~quarry.core.search.composer.compose`,
    in serving's order. ``resolve=False`` stops after the expansion (no decision)."""
    if request.top_k > settings.top_k_ceiling:
        raise ValueError(f"top_k {request.top_k} exceeds the server ceiling {settings.top_k_ceiling}")
    stages = InProcessStages(index, embedder, settings, second_stage, query_vector)
    return run_inline(compose(stages, principal, request, resolve=resolve)).result
