"""Append-only trace store: JSON-lines files per tenant, hour and writer.

Layout under ``trace_dir`` (default ``<index_root>/_traces``)::

    <tenant>/<YYYYMMDDHH>/<writer>.jsonl          local root: one trace per line, UTC hour of ``at``
    <tenant>/<YYYYMMDDHH>/<writer>-<seq>.jsonl    URI root (s3://...): one object per flush batch

Each gateway replica is one writer with its own files, so replicas never contend and a
file is only ever appended to. Object storage has no append: on a URI root each flush
writes a new object (``seq`` counts the writer's flushes), and readers on any node list
the hour prefix, so a trace written on one node is found from every other. ``TraceWriter.append`` puts the record in memory and
returns; a background thread writes buffered records every ``flush_ms`` and ``close()``
(replica shutdown) writes the rest, so a trace write never delays a response and is not
lost on a graceful stop. A replica killed outright loses at most its last ``flush_ms``.

Quotas and retention are per tenant: a writer keeps at most ``per_tenant_hour`` traces
for one tenant in one hour (the rest are counted in ``dropped`` and not written), and hour
folders older than ``retention_h`` are deleted. One tenant's volume can therefore never
remove or displace another tenant's traces.

A trace id names its file (``<YYYYMMDDHH>-<writer>-<random hex>``), so the operator
endpoint reads one file of the caller's own tenant and nothing else.

Record fields (what ``quarry eval`` and ``quarry plan --from-traces`` read): every record
has ``trace_id``, ``kind`` (``search``, ``answer``, ``abstention``), ``tenant``, ``at``
(epoch seconds), ``run_id``, ``groups_hash`` and ``subject_hash`` (never names). A search
adds ``query``, ``filters``, ``generation``, ``second_stage``, ``candidates`` (one per
fused candidate: ids, each leg's rank, fused rank, rerank score, ``expanded``,
``final_position``), ``stages`` (what each stage kept and dropped), ``delivered`` (passage
ids in order), ``delivered_tokens``, ``source_versions``, ``new_ids``, ``searches_left``,
``truncated`` and ``timings_ms`` (per stage, milliseconds). Abstentions add ``reason``;
answers add ``outcome`` and ``checks``. No record holds passage text.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import threading
import time
import uuid
from collections import Counter, deque
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from quarry.core.index import layout
from quarry.core.jsonl import read_appended
from quarry.core.records import SLUG as _TENANT

log = logging.getLogger("quarry.serve")
TRACE_ID = re.compile(r"(\d{10})-([0-9a-f]{8})-([0-9a-f]{32})")
_SWEEP_EVERY_S = 600.0


def hour_of(at: float) -> str:
    return datetime.fromtimestamp(at, timezone.utc).strftime("%Y%m%d%H")


def _object_store(root: str):
    """(fs, path) for a URI root that is not a local file system, else None."""
    if "://" not in str(root) or str(root).startswith("file://"):
        return None
    return layout.fs_and_path(root)


def _complete_lines(text: str) -> list[str]:
    """The lines of an appended-to file a reader may parse: a writer on another replica
    may be half-way through its batch, so a last line without its newline is not one yet."""
    return text.split("\n")[:-1]


def _lines(fs, path: str) -> list[str]:
    try:
        with fs.open(path, "r", encoding="utf-8") as f:
            return f.read().splitlines()
    except FileNotFoundError:
        return []


class TraceWriter:
    def __init__(self, root: str, *, writer_id: str | None = None, retention_h: int = 168,
                 per_tenant_hour: int = 100_000, flush_ms: int = 200):
        self._objects = _object_store(root)
        self.root = Path(root) if self._objects is None else root
        self._seq = 0  # flush batches written (object stores: one object each)
        self.writer_id = writer_id or uuid.uuid4().hex[:8]
        self.retention_h, self.per_tenant_hour, self.flush_s = retention_h, per_tenant_hour, flush_ms / 1000
        self.dropped: Counter[str] = Counter()
        self._kept: Counter[tuple[str, str]] = Counter()
        self._buf: deque[tuple[str, str, Any]] = deque()  # (tenant, hour, record or json line)
        self._io = threading.Lock()  # one flush at a time (thread and close())
        self._stop = threading.Event()
        self._last_sweep = 0.0
        self._thread = threading.Thread(target=self._run, name=f"trace-writer-{self.writer_id}", daemon=True)
        self._thread.start()

    def new_id(self, at: float) -> str:
        return f"{hour_of(at)}-{self.writer_id}-{uuid.uuid4().hex}"

    def append(self, record: dict[str, Any]) -> bool:
        """Queue one trace (it must carry ``trace_id``, ``tenant`` and ``at``). Returns False
        when the tenant's hourly quota dropped it."""
        tenant, hour = record["tenant"], record["trace_id"][:10]
        key = (tenant, hour)
        if self._kept[key] >= self.per_tenant_hour:
            self.dropped[tenant] += 1
            return False
        self._kept[key] += 1
        self._buf.append((tenant, hour, record))  # serialised by the writer thread, off the request
        return True

    def flush(self) -> int:
        with self._io:
            batch: dict[tuple[str, str], list[str]] = {}
            n = 0
            while self._buf:
                tenant, hour, rec = self._buf.popleft()
                try:
                    line = rec if isinstance(rec, str) else json.dumps(rec, separators=(",", ":"), default=str)
                except (TypeError, ValueError):
                    self.dropped[tenant] += 1  # unserialisable: counted, never blocks the rest
                    continue
                batch.setdefault((tenant, hour), []).append(line)
                n += 1
            failed: OSError | None = None
            for (tenant, hour), lines in batch.items():
                try:
                    self._write(tenant, hour, "\n".join(lines) + "\n")
                except OSError as e:  # full or vanished disk: keep the lines for the next flush
                    failed = e
                    self._buf.extend((tenant, hour, line) for line in lines)
                    n -= len(lines)
            if failed is not None:
                raise failed
            return n

    def _write(self, tenant: str, hour: str, text: str) -> None:
        if self._objects is None:
            d = self.root / tenant / hour
            d.mkdir(parents=True, exist_ok=True)
            with open(d / f"{self.writer_id}.jsonl", "a", encoding="utf-8") as f:
                f.write(text)
            return
        fs, path = self._objects
        self._seq += 1
        with fs.open(layout.join(path, tenant, hour, f"{self.writer_id}-{self._seq:08d}.jsonl"), "wb") as f:
            f.write(text.encode("utf-8"))  # one PUT: readers see the whole batch or nothing

    def sweep(self, now: float | None = None) -> int:
        """Delete hour folders (prefixes) past the retention, for every tenant. Idempotent;
        every writer may run it."""
        cutoff = hour_of((now or time.time()) - self.retention_h * 3600)
        removed = 0
        if self._objects is not None:
            removed = self._sweep_objects(cutoff)
        elif self.root.exists():
            removed = self._sweep_local(cutoff)
        # forget quota counters of past hours
        current = hour_of(time.time())
        for key in list(self._kept):  # list() copies atomically; append() may run meanwhile
            if key[1] < current:
                self._kept.pop(key, None)
        return removed

    def _sweep_objects(self, cutoff: str) -> int:
        fs, path = self._objects
        removed = 0
        for tdir in _subdirs(fs, path):
            for hdir in _subdirs(fs, tdir):
                name = hdir.rsplit("/", 1)[-1]
                if len(name) == 10 and name.isdigit() and name < cutoff:
                    fs.rm(hdir, recursive=True)
                    removed += 1
        return removed

    def _sweep_local(self, cutoff: str) -> int:
        removed = 0
        for tdir in self.root.iterdir():
            if not tdir.is_dir():
                continue
            for hdir in tdir.iterdir():
                if hdir.is_dir() and len(hdir.name) == 10 and hdir.name.isdigit() and hdir.name < cutoff:
                    shutil.rmtree(hdir, ignore_errors=True)
                    removed += 1
        return removed

    def _run(self) -> None:
        while not self._stop.wait(self.flush_s):
            self._tick()

    def _tick(self) -> None:
        try:
            self.flush()
            if time.monotonic() - self._last_sweep > _SWEEP_EVERY_S:
                self._last_sweep = time.monotonic()
                self.sweep()
        except OSError:
            pass  # the writer thread must survive a bad disk; unwritten records stay buffered
        except Exception:  # noqa: BLE001 - the writer thread must outlive any one failure
            log.exception("trace writer: flush failed")

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.flush()


