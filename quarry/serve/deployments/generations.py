"""Memory-mapped tenant indexes by (tenant, generation), shared by the deployments that
read passages from a generation a search already ran on."""

from __future__ import annotations

from quarry.core.index import layout
from quarry.core.index.shards import TenantIndex
from quarry.core.lru import LRU


class GenerationIndexes:
    """Memory-mapped indexes by (tenant, generation), LRU-bounded: what the Reranker and
    the Resolver read passages from (pages are shared with the Retriever's copy)."""

    def __init__(self, root: str, capacity: int, max_bytes: int | None = None):
        self.root = root
        self._lru: LRU[tuple[str, int], TenantIndex] = LRU(
            capacity, max_bytes, (lambda i: i.resident_bytes) if max_bytes is not None else None)

    def put(self, index: TenantIndex) -> None:
        self._lru.put((index.tenant, index.generation), index)

    def get(self, tenant: str, gen: int) -> TenantIndex:
        idx = self._lru.get((tenant, gen))
        if idx is not None:  # the delta's rows are candidates too: follow the change watermark
            fresh = idx.with_watermark(layout.read_watermark(self.root, tenant))
            if fresh is not idx:
                self.put(fresh)
            return fresh
        idx = TenantIndex.load(self.root, tenant, gen)
        self.put(idx)
        return idx
