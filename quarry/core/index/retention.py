"""Retention of a tenant's old generations and retired deltas (``quarry gc``).

A publish (build, compaction, purge) leaves the generation it replaced on storage, and a
compaction leaves every delta folder it folded. The collector keeps:

- ``CURRENT`` and the ``retain - 1`` newest *published* (manifested) generations below it,
  so an operator can roll back by pointing ``CURRENT`` at one of them;
- every generation above ``CURRENT`` (a build may be writing it now);
- the generation the ``DELTA`` watermark names, the delta folder it names and the delta
  folder whose shard that delta reuses;

and deletes every other ``gen-*`` folder (including crashed, unmanifested ones below
``CURRENT``) and every other ``changes/delta-*`` folder. The caller holds the tenant's
writer lease (``quarry.core.index.lease``), so no apply or compaction is writing a delta.

Replicas that hold an index object of a deleted generation keep serving the requests that
started on it: on a local root its files are memory-mapped (the pages stay valid after the
unlink), on an object store the replica reads its own local copy.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, Field

from quarry.core.index import layout

DEFAULT_RETAIN = 2
_DELTA = re.compile(r"^delta-(\d+)$")


class RetentionReport(BaseModel):
    tenant: str
    current: int | None
    kept_generations: list[int] = Field(default_factory=list)
    deleted_generations: list[int] = Field(default_factory=list)
    deleted_deltas: list[int] = Field(default_factory=list)


def _live_delta(root: str, tenant: str) -> tuple[int | None, set[int]]:
    """(the generation the watermark names, the delta folders it needs)."""
    parsed = layout.parse_watermark(layout.read_watermark(root, tenant))
    if parsed is None:
        return None, set()
    seq, base = parsed
    needed = {seq}
    try:
        ref = layout.read_json(layout.join(layout.delta_dir(root, tenant, seq), "manifest.json")).get("shard")
    except FileNotFoundError:
        ref = None
    if ref:
        m = _DELTA.match(str(ref).split("/", 1)[0])
        if m:
            needed.add(int(m.group(1)))
    return base, needed


def _published(root: str, tenant: str, gen: int) -> bool:
    fs, path = layout.fs_and_path(layout.join(layout.generation_dir(root, tenant, gen), "manifest.json"))
    return fs.exists(path)


def remove(uri: str) -> None:
    """Delete a folder (recursively) and everything in it; absent is fine."""
    fs, path = layout.fs_and_path(uri)
    if fs.exists(path):
        fs.rm(path, recursive=True)


def collect(root: str, tenant: str, retain: int = DEFAULT_RETAIN) -> RetentionReport:
    """Delete the tenant's generations and deltas that retention does not keep (see the module doc)."""
    if retain < 1:
        raise ValueError(f"retain must be >= 1 (CURRENT is always kept), got {retain}")
    root = str(root).rstrip("/")
    current = layout.current_generation(root, tenant)
    report = RetentionReport(tenant=tenant, current=current)
    if current is None:  # nothing published: nothing is safe to judge
        return report
    base, needed = _live_delta(root, tenant)
    gens = layout.generations(root, tenant)
    older_published = [g for g in gens if g < current and _published(root, tenant, g)]
    keep = {current, *(older_published[max(0, len(older_published) - (retain - 1)):] if retain > 1 else ())}
    keep |= {g for g in gens if g > current}
    if base is not None:
        keep.add(base)
    for g in gens:
        if g in keep:
            continue
        remove(layout.generation_dir(root, tenant, g))
        remove(layout.join(layout.tenant_dir(root, tenant), "retired", f"gen-{g}.json"))  # its rollback record
        report.deleted_generations.append(g)
    for seq in layout.delta_seqs(root, tenant):
        if seq not in needed:
            remove(layout.delta_dir(root, tenant, seq))
            report.deleted_deltas.append(seq)
    report.kept_generations = sorted(g for g in gens if g in keep)
    return report
