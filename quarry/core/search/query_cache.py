"""A bounded LRU of query vectors keyed by (tenant, groups, model id, normalised query text).

It holds vectors only, never results, so a revocation or new generation needs no
invalidation. The key still includes the principal's tenant and groups (DESIGN: every cache
key includes the tenant): queries are also built from restricted passages (contradiction
probes), and a shared entry would let one tenant or group learn by timing that another
already asked, or that such a passage exists. The model id (``quarry.core.embed.embedders.embedder_id``) includes the
encoder backend, so a vector is never returned for another model or encoder.
"""

from __future__ import annotations

import threading
import unicodedata

import numpy as np
from pydantic import BaseModel, ConfigDict

from quarry.core.lru import LRU
from quarry.core.records import Principal


def normalize_query(text: str) -> str:
    """NFC and collapsed whitespace: changes that leave every subword tokenizer's output
    unchanged (case is kept: a cased model would embed it differently)."""
    return " ".join(unicodedata.normalize("NFC", text).split())


class CacheStats(BaseModel):
    model_config = ConfigDict(frozen=True)

    hits: int
    misses: int
    size: int
    capacity: int

    @property
    def hit_rate(self) -> float:
        total = self.hits + self.misses
        return self.hits / total if total else 0.0


class QueryVectorCache:
    """Thread-safe; ``capacity`` 0 turns it off. Stored vectors are read-only copies."""

    def __init__(self, capacity: int = 4096):
        if capacity < 0:
            raise ValueError(f"capacity must be >= 0, got {capacity}")
        self.capacity = capacity
        self._items: LRU[tuple[str, tuple[str, ...], str, str], np.ndarray] = LRU(capacity)
        self._lock = threading.Lock()  # the hit/miss counters
        self._hits = 0
        self._misses = 0

    @staticmethod
    def key(principal: Principal, model_id: str, query: str) -> tuple[str, tuple[str, ...], str, str]:
        return (principal.tenant, tuple(sorted(principal.groups)), model_id, normalize_query(query))

    def get(self, principal: Principal, model_id: str, query: str) -> np.ndarray | None:
        vec = self._items.get(self.key(principal, model_id, query))
        with self._lock:
            if vec is None:
                self._misses += 1
            else:
                self._hits += 1
        return vec

    def put(self, principal: Principal, model_id: str, query: str, vector: np.ndarray) -> None:
        if self.capacity == 0:
            return
        vec = np.array(vector, dtype=np.float32, copy=True)
        vec.setflags(write=False)
        self._items.put(self.key(principal, model_id, query), vec)

    def stats(self) -> CacheStats:
        with self._lock:
            return CacheStats(hits=self._hits, misses=self._misses, size=len(self._items), capacity=self.capacity)
