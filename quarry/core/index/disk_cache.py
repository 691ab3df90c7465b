"""The local disk cache of remote directories (shards, deltas) that ``layout.fetch_dir``
copies: bounded in bytes, least recently used whole copies evicted first.

A copy is one directory ``<cache_root>/<key>/`` with a ``.complete`` marker, written last;
the marker's mtime is its last use (``touch`` on every hit). A copy in use is never deleted
under its reader: a loaded :class:`~quarry.core.index.shards.Shard` pins its directory
(``pin``) and unpins it when the shard is garbage-collected, and ``evict`` skips pinned
copies. Pins are per process, so a cache directory must not be shared by several serving
processes with a byte bound (each replica gets its own, the default under its temp dir).
"""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path

_pins: dict[str, int] = {}
_lock = threading.Lock()


def _key(path: str | Path) -> str:
    return str(Path(path).resolve())


def pin(path: str | Path) -> None:
    with _lock:
        k = _key(path)
        _pins[k] = _pins.get(k, 0) + 1


def unpin(path: str | Path) -> None:
    with _lock:
        k = _key(path)
        n = _pins.get(k, 0) - 1
        if n > 0:
            _pins[k] = n
        else:
            _pins.pop(k, None)


def pinned(path: str | Path) -> bool:
    with _lock:
        return _key(path) in _pins


def touch(copy: Path) -> None:
    try:
        os.utime(copy / ".complete")
    except OSError:
        pass


def copies(cache_root: str | Path) -> dict[str, Path]:
    """The cache's own index: the URI each complete copy's marker names -> the copy (no
    trailing slash on the URI). A copy still being written has no marker and is not listed."""
    root = Path(cache_root)
    out: dict[str, Path] = {}
    for d in root.iterdir() if root.is_dir() else ():
        try:
            out[(d / ".complete").read_text().rstrip("/")] = d
        except OSError:  # not a copy, or one not yet complete
            continue
    return out


def dir_bytes(copy: Path) -> int:
    return sum(f.stat().st_size for f in copy.rglob("*") if f.is_file())


def evict(cache_root: str | Path, max_bytes: int, keep: Path | None = None) -> list[Path]:
    """Delete least recently used complete copies not pinned (and not ``keep``) until the
    cache holds at most ``max_bytes``; returns what was deleted."""
    root = Path(cache_root)
    copies = []
    for d in root.iterdir() if root.is_dir() else ():
        marker = d / ".complete"
        if d.is_dir() and marker.exists():
            copies.append((marker.stat().st_mtime, d, dir_bytes(d)))
    total = sum(b for _, _, b in copies)
    gone = []
    for _, d, b in sorted(copies, key=lambda c: c[0]):
        if total <= max_bytes:
            break
        if (keep is not None and d == keep) or pinned(d):
            continue
        shutil.rmtree(d, ignore_errors=True)
        total -= b
        gone.append(d)
    return gone
