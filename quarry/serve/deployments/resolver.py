"""The Resolver deployment: resolution, behind a handle."""

from __future__ import annotations

import asyncio

from ray import serve

from quarry.core.search.records import Resolution, ResolveRequest
from quarry.core.search.resolution import resolve_stage

from quarry.serve.settings import ServeSettings


@serve.deployment(name="Resolver")
class Resolver:
    """Evidence resolution (``quarry.core.evidence.resolve``): a pure function of the question and
    the evidence the Retriever gathered (delivered passages, their evidence-graph
    neighbours and facts). It reads no index and calls no other deployment."""

    def __init__(self, settings: ServeSettings):
        self.settings = settings

    async def resolve(self, req: ResolveRequest) -> Resolution:
        return await asyncio.to_thread(resolve_stage, req.request, req.evidence, req.principal)