def find_trace(root: str, tenant: str, trace_id: str, wait_s: float = 0.0) -> dict[str, Any] | None:
    """One trace of ``tenant`` by id, or None. ``wait_s`` covers a trace still in another
    replica's buffer (written within ``flush_ms``)."""
    m = TRACE_ID.fullmatch(trace_id or "")
    if m is None or not _TENANT.fullmatch(tenant):
        return None
    needle = f'"trace_id":"{trace_id}"'
    deadline = time.monotonic() + wait_s
    objects = _object_store(root)
    path = Path(root) / tenant / m.group(1) / f"{m.group(2)}.jsonl"
    while True:
        if objects is not None:  # the writer's objects of that hour, from any node
            fs, base = objects
            hour_dir = layout.join(base, tenant, m.group(1))
            try:
                names = sorted(n for n in fs.ls(hour_dir, detail=False, refresh=True)
                               if n.rsplit("/", 1)[-1].startswith(m.group(2) + "-"))
            except FileNotFoundError:
                names = []
            lines = (line for n in names for line in _lines(fs, n))
        elif path.exists():
            with open(path, encoding="utf-8") as f:
                lines = _complete_lines(f.read())
        else:
            lines = []
        for line in lines:
            if needle in line:
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    break  # a line another replica is still appending: read again
                return rec if rec.get("tenant") == tenant else None
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.05)


