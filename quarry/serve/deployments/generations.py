"""Memory-mapped tenant indexes by (tenant, generation), shared by the deployments that
read passages from a generation a search already ran on."""

from __future__ import annotations

from quarry.core.index import layout
from quarry.core.index.shards import TenantIndex
from quarry.core.lru import LRU


class GenerationIndexes:
    """Memory-mapped indexes by (tenant, generation), LRU-bounded: what the Reranker and
    the Resolver read passages from (pages are shared with the Retriever's copy). Each
    remembers the purge epoch it was loaded under (``quarry.serve.deployments.purges``)."""

    def __init__(self, root: str, capacity: int, max_bytes: int | None = None):
        self.root = root
        self._lru: LRU[tuple[str, int], tuple[TenantIndex, str | None]] = LRU(
            capacity, max_bytes, (lambda v: v[0].resident_bytes) if max_bytes is not None else None)

    def put(self, index: TenantIndex, epoch: str | None = None) -> None:
        self._lru.put((index.tenant, index.generation), (index, epoch))

    def get(self, tenant: str, gen: int) -> TenantIndex:
        hit = self._lru.get((tenant, gen))
        if hit is not None:  # the delta's rows are candidates too: follow the change watermark
            idx, epoch = hit
            fresh = idx.with_watermark(layout.read_watermark(self.root, tenant))
            if fresh is not idx:
                self.put(fresh, epoch)
            return fresh
        epoch = layout.read_purge_epoch(self.root, tenant)  # read before loading: a purge meanwhile is seen
        idx = TenantIndex.load(self.root, tenant, gen)
        self.put(idx, epoch)
        return idx

    def epochs(self) -> dict[str, set[str | None]]:
        """Per tenant held, the purge epochs its indexes were loaded under."""
        out: dict[str, set[str | None]] = {}
        for (tenant, _), (_, epoch) in self._lru.items():
            out.setdefault(tenant, set()).add(epoch)
        return out

    def drop_tenant(self, tenant: str) -> int:
        """Forget every index of ``tenant``; returns how many."""
        keys = [k for k, _ in self._lru.items() if k[0] == tenant]
        for k in keys:
            self._lru.pop(k)
        return len(keys)
