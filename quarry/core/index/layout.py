"""The index layout of DESIGN §3 over any fsspec URI:

    <root>/<tenant>/gen-<n>/shard-<k>/...   one shard's files
    <root>/<tenant>/gen-<n>/manifest.json   written last, after every shard verified
    <root>/<tenant>/manifest.json           copy of the live generation's manifest
    <root>/<tenant>/CURRENT                 names the live generation; replaced atomically

A crashed build leaves a gen folder without a manifest; it is never published. The
manifest itself is read, written and published by ``quarry.core.index.manifest``; this
module knows paths, atomic writes, checksums and copies.

Changes applied since the live generation was built (``quarry apply-changes``):

    <root>/<tenant>/changes/delta-<m>/state.json     the fold of every applied change
    <root>/<tenant>/changes/delta-<m>/shard/...      upserted passages (a shard), optional
    <root>/<tenant>/changes/delta-<m>/manifest.json  written last, with checksums
    <root>/<tenant>/DELTA                            "delta-<m> gen-<n>": the change watermark

Also per tenant: ``LEASE/<n>.json`` (the writer lease's numbered claims,
``quarry.core.index.lease``), ``retired/gen-<n>.json`` (the delta a generation was served
with when a publish left it, for rollback: ``quarry.core.index.pointers``) and ``PURGED``
(the purge epoch replicas watch, written by ``quarry purge``: a counter, a time and a
generation floor, never a document id or text).

``DELTA`` is the small file every replica reads per request; a delta applies only over the
generation it names, so a compaction or rebuild that switches ``CURRENT`` retires it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

import fsspec
from fsspec.core import url_to_fs

from quarry.core.index import disk_cache

_GEN = re.compile(r"^gen-(\d+)$")
_DELTA = re.compile(r"^delta-(\d+)$")
_WATERMARK = re.compile(r"^delta-(\d+) gen-(\d+)$")


def fs_and_path(uri: str | os.PathLike) -> tuple[fsspec.AbstractFileSystem, str]:
    fs, path = url_to_fs(str(uri))
    return fs, path.rstrip("/")


def join(*parts: str) -> str:
    return "/".join(p.rstrip("/") for p in parts)


def is_local(uri: str | os.PathLike) -> bool:
    fs, _ = fs_and_path(uri)
    return "file" in (fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,))


def tenant_dir(root: str, tenant: str) -> str:
    return join(str(root), tenant)


def generation_dir(root: str, tenant: str, generation: int) -> str:
    return join(str(root), tenant, f"gen-{generation}")


def shard_dir(root: str, tenant: str, generation: int, shard: int) -> str:
    return join(generation_dir(root, tenant, generation), f"shard-{shard}")


def list_tenants(root: str) -> list[str]:
    fs, path = fs_and_path(root)
    if not fs.exists(path):
        return []
    return sorted(
        p.rstrip("/").rsplit("/", 1)[-1] for p in fs.ls(path, detail=False) if fs.exists(join(p, "CURRENT"))
    )


def _numbered(uri: str, pattern: re.Pattern) -> list[int]:
    """The numbers of the folders directly under ``uri`` whose names match ``pattern``, sorted."""
    fs, path = fs_and_path(uri)
    if not fs.exists(path):
        return []
    out = []
    for p in fs.ls(path, detail=False):
        m = pattern.match(p.rstrip("/").rsplit("/", 1)[-1])
        if m:
            out.append(int(m.group(1)))
    return sorted(out)


def generations(root: str, tenant: str) -> list[int]:
    return _numbered(tenant_dir(root, tenant), _GEN)


def next_generation(root: str, tenant: str) -> int:
    """One past every generation folder ever started, so a crashed build's folder is never
    reused, and past every generation a purge removed (``PURGED``'s floor): a (tenant,
    generation) key never names two different contents, even after a tenant purge."""
    gens = generations(root, tenant)
    floor = int((read_purge_record(root, tenant) or {}).get("generation_floor", 0))
    return max((max(gens) + 1) if gens else 1, floor + 1)


def current_generation(root: str, tenant: str) -> int | None:
    fs, path = fs_and_path(join(tenant_dir(root, tenant), "CURRENT"))
    try:
        with fs.open(path, "r") as f:
            text = f.read().strip()
    except FileNotFoundError:
        return None
    m = _GEN.match(text)
    if not m:
        raise ValueError(f"CURRENT for tenant {tenant!r} is corrupt: {text!r}")
    return int(m.group(1))


def write_atomic(uri: str, data: bytes) -> None:
    """Write ``data`` so readers see the old or the new content, never a torn file.
    Local: temp file + fsync + rename. Object stores: a single PUT is atomic."""
    fs, path = fs_and_path(uri)
    if is_local(uri):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
    else:
        with fs.open(path, "wb") as f:
            f.write(data)


def read_json(uri: str) -> dict[str, Any]:
    fs, path = fs_and_path(uri)
    with fs.open(path, "r") as f:
        return json.load(f)


def write_json(uri: str, obj: Any) -> None:
    write_atomic(uri, json.dumps(obj, indent=2, sort_keys=True, default=str).encode())


def _local_files(local_dir: str | Path) -> list[tuple[str, str]]:
    """(relative path, absolute path) of every file under a local folder, sorted by relative
    path (strings: sorting ``Path`` objects cost more than hashing a small shard's files)."""
    base = os.fspath(local_dir)
    out = []
    for d, _, names in os.walk(base):
        for n in names:
            full = os.path.join(d, n)
            out.append((os.path.relpath(full, base), full))
    return sorted(out)


def file_sizes(local_dir: str | Path) -> dict[str, int]:
    """Size in bytes of every file under a local shard folder, keyed by relative path."""
    return {rel: os.stat(full).st_size for rel, full in _local_files(local_dir)}


def file_checksums(local_dir: str | Path) -> dict[str, str]:
    """sha256 of every file under a local shard folder, keyed by relative path."""
    out = {}
    for rel, full in _local_files(local_dir):
        h = hashlib.sha256()
        with open(full, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        out[rel] = h.hexdigest()
    return out


def upload_dir(local_dir: str | Path, uri: str) -> None:
    """Copy a locally built shard to its destination (a no-op move for local roots)."""
    fs, path = fs_and_path(uri)
    if is_local(uri):
        if os.path.abspath(local_dir) != os.path.abspath(path):
            if os.path.exists(path):
                shutil.rmtree(path)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            shutil.copytree(local_dir, path)
        return
    fs.put(str(local_dir), path, recursive=True)


def fetch_dir(uri: str, cache_root: str | Path, max_bytes: int | None = None) -> Path:
    """A local path for a directory (a shard, a model): itself when local, else a copy
    under ``cache_root`` keyed by the URI (what a URI names is immutable). The copy is made
    under a temporary name and renamed once complete, so a crashed download is never used.
    ``max_bytes``: after a new copy, evict least recently used copies not in use down to
    it (``quarry.core.index.disk_cache``). Raises ``FileNotFoundError`` when a remote
    ``uri`` is not a directory."""
    fs, path = fs_and_path(uri)
    if is_local(uri):
        return Path(path)
    cache = Path(cache_root)
    local = cache / hashlib.sha256(str(uri).rstrip("/").encode()).hexdigest()[:24]
    if (local / ".complete").exists():
        disk_cache.touch(local)
        return local
    copied = _copy_dir(fs, uri, path, cache, local)
    if max_bytes is not None:
        disk_cache.evict(cache, max_bytes, keep=copied)
    return copied


def _copy_dir(fs, uri: str, path: str, cache: Path, local: Path) -> Path:
    if not fs.isdir(path):
        raise FileNotFoundError(f"{uri}: no such directory")
    cache.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{local.name}.tmp-", dir=cache))
    try:
        for src in fs.find(path):  # every file below the prefix, keeping its relative path
            dst = tmp / src[len(path):].lstrip("/")
            dst.parent.mkdir(parents=True, exist_ok=True)
            fs.get_file(src, str(dst))
        (tmp / ".complete").write_text(str(uri))
        if local.exists():  # debris of a crashed copy, or a concurrent winner
            if (local / ".complete").exists():
                return local
            shutil.rmtree(local, ignore_errors=True)
        try:
            os.replace(tmp, local)
        except OSError:
            if not (local / ".complete").exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return local


# --------------------------------------------------------------------------- deltas


def changes_dir(root: str, tenant: str) -> str:
    return join(tenant_dir(root, tenant), "changes")


def delta_dir(root: str, tenant: str, seq: int) -> str:
    return join(changes_dir(root, tenant), f"delta-{seq}")


def watermark_path(root: str, tenant: str) -> str:
    return join(tenant_dir(root, tenant), "DELTA")


def read_watermark(root: str, tenant: str) -> str | None:
    """The raw change watermark (a few bytes), or None when no change was ever applied.
    Read on every request, so a local root skips fsspec's URI resolution (most of the cost)."""
    return read_small(watermark_path(root, tenant))


def read_small(uri: str) -> str | None:
    """A pointer file's stripped text (None when absent or empty). Pointers are read per
    request, so a local root skips fsspec's URI resolution (most of the cost)."""
    local = uri[len("file://"):] if uri.startswith("file://") else (uri if "://" not in uri else None)
    try:
        if local is not None:
            with open(local, "rb") as f:
                return f.read().decode().strip() or None
        fs, path = fs_and_path(uri)
        with fs.open(path, "r") as f:
            return f.read().strip() or None
    except FileNotFoundError:
        return None


def parse_watermark(text: str | None) -> tuple[int, int] | None:
    """(delta seq, base generation) from a watermark; None for none; raises when corrupt."""
    if text is None:
        return None
    m = _WATERMARK.match(text.strip())
    if not m:
        raise ValueError(f"change watermark is corrupt: {text!r}")
    return int(m.group(1)), int(m.group(2))


def next_delta(root: str, tenant: str) -> int:
    """One past every delta folder ever started (a crashed apply's folder is never reused)."""
    return max([0, *delta_seqs(root, tenant)]) + 1


def delta_seqs(root: str, tenant: str) -> list[int]:
    """Every delta folder of ``tenant``, live or not, sorted."""
    return _numbered(changes_dir(root, tenant), _DELTA)


def verify_files(uri: str, checksums: dict[str, str]) -> None:
    """Re-read files under ``uri`` and compare sha256; raise if any is missing or differs."""
    fs, path = fs_and_path(uri)
    for rel, want in checksums.items():
        h = hashlib.sha256()
        try:
            with fs.open(join(path, rel), "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    h.update(block)
        except FileNotFoundError as e:
            raise RuntimeError(f"{uri}: missing {rel}") from e
        if h.hexdigest() != want:
            raise RuntimeError(f"{uri}: checksum mismatch on {rel}")


def check_files(uri: str, sizes: dict[str, int]) -> None:
    """The publisher's cheap check: every file under ``uri`` named in ``sizes`` exists with
    that size. One listing of the prefix (object metadata only): no file is opened, so the
    driver never streams shard bytes. Content was verified where it was written (the shard
    task re-reads its upload, :func:`verify_files`). Raises ``RuntimeError``."""
    fs, path = fs_and_path(uri)
    try:
        listed = fs.find(path, detail=True)
    except FileNotFoundError:
        listed = {}
    have = {name[len(path):].lstrip("/"): int(info.get("size") or 0) for name, info in listed.items()}
    for rel, want in sizes.items():
        if rel not in have:
            raise RuntimeError(f"{uri}: missing {rel}")
        if have[rel] != int(want):
            raise RuntimeError(f"{uri}: {rel} is {have[rel]} bytes, the shard task wrote {want}")


def publish_delta(root: str, tenant: str, seq: int) -> None:
    """Make delta ``seq`` live: its manifest must exist and every checksum must match;
    then the watermark is replaced atomically (readers see the old or the new delta)."""
    d = delta_dir(root, tenant, seq)
    manifest = read_json(join(d, "manifest.json"))
    verify_files(d, manifest["checksums"])
    write_atomic(watermark_path(root, tenant), f"delta-{seq} gen-{manifest['base']}\n".encode())


# --------------------------------------------------------------------------- purges


def purge_path(root: str, tenant: str) -> str:
    return join(tenant_dir(root, tenant), "PURGED")


def read_purge_epoch(root: str, tenant: str) -> str | None:
    """The tenant's raw purge record (a few bytes; None when it was never purged). Replicas
    compare it with the one they loaded under and drop every copy when it moved."""
    return read_small(purge_path(root, tenant))


def read_purge_record(root: str, tenant: str) -> dict[str, Any] | None:
    raw = read_purge_epoch(root, tenant)
    return json.loads(raw) if raw else None


def fetched_copies(cache_root: str | Path, uri_prefix: str) -> list[Path]:
    """The local copies :func:`fetch_dir` made under ``cache_root`` of directories below
    ``uri_prefix`` (each copy names its URI in ``.complete``; ``disk_cache.copies``)."""
    prefix = str(uri_prefix).rstrip("/") + "/"
    return [d for uri, d in disk_cache.copies(cache_root).items() if (uri + "/").startswith(prefix)]


def drop_fetched(cache_root: str | Path, uri_prefix: str, keep: set[Path] | None = None) -> list[Path]:
    """Delete the local copies of directories below ``uri_prefix`` (except ``keep``); returns them."""
    keep = {Path(k).resolve() for k in (keep or ())}
    dropped = []
    for d in fetched_copies(cache_root, uri_prefix):
        if d.resolve() in keep:
            continue
        shutil.rmtree(d, ignore_errors=True)
        dropped.append(d)
    return dropped
