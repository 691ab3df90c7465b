"""Retriever memory with many tenants: how many tenants a replica holds hot, and what the
working set (tenants hot at once) needs, next to Little's law's replica count.

A Retriever replica keeps each tenant it serves loaded (bm25s, FAISS, passages, filter
columns; ``lru_tenants`` of them at most). Its memory is a base (process, libraries, query
encoder) plus the loaded tenants' index bytes. Serve routes requests to replicas without
regard to tenant, so every replica sees the whole working set: the working set is hot only
where *each* replica holds all of it. ``replicas_if_partitioned`` is the count a
tenant-affine routing would need instead (working set split across replicas); the plan
states both and never pretends that more replicas enlarge a replica's cache.

Pure arithmetic; :func:`measure_index_bytes` reads an index root's sizes (fsspec).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field

from quarry.core.errors import UsageError

_UNITS = {"": 1, "b": 1, "k": 1e3, "kb": 1e3, "m": 1e6, "mb": 1e6, "g": 1e9, "gb": 1e9, "t": 1e12, "tb": 1e12,
          "ki": 2**10, "kib": 2**10, "mi": 2**20, "mib": 2**20, "gi": 2**30, "gib": 2**30, "ti": 2**40, "tib": 2**40}


def parse_bytes(text: str) -> float:
    """``"8GiB"``, ``"512Mi"``, ``"40MB"``, ``"1.5e9"`` -> bytes."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([a-z]*)\s*", str(text).lower())
    if not m or m.group(2) not in _UNITS:
        raise UsageError(f"{text!r} is not a size (e.g. 8GiB, 512MiB, 40MB, 1500000)")
    return float(m.group(1)) * _UNITS[m.group(2)]


class TenantLoad(BaseModel):
    """What the tenant side of a plan is given (or measured from an index root)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tenants: int = Field(ge=1)
    working_set: int = Field(ge=1, description="tenants hot at once")
    index_bytes_per_tenant: float = Field(gt=0, description="loaded index bytes of a typical hot tenant")
    replica_memory_bytes: float = Field(gt=0)
    replica_base_bytes: float = Field(default=1.5 * 2**30, ge=0, description="a replica with no tenant loaded")
    headroom: float = Field(default=0.8, gt=0, le=1, description="fraction of replica memory planned for use")
    measured_from: str | None = None  # the index root the bytes were measured on


class TenantMemoryPlan(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    tenants: int
    working_set: int
    index_bytes_per_tenant: float
    replica_memory_bytes: float
    tenants_hot_per_replica: int          # floor((memory × headroom − base) / bytes per tenant)
    working_set_fits_each_replica: bool   # needed as routed today (no tenant affinity)
    replica_memory_for_working_set: float  # (base + working set × bytes) / headroom
    replicas_if_partitioned: int          # ceil(working set / hot per replica), with tenant-affine routing
    lru_tenants: int                      # the Retriever setting this implies: min(hot per replica, working set)
    all_tenants_bytes: float              # every tenant loaded once (the index root's serving footprint)
    measured_from: str | None = None


def tenants_hot_per_replica(replica_memory: float, base: float, per_tenant: float, headroom: float = 0.8) -> int:
    usable = replica_memory * headroom - base
    return max(0, math.floor(usable / per_tenant)) if per_tenant > 0 else 0


def plan_tenant_memory(t: TenantLoad) -> TenantMemoryPlan:
    if t.working_set > t.tenants:
        raise UsageError(f"working set {t.working_set} exceeds the tenant count {t.tenants}")
    hot = tenants_hot_per_replica(t.replica_memory_bytes, t.replica_base_bytes, t.index_bytes_per_tenant, t.headroom)
    return TenantMemoryPlan(
        tenants=t.tenants, working_set=t.working_set, index_bytes_per_tenant=t.index_bytes_per_tenant,
        replica_memory_bytes=t.replica_memory_bytes, tenants_hot_per_replica=hot,
        working_set_fits_each_replica=hot >= t.working_set,
        replica_memory_for_working_set=round((t.replica_base_bytes + t.working_set * t.index_bytes_per_tenant)
                                             / t.headroom, 1),
        replicas_if_partitioned=math.ceil(t.working_set / hot) if hot else 0,
        lru_tenants=max(1, min(hot, t.working_set)),
        all_tenants_bytes=t.tenants * t.index_bytes_per_tenant, measured_from=t.measured_from,
    )


def retriever_replicas(littles_law_replicas: int, m: TenantMemoryPlan) -> int:
    """Replicas to run: Little's law's count, or the partitioned memory count when that is
    larger (with today's routing that only helps where the working set already fits)."""
    return max(littles_law_replicas, m.replicas_if_partitioned)


def quantile(values: Sequence[float], q: float) -> float:
    """Nearest-rank quantile (q in [0, 1]) of non-empty values."""
    v = sorted(values)
    return v[min(len(v) - 1, max(0, math.ceil(q * len(v)) - 1))]


def measure_index_bytes(root: str) -> dict[str, int]:
    """Bytes of each tenant's published generation (the sum of its shard files) under an
    index root: what a Retriever replica loads for that tenant."""
    from quarry.core.index import layout

    fs, _ = layout.fs_and_path(root)
    out: dict[str, int] = {}
    for tenant in layout.list_tenants(root):
        gen = layout.current_generation(root, tenant)
        if gen is None:
            continue
        _, gpath = layout.fs_and_path(layout.generation_dir(root, tenant, gen))
        out[tenant] = sum(int(info.get("size") or 0) for p, info in fs.find(gpath, detail=True).items()
                          if "/shard-" in p)
    return out
