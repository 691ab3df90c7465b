"""The bounded local copy cache of remote directories: least recently used complete copies
go first, and a copy a loaded shard still reads is never deleted."""

import fsspec
import pytest

from quarry.core.index import disk_cache, layout

pytestmark = pytest.mark.unit


def _remote(name: str, size: int) -> str:
    fs = fsspec.filesystem("memory")
    fs.pipe(f"/dc-test/{name}/data.bin", b"x" * size)
    return f"memory://dc-test/{name}"


def test_evicts_lru_copies_but_not_pinned_ones(tmp_path):
    a, b, c = (_remote(n, 1000) for n in ("a", "b", "c"))
    da = layout.fetch_dir(a, tmp_path, max_bytes=2500)
    db = layout.fetch_dir(b, tmp_path, max_bytes=2500)
    assert da.exists() and db.exists()
    disk_cache.pin(da)  # in use by a loaded index
    try:
        dc = layout.fetch_dir(c, tmp_path, max_bytes=2500)  # over budget: the oldest unpinned (b) goes
        assert da.exists() and dc.exists() and not db.exists()
    finally:
        disk_cache.unpin(da)
    layout.fetch_dir(c, tmp_path, max_bytes=2500)  # a hit marks c used
    db2 = layout.fetch_dir(b, tmp_path, max_bytes=2500)  # b copied again; now a is the oldest
    assert db2.exists() and not da.exists() and dc.exists()
    assert (db2 / "data.bin").read_bytes() == b"x" * 1000


def test_unbounded_by_default(tmp_path):
    dirs = [layout.fetch_dir(_remote(f"u{i}", 500), tmp_path) for i in range(4)]
    assert all(d.exists() for d in dirs)
