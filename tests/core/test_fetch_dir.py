"""layout.fetch_dir: a remote folder copied once into the cache, atomically; a local one used in place."""

from __future__ import annotations

import hashlib
import uuid

import fsspec
import pytest

from quarry.core.index import layout

pytestmark = pytest.mark.unit


@pytest.fixture()
def remote():
    fs = fsspec.filesystem("memory")
    base = f"/fetch-{uuid.uuid4().hex[:8]}"
    fs.pipe(f"{base}/a.txt", b"alpha")
    fs.pipe(f"{base}/sub/b.bin", b"\x00\x01")
    yield f"memory://{base}", fs, base
    fs.rm(base, recursive=True)


def test_remote_folder_is_copied_once_with_its_layout(remote, tmp_path):
    uri, fs, base = remote
    got = layout.fetch_dir(uri, tmp_path)
    assert (got / "a.txt").read_bytes() == b"alpha" and (got / "sub" / "b.bin").read_bytes() == b"\x00\x01"
    assert [p.name for p in tmp_path.iterdir()] == [got.name]  # no temporary copy left behind
    fs.pipe(f"{base}/a.txt", b"changed")  # a URI names immutable content: the cached copy is reused
    assert layout.fetch_dir(uri, tmp_path) == got and (got / "a.txt").read_bytes() == b"alpha"


def test_an_incomplete_copy_is_never_used(remote, tmp_path):
    uri, _, _ = remote
    debris = tmp_path / hashlib.sha256(uri.encode()).hexdigest()[:24]
    debris.mkdir()
    (debris / "a.txt").write_bytes(b"half")  # a crashed copy: no completion marker
    got = layout.fetch_dir(uri, tmp_path)
    assert got == debris and (got / "a.txt").read_bytes() == b"alpha" and (got / "sub" / "b.bin").exists()


def test_missing_remote_folder_and_local_paths(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such directory"):
        layout.fetch_dir("memory://absent-folder", tmp_path / "cache")
    assert not (tmp_path / "cache").exists()
    assert layout.fetch_dir(str(tmp_path), tmp_path / "cache") == tmp_path
    assert layout.fetch_dir(tmp_path.as_uri(), tmp_path / "cache") == tmp_path
