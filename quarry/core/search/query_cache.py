"""A bounded LRU of query vectors keyed by (model id, normalised query text).

It holds vectors only, never results: a vector depends on the text and the model alone, so
one principal's hit cannot reveal another's documents, and a revocation or new generation
needs no invalidation. The model id (``quarry.core.embed.embedders.embedder_id``) includes the
encoder backend, so a vector is never returned for another model or encoder.
"""

from __future__ import annotations

import threading
import unicodedata

import numpy as np
from pydantic import BaseModel, ConfigDict

from quarry.core.lru import LRU


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
        self._items: LRU[tuple[str, str], np.ndarray] = LRU(capacity)
        self._lock = threading.Lock()  # the hit/miss counters
        self._hits = 0
        self._misses = 0

    def get(self, model_id: str, query: str) -> np.ndarray | None:
        vec = self._items.get((model_id, normalize_query(query)))
        with self._lock:
            if vec is None:
                self._misses += 1
            else:
                self._hits += 1
        return vec

    def put(self, model_id: str, query: str, vector: np.ndarray) -> None:
        if self.capacity == 0:
            return
        vec = np.array(vector, dtype=np.float32, copy=True)
        vec.setflags(write=False)
        self._items.put((model_id, normalize_query(query)), vec)

    def stats(self) -> CacheStats:
        with self._lock:
            return CacheStats(hits=self._hits, misses=self._misses, size=len(self._items), capacity=self.capacity)
