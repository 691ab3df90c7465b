"""The Resolver deployment: resolution, behind a handle."""

from __future__ import annotations

import asyncio

from ray import serve

from quarry.core.index import layout

from quarry.core.search.records import Resolution, ResolveRequest
from quarry.core.search.resolution import resolve_stage

from quarry.serve.deployments.purges import PurgeWatch, clear_text_caches
from quarry.serve.settings import ServeSettings


@serve.deployment(name="Resolver")
class Resolver:
    """Evidence resolution (``quarry.core.evidence.resolve``): a pure function of the question and
    the evidence the Retriever gathered (delivered passages, their evidence-graph
    neighbours and facts). It reads no index and calls no other deployment."""

    def __init__(self, settings: ServeSettings):
        self.settings = settings
        # Its text caches (sentences, statements) hold passage text: cleared on a tenant's purge.
        self._epochs: dict[str, str | None] = {}
        self._purges = PurgeWatch(settings.index_root, settings.generation_check_ms / 1000,
                                  lambda: {t: {e} for t, e in list(self._epochs.items())}, self._drop_tenant)

    def _drop_tenant(self, tenant: str, epoch: str | None) -> None:
        clear_text_caches()
        self._epochs[tenant] = epoch

    async def resolve(self, req: ResolveRequest) -> Resolution:
        tenant = req.principal.tenant
        if tenant not in self._epochs:
            self._epochs[tenant] = await asyncio.to_thread(layout.read_purge_epoch, self.settings.index_root, tenant)
        return await asyncio.to_thread(resolve_stage, req.request, req.evidence, req.principal)
