"""The composer's stage executor over Serve deployment handles: what the Gateway runs a
search with (``quarry.core.search.composer.compose`` decides the order). Each stage is one
call to the deployment that owns it; the Reranker is asked only when the tenant's
generation serves a second stage, and its failures degrade to the fused order."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from ray.exceptions import ActorDiedError, ActorUnavailableError, RayActorError

from quarry.core.evidence.graph import EvidenceSet
from quarry.core.lru import LRU
from quarry.core.records import Principal, SearchRequest
from quarry.core.search.records import (
    Delivery,
    ExpandRequest,
    FirstStage,
    RerankOutcome,
    RerankRequest,
    Resolution,
    ResolveRequest,
    Retrieval,
    StageInfo,
)

from quarry.serve.settings import ServeSettings

log = logging.getLogger("quarry.serve")


_RETRY_WAITS_S = (0.1, 1.0)  # before the 2nd and 3rd try of a call whose replica died


async def call_retrying(handle, method: str, *args: Any, tenant: str | None = None) -> Any:
    """A deployment call retried (twice) when the replica died under it, so a killed replica
    does not turn into a 5xx. Only for read-only calls; Serve routes the retry to a live
    replica. ``tenant``: route by it (Serve model multiplexing: replicas already holding the
    tenant are preferred)."""
    if tenant:
        handle = handle.options(multiplexed_model_id=tenant)
    for wait_s in _RETRY_WAITS_S:
        try:
            return await getattr(handle, method).remote(*args)
        except (ActorDiedError, ActorUnavailableError, RayActorError):
            await asyncio.sleep(wait_s)  # the router may not know yet that the replica died
    return await getattr(handle, method).remote(*args)


async def _awaited(response):
    """A deployment response as a coroutine, so ``asyncio.wait_for`` can bound it."""
    return await response


class DeploymentStages:
    """A :class:`~quarry.core.search.composer.StageExecutor` over the Retriever, Reranker
    and Resolver handles. It remembers, per tenant, the generation its last search ran on
    and which second stage that generation serves (re-asked every ``stage_check_s``), so a
    tenant serving none takes the one-call retrieval. Evidence is always gathered: the
    Gateway always resolves."""

    def __init__(self, settings: ServeSettings, retriever, reranker=None, resolver=None):
        self.settings = settings
        self.retriever, self.reranker, self.resolver = retriever, reranker, resolver
        # Small records per tenant; sized by the tenants all Retriever replicas may hold, so a
        # tenant served warm also keeps its one-call fast path.
        held = settings.lru_tenants * settings.retriever_replicas
        self._stage_infos: LRU[tuple[str, int], tuple[float, StageInfo]] = LRU(held)
        self._last_generation: LRU[str, int] = LRU(held)  # tenant -> its last search's

    def _route(self, tenant: str) -> str | None:
        """The multiplexed model id a tenant's Retriever calls carry (None: tenant routing off)."""
        return tenant if self.settings.tenant_routing else None

    def retrieves_in_one_call(self, tenant: str) -> bool:
        """True when this deployment has no Reranker, or the cached stage info for the
        tenant's last seen generation says no second stage runs."""
        if self.reranker is None:
            return True
        gen = self._last_generation.get(tenant)
        hit = self._stage_infos.get((tenant, gen)) if gen is not None else None
        return hit is not None and time.monotonic() - hit[0] < self.settings.stage_check_s and not hit[1].enabled

    async def first_stage(self, principal: Principal, request: SearchRequest, width: int | None) -> FirstStage:
        first = await call_retrying(self.retriever, "first_stage", principal, request, width,
                                    tenant=self._route(principal.tenant))
        self._last_generation.put(principal.tenant, first.generation)
        return first

    async def retrieve(self, principal: Principal, request: SearchRequest, width: int | None,
                       with_evidence: bool) -> Retrieval:
        retrieval = await call_retrying(self.retriever, "retrieve", principal, request, width,
                                        tenant=self._route(principal.tenant))
        self._last_generation.put(principal.tenant, retrieval.first.generation)
        return retrieval

    async def stage_info(self, tenant: str, generation: int) -> StageInfo:
        """What the Reranker serves for this generation, cached ``stage_check_s``, so a
        search skips the Reranker hop entirely when no stage is enabled."""
        if self.reranker is None:
            return StageInfo(generation=generation,
                             reason="second stage off in this deployment (reranker_enabled: false)")
        key = (tenant, generation)
        hit = self._stage_infos.get(key)
        if hit is not None and time.monotonic() - hit[0] < self.settings.stage_check_s:
            return hit[1]
        try:
            info = await asyncio.wait_for(_awaited(self.reranker.describe.remote(tenant, generation)),
                                          self.settings.reranker_timeout_s)
        except Exception as e:  # noqa: BLE001 - the fused order is always a valid answer
            log.warning("Reranker.describe(%s, %s) failed: %s", tenant, generation, e)
            return StageInfo(generation=generation, unavailable=True,
                             reason=f"second stage unavailable ({type(e).__name__})")
        self._stage_infos.put(key, (time.monotonic(), info))
        return info

    async def rerank(self, first: FirstStage, query: str, top_k: int) -> RerankOutcome:
        info = await self.stage_info(first.tenant, first.generation)
        if not info.enabled or not first.candidates:
            return RerankOutcome(status="skipped", info=info)
        req = RerankRequest(tenant=first.tenant, generation=first.generation, query=query,
                            candidates=first.candidates, top_k=top_k)
        try:
            return await asyncio.wait_for(_awaited(self.reranker.rerank.remote(req)),
                                          self.settings.reranker_timeout_s)
        except Exception as e:  # noqa: BLE001 - degrade to the fused order, say so
            log.warning("rerank for %s gen %s failed: %s", first.tenant, first.generation, e)
            return RerankOutcome(status="failed", info=info, error=type(e).__name__)

    async def deliver(self, principal: Principal, request: SearchRequest, first: FirstStage,
                      survivors: tuple[str, ...], with_evidence: bool) -> Delivery:
        return await call_retrying(self.retriever, "expand", ExpandRequest(
            principal=principal, request=request, generation=first.generation, passage_ids=survivors,
            ranked=tuple(c.passage_id for c in first.candidates)),
            tenant=self._route(principal.tenant))

    async def resolve(self, principal: Principal, request: SearchRequest, evidence: EvidenceSet) -> Resolution:
        return await call_retrying(self.resolver, "resolve", ResolveRequest(
            principal=principal, request=request, evidence=evidence))
