"""A small bounded mapping (by count, and optionally by bytes) that forgets the least recently used key: the one LRU behind
every per-replica cache (indexes by tenant or generation, second-stage choices, verified
tokens, query vectors, row masks).

Each call is atomic under the mapping's own lock. A caller that needs check-then-act over
several calls (the Retriever's per-tenant loading and hot swap) keeps its own lock around
them; the mapping only decides what is kept.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

__all__ = ["LRU"]


class LRU(Generic[K, V]):
    """At most ``capacity`` entries; ``get`` and ``put`` mark a key most recently used, and
    ``put`` evicts the least recently used beyond capacity (``capacity`` 0 keeps nothing)."""

    def __init__(self, capacity: int, max_bytes: int | None = None, size_of: Callable[[V], int] | None = None):
        """``max_bytes`` with ``size_of``: also evict least recently used entries while the
        sizes (measured when each entry is put) sum above ``max_bytes``; the entry just put
        is kept even when it alone is larger."""
        if capacity < 0:
            raise ValueError(f"capacity must be >= 0, got {capacity}")
        if (max_bytes is None) != (size_of is None):
            raise ValueError("max_bytes and size_of go together")
        self.capacity = int(capacity)
        self.max_bytes = max_bytes
        self._size_of = size_of
        self._sizes: dict[K, int] = {}
        self._items: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def total_bytes(self) -> int:
        """Sum of the entries' sizes as measured at put (0 without ``size_of``)."""
        with self._lock:
            return sum(self._sizes.values())

    def size(self, key: K) -> int | None:
        with self._lock:
            return self._sizes.get(key)

    def get(self, key: K, default: V | None = None) -> V | None:
        with self._lock:
            if key not in self._items:
                return default
            self._items.move_to_end(key)
            return self._items[key]

    def peek(self, key: K, default: V | None = None) -> V | None:
        """The value without marking it used (reporting, not serving)."""
        with self._lock:
            return self._items.get(key, default)

    def put(self, key: K, value: V) -> list[tuple[K, V]]:
        """Store ``value``; return the evicted ``(key, value)`` pairs, oldest first."""
        size = self._size_of(value) if self._size_of is not None else 0
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            if self._size_of is not None:
                self._sizes[key] = size
            evicted = []
            while len(self._items) > self.capacity or (
                    self.max_bytes is not None and len(self._items) > 1 and sum(self._sizes.values()) > self.max_bytes):
                old = self._items.popitem(last=False)
                self._sizes.pop(old[0], None)
                evicted.append(old)
            return evicted

    def pop(self, key: K, default: V | None = None) -> V | None:
        with self._lock:
            self._sizes.pop(key, None)
            return self._items.pop(key, default)

    def items(self) -> list[tuple[K, V]]:
        """A snapshot, least recently used first."""
        with self._lock:
            return list(self._items.items())

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._items

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)
