"""Moving a tenant's ``CURRENT`` pointer by hand (the admin API's rollback), and what each
generation on disk holds. Every operator-initiated pointer change goes through
:func:`rollback`, one function, so a writer lease can wrap it in one place.

A rollback makes another complete generation live the way a build publishes one
(``quarry.core.index.manifest.publish``: every shard's checksums re-verified, the tenant's
manifest copy written, then ``CURRENT`` replaced atomically). The change watermark
(``DELTA``) names the generation its delta was applied over, so after a rollback that delta
no longer applies: changes applied over the retired generation are not served until they
are sent again (the report says which delta was retired).

The target generation itself may have been served with a delta when it was live. A
rollback restores that state exactly or refuses: the delta it was served with is the newest
of the ``retired/gen-<n>.json`` record (written by every publish that leaves a generation),
the compaction record of a generation compacted from it and the delta folders built over
it. When that delta (and the earlier delta whose shard it reuses) is still on storage with
matching checksums, ``CURRENT`` moves and ``DELTA`` then names it (a replica that reloads
in between serves the target without its delta for that moment); when compaction's or
``quarry gc``'s retention removed it, the rollback is refused (409, one line).
"""

from __future__ import annotations

from dataclasses import dataclass

from quarry.core.index import layout
from quarry.core.index.lease import LeaseBusy, tenant_lease
from quarry.core.index.manifest import manifest_path, publish, retired_path


class RollbackRefused(Exception):
    """A rollback that cannot be done; ``status`` 404 (no such tenant) or 409 (the target is
    not a complete generation other than the live one). The message is for the caller."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class RollbackResult:
    tenant: str
    generation: int
    previous: int
    retired_delta: str | None  # the watermark that no longer applies, if any
    restored_delta: int | None = None  # the delta the target generation was served with, live again


@dataclass(frozen=True)
class GenerationInfo:
    generation: int
    complete: bool  # a manifest was written: the build finished and it can be published
    size_bytes: int


def generation_complete(root: str, tenant: str, generation: int) -> bool:
    fs, path = layout.fs_and_path(manifest_path(root, tenant, generation))
    return fs.exists(path)


def rollback(root: str, tenant: str, generation: int, wait_s: float = 10.0) -> RollbackResult:
    """Make ``generation`` the live one. Refused (``RollbackRefused``) for an unknown
    tenant, the generation already live, or a generation that is missing or was never
    completed (no manifest); a shard whose checksums no longer match raises from
    ``publish`` and nothing changes. Runs under the tenant's writer lease
    (``quarry.core.index.lease``): a job writing the tenant meanwhile makes it a 409."""
    if layout.current_generation(root, tenant) is None:
        raise RollbackRefused(404, "not found")
    try:
        with tenant_lease(root, tenant, "rollback", wait_s=wait_s) as held:
            return _rollback(root, tenant, generation, held.ensure)
    except LeaseBusy as e:
        raise RollbackRefused(409, str(e)) from None


def _rollback(root: str, tenant: str, generation: int, still_held) -> RollbackResult:
    current = layout.current_generation(root, tenant)
    if current is None:
        raise RollbackRefused(404, "not found")
    if generation == current:
        raise RollbackRefused(409, f"gen-{generation} is already the live generation")
    if generation not in layout.generations(root, tenant):
        raise RollbackRefused(409, f"gen-{generation} does not exist for this tenant")
    if not generation_complete(root, tenant, generation):
        raise RollbackRefused(409, f"gen-{generation} has no manifest (its build never finished); it cannot be served")
    watermark = layout.read_watermark(root, tenant)
    parsed = layout.parse_watermark(watermark) if watermark else None
    served = served_delta(root, tenant, generation)
    if served is not None:
        missing = _missing_delta(root, tenant, generation, served)
        if missing:
            raise RollbackRefused(409, f"gen-{generation} was served with delta-{served}, and {missing}; "
                                       f"rolling back would serve gen-{generation} without those changes "
                                       f"(roll forward with apply-changes or rebuild instead)")
    still_held()
    publish(root, tenant, generation)
    if served is not None:
        layout.publish_delta(root, tenant, served)
    return RollbackResult(tenant, generation, current,
                          watermark if parsed is not None and parsed[1] == current else None, served)


def served_delta(root: str, tenant: str, generation: int) -> int | None:
    """The delta ``generation`` was last served with (None: it was served without one)."""
    seqs = []
    try:
        seqs.append(int(layout.read_json(retired_path(root, tenant, generation))["delta"]))
    except FileNotFoundError:
        pass
    for g in layout.generations(root, tenant):
        try:
            src = layout.read_json(manifest_path(root, tenant, g)).get("compacted_from") or {}
        except FileNotFoundError:
            continue
        if src.get("generation") == generation and src.get("delta") is not None:
            seqs.append(int(src["delta"]))
    for seq in layout.delta_seqs(root, tenant):
        try:
            if layout.read_json(layout.join(layout.delta_dir(root, tenant, seq), "manifest.json")).get("base") == generation:
                seqs.append(seq)
        except FileNotFoundError:
            continue
    parsed = layout.parse_watermark(layout.read_watermark(root, tenant))
    if parsed is not None and parsed[1] == generation:
        seqs.append(parsed[0])
    return max(seqs, default=None)


def _missing_delta(root: str, tenant: str, generation: int, seq: int) -> str | None:
    """Why delta ``seq`` over ``generation`` cannot be served again (None: it can)."""
    d = layout.delta_dir(root, tenant, seq)
    try:
        m = layout.read_json(layout.join(d, "manifest.json"))
    except FileNotFoundError:
        return f"delta-{seq} was removed (compaction or quarry gc retention)"
    if m.get("base") != generation:
        return f"delta-{seq} on storage was built over gen-{m.get('base')}"
    try:
        layout.verify_files(d, m["checksums"])
        ref = str(m.get("shard") or "")
        if ref.startswith("delta-") and ref.split("/", 1)[0] != f"delta-{seq}":
            other = layout.join(layout.changes_dir(root, tenant), ref.split("/", 1)[0])
            layout.verify_files(other, layout.read_json(layout.join(other, "manifest.json"))["checksums"])
    except (FileNotFoundError, RuntimeError, ValueError, KeyError) as e:
        return f"delta-{seq}'s files are incomplete ({type(e).__name__})"
    return None


def dir_size(uri: str) -> int:
    fs, path = layout.fs_and_path(uri)
    if not fs.exists(path):
        return 0
    return int(fs.du(path, total=True))


def generation_infos(root: str, tenant: str) -> list[GenerationInfo]:
    """Every generation folder of ``tenant``, oldest first, with its size on disk."""
    return [GenerationInfo(g, generation_complete(root, tenant, g), dir_size(layout.generation_dir(root, tenant, g)))
            for g in layout.generations(root, tenant)]
