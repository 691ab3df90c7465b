"""What a Retriever replica reports per tenant (``Retriever.status``), read by the
``/healthz`` route: typed records, serialised exactly as the operator sees them."""

from __future__ import annotations

import time
from typing import Any, ClassVar

from pydantic import model_serializer

from quarry.core.changes.log import lag_summary
from quarry.core.index.shards import TenantIndex
from quarry.core.index.tiers import Tier

from quarry.serve.wire import OmittingNone


class Freshness(OmittingNone):
    """The tenant's change delta: its sequence, changes applied and, once a delta is
    published, the change-to-visible lag and the age of the last publish (both absent
    until then; the age is ``null`` when the publish time is unknown)."""

    omit_when_none: ClassVar[tuple[str, ...]] = ("lag", "last_published_age_s")

    delta: int = 0
    changes_applied: int = 0
    lag: dict[str, Any] | None = None
    last_published_age_s: float | None = None

    @model_serializer(mode="wrap")
    def _omit_none(self, handler):
        data = handler(self)
        if self.lag is None:  # no delta published: neither the lag nor the age
            data.pop("lag", None)
            data.pop("last_published_age_s", None)
        return data

    @classmethod
    def of(cls, index: TenantIndex | None) -> "Freshness":
        if index is None or index.delta is None:
            return cls()
        state = index.delta.state
        return cls(delta=state.seq, changes_applied=state.applied, lag=lag_summary(state),
                   last_published_age_s=round(time.time() - state.published_at, 3) if state.published_at else None)


class TenantStatus(OmittingNone):
    """One tenant as a Retriever replica sees it: the live generation and, where this
    replica has it loaded, the dense leg's device and the tenant's freshness."""

    omit_when_none: ClassVar[tuple[str, ...]] = ("dense", "freshness", "resident_bytes", "mapped_bytes")

    generation: int
    loaded: bool
    tier: Tier = "cold"  # hot: in this replica's memory; warm: on its local disk; cold: object storage only
    resident_bytes: int | None = None  # what the tenant budget charges (heap estimate + mapped bytes)
    mapped_bytes: int | None = None  # of which memory-mapped index files
    dense: dict[str, Any] | None = None
    freshness: Freshness | None = None
