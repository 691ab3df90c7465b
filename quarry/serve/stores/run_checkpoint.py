"""Where the actor run store's ``RunTable`` checkpoints: a write-ahead log of changes plus a
snapshot that folds it, on local disk or on object storage (any fsspec URI).

Both backends hold the same records: a snapshot (its first line ``{"seq": n}``, then one
run per line) and log entries ``{"q": seq, ...}`` after it; :meth:`load` returns the
snapshot's runs and the log entries it does not already hold, in order.

- :class:`FileCheckpoint` (a local ``state_dir``): ``runs.log`` appended to and flushed to
  the OS before the call returns, ``runs.snap`` written by temp file + fsync + rename.
- :class:`ObjectCheckpoint` (a URI ``state_dir``, default ``<index_root>/_serve/runs`` on a
  URI root): object storage has no append, so each change is one object
  ``log/<seq:016d>.json`` (a PUT is atomic and durable once it returns), and a compaction
  writes ``runs.snap`` in one PUT, then deletes the log objects it folded. A crash between
  the two leaves log objects the snapshot holds; :meth:`load` skips them by sequence. An
  actor re-created on another node reads the same objects: nothing is node-local.

One writer at a time: the one named actor (Ray restarts it; it is the only caller).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Protocol

from quarry.core.index import layout
from quarry.core.jsonl import read_appended


class Checkpoint(Protocol):
    def load(self) -> tuple[int, list[dict[str, Any]], list[dict[str, Any]]]:
        """(snapshot seq, snapshot runs, log entries after it in order)."""
        ...

    def append(self, entry: dict[str, Any]) -> None:
        """Durable (to the OS / the object store) before it returns."""
        ...

    def compact(self, seq: int, runs: Iterable[dict[str, Any]]) -> None:
        """Replace everything up to ``seq`` by the snapshot ``runs``."""
        ...

    def close(self) -> None: ...


def _dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"))


def _snapshot(lines: Iterable[str]) -> tuple[int, list[dict[str, Any]]]:
    it = iter(lines)
    head = next(it, None)
    if head is None:
        return 0, []
    return int(json.loads(head)["seq"]), [json.loads(line) for line in it if line.strip()]


def _snapshot_text(seq: int, runs: Iterable[dict[str, Any]]) -> str:
    return "".join([_dumps({"seq": seq}) + "\n", *(_dumps(r) + "\n" for r in runs)])


class FileCheckpoint:
    def __init__(self, state_dir: str | Path):
        self._dir = Path(state_dir)
        self._dir.mkdir(parents=True, exist_ok=True)
        self._log = None

    def load(self) -> tuple[int, list[dict[str, Any]], list[dict[str, Any]]]:
        seq, runs = 0, []
        snap = self._dir / "runs.snap"
        if snap.exists():
            with open(snap, encoding="utf-8") as f:
                seq, runs = _snapshot(f)
        entries = []
        log = self._dir / "runs.log"
        if log.exists():
            with open(log, encoding="utf-8") as f:
                entries = [e for e in read_appended(f) if e["q"] > seq]  # a torn line from a crash is skipped
        return seq, runs, entries

    def append(self, entry: dict[str, Any]) -> None:
        if self._log is None:
            self._log = open(self._dir / "runs.log", "a", encoding="utf-8")
        self._log.write(_dumps(entry) + "\n")
        self._log.flush()  # in the OS before the caller hears back: a process crash loses nothing

    def compact(self, seq: int, runs: Iterable[dict[str, Any]]) -> None:
        layout.write_atomic(str(self._dir / "runs.snap"), _snapshot_text(seq, runs).encode())
        if self._log is not None:
            self._log.close()
        self._log = open(self._dir / "runs.log", "w", encoding="utf-8")  # entries <= seq are in the snapshot

    def close(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None


class ObjectCheckpoint:
    def __init__(self, uri: str):
        self._uri = uri.rstrip("/")
        self._fs, self._path = layout.fs_and_path(self._uri)

    def _log_path(self, seq: int) -> str:
        return f"{self._path}/log/{seq:016d}.json"

    def _log_seqs(self) -> list[tuple[int, str]]:
        try:
            names = self._fs.ls(f"{self._path}/log", detail=False, refresh=True)
        except FileNotFoundError:
            return []
        out = []
        for p in names:
            stem = os.path.basename(p.rstrip("/")).removesuffix(".json")
            if stem.isdigit():
                out.append((int(stem), p))
        return sorted(out)

    def load(self) -> tuple[int, list[dict[str, Any]], list[dict[str, Any]]]:
        seq, runs = 0, []
        snap = f"{self._path}/runs.snap"
        if self._fs.exists(snap):
            seq, runs = _snapshot(self._fs.cat_file(snap).decode().splitlines())
        paths = [p for q, p in self._log_seqs() if q > seq]
        got = self._fs.cat(paths) if paths else {}  # one batch: s3fs fetches them concurrently
        entries = [json.loads(got[p]) for p in paths]
        return seq, runs, entries

    def append(self, entry: dict[str, Any]) -> None:
        self._fs.pipe_file(self._log_path(int(entry["q"])), _dumps(entry).encode())

    def compact(self, seq: int, runs: Iterable[dict[str, Any]]) -> None:
        self._fs.pipe_file(f"{self._path}/runs.snap", _snapshot_text(seq, runs).encode())
        folded = [p for q, p in self._log_seqs() if q <= seq]
        if folded:
            self._fs.rm(folded)

    def close(self) -> None:
        pass  # every append is already a finished PUT


def checkpoint_for(state_dir: str) -> Checkpoint:
    """A local path -> files; any other fsspec URI (``s3://...``) -> objects."""
    return FileCheckpoint(state_dir) if layout.is_local(state_dir) else ObjectCheckpoint(state_dir)