def _subdirs(fs, path: str) -> list[str]:
    try:
        return sorted(p["name"] for p in fs.ls(path, detail=True, refresh=True) if p.get("type") == "directory")
    except FileNotFoundError:
        return []


def read_traces(root: str, tenant: str | None = None, *, since: float | None = None, until: float | None = None,
                kind: str | None = None) -> Iterator[dict[str, Any]]:
    """Every stored trace, optionally of one tenant, kind and time window, oldest hour
    first (within an hour, writer by writer). For ``quarry eval`` and capacity planning."""
    lo = hour_of(since) if since is not None else ""
    hi = hour_of(until) if until is not None else "9999999999"
    for rec in _all_records(root, tenant, lo, hi):
        if kind and rec.get("kind") != kind:
            continue
        at = rec.get("at", 0)
        if (since is not None and at < since) or (until is not None and at > until):
            continue
        yield rec


def _all_records(root: str, tenant: str | None, lo: str, hi: str) -> Iterator[dict[str, Any]]:
    objects = _object_store(root)
    if objects is not None:
        fs, base = objects
        tdirs = [layout.join(base, tenant)] if tenant else _subdirs(fs, base)
        for tdir in tdirs:
            for hdir in (h for h in _subdirs(fs, tdir) if lo <= h.rsplit("/", 1)[-1] <= hi):
                for name in sorted(n for n in fs.ls(hdir, detail=False, refresh=True) if n.endswith(".jsonl")):
                    yield from read_appended(_lines(fs, name))
        return
    base = Path(root)
    if not base.exists():
        return
    tenants = [base / tenant] if tenant else sorted(p for p in base.iterdir() if p.is_dir())
    for tdir in tenants:
        if not tdir.is_dir():
            continue
        for hdir in sorted(h for h in tdir.iterdir() if h.is_dir() and lo <= h.name <= hi):
            for f in sorted(hdir.glob("*.jsonl")):
                with open(f, encoding="utf-8") as fh:
                    yield from read_appended(fh)  # a torn line of a killed writer is skipped

