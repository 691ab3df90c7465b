"""The build job's report (counts per tenant, cost, time per stage), run ids, and the
console progress every job prints (one ``Progress.start`` per stage)."""

from __future__ import annotations

import datetime as dt
import resource
import secrets
import sys
import threading
import time
from typing import Any

from pydantic import BaseModel, Field


class StageTiming(BaseModel):
    name: str
    seconds: float
    counts: dict[str, Any] = Field(default_factory=dict)


class TenantReport(BaseModel):
    tenant: str
    input_records: int = 0  # = documents + quarantined (asserted by the job)
    documents: int = 0  # validated, de-duplicated documents indexed
    documents_without_passages: int = 0  # valid but nothing to index (e.g. headings only)
    quarantined: int = 0
    passages: int = 0
    parents: int = 0
    shards: int = 0
    tokens_embedded: int = 0
    generation: int | None = None
    published: bool = False
    generation_uri: str | None = None
    contextualizer_cost: dict[str, Any] = Field(default_factory=dict)

    @property
    def accounted(self) -> bool:
        return self.input_records == self.documents + self.quarantined


class BuildReport(BaseModel):
    run_id: str
    source: str
    index_root: str
    master: str
    contextualizer: str
    embedder: dict[str, Any]
    shard_docs: int
    input_records: int = 0
    filtered_out: int = 0  # records of tenants outside --tenants
    documents: int = 0
    quarantined: int = 0
    passages: int = 0
    quarantine_uri: str | None = None
    tenants: dict[str, TenantReport] = Field(default_factory=dict)
    stages: list[StageTiming] = Field(default_factory=list)
    contextualizer_cost: dict[str, Any] = Field(default_factory=dict)
    embed: dict[str, Any] = Field(default_factory=dict)  # workers, model loads, passages/s
    seconds: float = 0.0
    docs_per_s: float = 0.0
    peak_driver_rss_mb: float = 0.0
    jvm_driver_heap_peak_mb: float | None = None
    published: bool = False

    def stage_seconds(self) -> dict[str, float]:
        return {s.name: round(s.seconds, 3) for s in self.stages}


def peak_rss_mb() -> float:
    """Peak resident memory of this (driver) Python process."""
    kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return kb / 1024 if sys.platform != "darwin" else kb / 1024 / 1024


def new_run_id(at: dt.datetime | None = None) -> str:
    """A sortable, collision-resistant run id: ``20260101T120000Z-1a2b3c``."""
    at = at or dt.datetime.now(dt.timezone.utc)
    return at.strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(3)


class Progress:
    """Stage lines on stderr; a heartbeat with Spark task progress for long stages.
    ``job`` names the command in each line (``[quarry build <run id>] ...``)."""

    def __init__(self, run_id: str, spark=None, quiet: bool = False, heartbeat_s: float = 15.0, job: str = "build"):
        self.run_id, self.spark, self.quiet, self.heartbeat_s, self.job = run_id, spark, quiet, heartbeat_s, job
        self.t0 = time.monotonic()
        self._stage: str | None = None
        self._stage_t0 = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def line(self, msg: str) -> None:
        if not self.quiet:
            print(f"[quarry {self.job} {self.run_id}] {msg}", file=sys.stderr, flush=True)

    def start(self, stage: str) -> None:
        self._stage, self._stage_t0 = stage, time.monotonic()
        self.line(f"{stage:<13} started")
        if self.spark is not None and self.heartbeat_s > 0 and self._thread is None and not self.quiet:
            self._thread = threading.Thread(target=self._beat, daemon=True)
            self._thread.start()

    def done(self, stage: str, counts: dict[str, Any]) -> StageTiming:
        dt = time.monotonic() - self._stage_t0
        shown = " ".join(f"{k}={v}" for k, v in counts.items())
        self.line(f"{stage:<13} done  {shown}  {dt:.1f}s (total {time.monotonic() - self.t0:.1f}s)")
        self._stage = None
        return StageTiming(name=stage, seconds=dt, counts=counts)

    def _beat(self) -> None:
        tracker = self.spark.sparkContext.statusTracker()
        while not self._stop.wait(self.heartbeat_s):
            if self._stage is None:
                continue
            try:
                done = total = 0
                for sid in tracker.getActiveStageIds():
                    info = tracker.getStageInfo(sid)
                    if info:
                        done += info.numCompletedTasks
                        total += info.numTasks
                if total:
                    self.line(f"{self._stage:<13} ... spark tasks {done}/{total}  "
                              f"{time.monotonic() - self._stage_t0:.0f}s")
            except Exception:  # progress is best-effort; never fail the build
                pass

    def close(self) -> None:
        self._stop.set()
