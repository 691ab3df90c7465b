"""Where a tenant's published generation lives for one serving process, in three tiers (as
Weaviate's active / inactive / offloaded tenants):

- ``hot``: loaded in the process's memory (only the process knows; it says so itself);
- ``warm``: not loaded, but every shard of the generation is on this machine's disk: a
  local root (read in place), or a copy in the bounded disk cache of a URI root;
- ``cold``: object storage only; the next load downloads it.

Read from the disk cache's own index (the URI each copy's marker names,
``disk_cache.copies``), never by downloading; the manifest (which shards the generation has)
is read only for tenants that have a copy under the generation at all. A change delta is
not part of the tier: it is small and read on every load anyway.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from quarry.core.index import disk_cache, layout
from quarry.core.index.manifest import read_manifest

Tier = Literal["hot", "warm", "cold"]
TIERS: tuple[Tier, ...] = ("hot", "warm", "cold")


def disk_tiers(root: str, generations: dict[str, int], cache_root: str | Path) -> dict[str, Tier]:
    """``warm`` or ``cold`` for each (tenant -> published generation) not loaded here."""
    if layout.is_local(root):
        return {t: "warm" for t in generations}
    cached = set(disk_cache.copies(cache_root))
    parents = {uri.rsplit("/", 1)[0] for uri in cached}  # a shard copy's parent is its generation
    out: dict[str, Tier] = {}
    for t, gen in generations.items():
        gen_dir = layout.generation_dir(root, t, gen).rstrip("/")
        if gen_dir not in parents:
            out[t] = "cold"
            continue
        shards = [layout.shard_dir(root, t, gen, s.shard).rstrip("/") for s in read_manifest(root, t, gen).shards]
        out[t] = "warm" if all(s in cached for s in shards) else "cold"
    return out


def cache_usage(cache_root: str | Path) -> dict[str, int]:
    """Copies and bytes the disk cache holds now (what ``disk_cache.evict`` bounds)."""
    found = disk_cache.copies(cache_root)
    return {"copies": len(found), "bytes": sum(disk_cache.dir_bytes(d) for d in found.values())}
