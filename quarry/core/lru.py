"""A small bounded mapping that forgets the least recently used key: the one LRU behind
every per-replica cache (indexes by tenant or generation, second-stage choices, verified
tokens, query vectors, row masks).

Each call is atomic under the mapping's own lock. A caller that needs check-then-act over
several calls (the Retriever's per-tenant loading and hot swap) keeps its own lock around
them; the mapping only decides what is kept.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

__all__ = ["LRU"]


class LRU(Generic[K, V]):
    """At most ``capacity`` entries; ``get`` and ``put`` mark a key most recently used, and
    ``put`` evicts the least recently used beyond capacity (``capacity`` 0 keeps nothing)."""

    def __init__(self, capacity: int):
        if capacity < 0:
            raise ValueError(f"capacity must be >= 0, got {capacity}")
        self.capacity = int(capacity)
        self._items: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

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
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            evicted = []
            while len(self._items) > self.capacity:
                evicted.append(self._items.popitem(last=False))
            return evicted

    def pop(self, key: K, default: V | None = None) -> V | None:
        with self._lock:
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
