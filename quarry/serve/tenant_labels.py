"""Bounded tenant labels for per-tenant metrics.

A metric tagged with the raw tenant name grows one series per tenant, without bound. Each
replica instead labels a tenant by name only while it is among the replica's top ``top_n``
tenants by traffic; every other tenant is ``"other"``. Traffic is counted with the
space-saving algorithm over at most ``8 * top_n`` counters, so memory is bounded too, and
the top set is recomputed every ``refresh_every`` observations.

The number of distinct label values a replica ever emits is capped at ``2 * top_n`` (plus
``"other"``): once that many names have been used, the top set may only draw from names
already used, so a churning tenant population cannot grow the series count over a
replica's lifetime. The Gateway's request metrics and the Retriever's change-lag gauge use
this one class.
"""

from __future__ import annotations

import threading

OTHER = "other"


class TenantLabels:
    def __init__(self, top_n: int = 20, *, refresh_every: int = 64):
        if top_n < 1:
            raise ValueError("top_n must be at least 1")
        self.top_n, self.capacity, self.max_labels = top_n, 8 * top_n, 2 * top_n
        self.refresh_every = refresh_every
        self._counts: dict[str, int] = {}
        self._top: frozenset[str] = frozenset()
        self._used: set[str] = set()  # every name this instance has emitted
        self._since = 0
        self._lock = threading.Lock()  # the Retriever calls from its search threads

    def observe(self, tenant: str) -> str:
        """Count one request of ``tenant`` and return its label."""
        with self._lock:
            self._count(tenant)
            self._since += 1
            if self._since >= self.refresh_every or (tenant not in self._top and len(self._top) < self.top_n):
                self._refresh()
            return self._label(tenant)

    def label(self, tenant: str) -> str:
        """The label of ``tenant`` without counting it."""
        with self._lock:
            return self._label(tenant)

    @property
    def emitted(self) -> frozenset[str]:
        """The tenant names this instance has used as labels (``"other"`` not included)."""
        with self._lock:
            return frozenset(self._used)

    def _label(self, tenant: str) -> str:
        return tenant if tenant in self._top else OTHER

    def _count(self, tenant: str) -> None:
        if tenant in self._counts:
            self._counts[tenant] += 1
        elif len(self._counts) < self.capacity:
            self._counts[tenant] = 1
        else:  # space-saving: the new tenant takes over the smallest counter, plus one
            low = min(self._counts, key=self._counts.__getitem__)
            self._counts[tenant] = self._counts.pop(low) + 1

    def _refresh(self) -> None:
        self._since = 0
        room = self.max_labels - len(self._used)  # new names still allowed
        top: list[str] = []
        for t in sorted(self._counts, key=self._counts.__getitem__, reverse=True):
            if len(top) == self.top_n:
                break
            if t in self._used:
                top.append(t)
            elif room > 0:
                top.append(t)
                room -= 1
        self._top = frozenset(top)
        self._used |= self._top
