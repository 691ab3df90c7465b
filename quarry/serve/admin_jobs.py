"""Admin jobs started from a Gateway replica: compaction, reconciliation and purge, each the
same command an operator runs (``quarry compact``, ``quarry reconcile``), in a child process
watched by a background thread, so the request that started it returns at once.

Each job's status is a small JSON file, ``<index_root>/_admin/jobs/<job_id>.json``
(``running``, then ``succeeded`` with the command's JSON outcome, or ``failed`` with its
last error line), so whichever Gateway replica a status request reaches can answer it. A
child process keeps a failing job from taking the replica with it, and keeps Spark and
job code out of the serving process (``quarry.serve`` never imports ``quarry.jobs``).

On a cluster these are meant to be Kubernetes Jobs (or ``spark-submit`` runs) of the same
commands; this runner is the single-machine form.

A running job's record names its owner (the replica's host and pid) and the child's pid,
and the watcher rewrites ``heartbeat_at`` every ``HEARTBEAT_S``. A replica that dies takes
its watcher with it: whoever reads the record once the heartbeat is older than
``STALE_AFTER_S`` reports the job ``lost``, with ``lost_at`` (the last heartbeat plus that
bound) and the owner in ``error``. The job's own command holds the tenant's writer lease,
so an orphaned child that is still running keeps other writers out until it exits or its
lease expires. A ``lost`` job is reported, not restarted: start it again.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from typing import Any

from quarry.core.index import layout

JOB_ID_PATTERN = r"^[0-9a-f]{32}$"
_ERROR_CHARS = 300
HEARTBEAT_S = 5.0
STALE_AFTER_S = 3 * HEARTBEAT_S


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def job_path(root: str, job_id: str) -> str:
    return layout.join(root, "_admin", "jobs", f"{job_id}.json")


def _iso(epoch: float) -> str:
    return dt.datetime.fromtimestamp(epoch, dt.timezone.utc).isoformat(timespec="seconds")


def read_job(root: str, job_id: str, now: float | None = None) -> dict[str, Any] | None:
    """The job's record; a ``running`` job whose heartbeat is stale is reported ``lost``."""
    try:
        job = layout.read_json(job_path(root, job_id))
    except FileNotFoundError:
        return None
    return with_liveness(job, time.time() if now is None else now)


def with_liveness(job: dict[str, Any], now: float) -> dict[str, Any]:
    beat = job.get("heartbeat_at")
    stale = float(job.get("stale_after_s", STALE_AFTER_S))
    if job.get("status") != "running" or beat is None or now - float(beat) <= stale:
        return job
    return {**job, "status": "lost", "lost_at": _iso(float(beat) + stale),
            "error": f"its replica ({job.get('owner', '?')}) stopped heartbeating; start the job again"}


def command(kind: str, root: str, tenant: str, *, source: str | None = None, dry_run: bool = False,
            doc_id: str | None = None, version: str | None = None) -> list[str]:
    """The child process of a job: the CLI command an operator would run, printing JSON."""
    py = [sys.executable, "-m", "quarry"]
    if kind == "compaction":
        return [*py, "compact", "--tenant", tenant, "--index-root", root, "--json", "--quiet"]
    if kind == "reconciliation":
        if source is None:
            raise ValueError("reconciliation needs a source")
        return [*py, "reconcile", "--source", source, "--index-root", root, "--tenants", tenant,
                "--apply", "in-process", "--json", *(["--dry-run"] if dry_run else [])]
    if kind == "purge":  # the whole tenant
        return [*py, "purge", "--index-root", root, "--tenant", tenant, "--all", "--json"]
    if kind == "purge-document":
        if doc_id is None:
            raise ValueError("a document purge needs a doc_id")
        return [*py, "purge", "--index-root", root, "--tenant", tenant, "--doc-id", doc_id,
                *(["--version", version] if version else []), "--json"]
    raise ValueError(f"unknown job kind {kind!r}")


def _outcome(stdout: str) -> dict[str, Any]:
    text = stdout.strip()
    for candidate in (text, text.splitlines()[-1] if text else ""):
        try:
            out = json.loads(candidate)
            return out if isinstance(out, dict) else {"result": out}
        except ValueError:
            continue
    return {"output_lines": len(text.splitlines())}


def _last_line(stderr: str) -> str:
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    return (lines[-1] if lines else "the job exited without a message")[:_ERROR_CHARS]


def start_job(root: str, kind: str, tenant: str, cmd: list[str], timeout_s: float,
              heartbeat_s: float = HEARTBEAT_S) -> dict[str, Any]:
    """Write the job's ``running`` record, start ``cmd`` and return the record; a daemon
    thread heartbeats the record every ``heartbeat_s`` and records the outcome when the
    child exits (or is killed past ``timeout_s``)."""
    job: dict[str, Any] = {"job_id": uuid.uuid4().hex, "kind": kind, "tenant": tenant, "status": "running",
                           "started_at": _now(), "owner": f"{socket.gethostname()}:{os.getpid()}",
                           "heartbeat_at": time.time(), "stale_after_s": 3 * heartbeat_s}
    path = job_path(root, job["job_id"])
    layout.write_json(path, job)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    job["pid"] = proc.pid
    layout.write_json(path, job)

    def watch() -> None:
        deadline = time.monotonic() + timeout_s
        try:
            while True:
                try:
                    out, err = proc.communicate(timeout=max(0.0, min(heartbeat_s, deadline - time.monotonic())))
                    break
                except subprocess.TimeoutExpired:
                    if time.monotonic() >= deadline:
                        raise
                    layout.write_json(path, {**job, "heartbeat_at": time.time()})
            done = ({"status": "succeeded", "outcome": _outcome(out)} if proc.returncode == 0 else
                    {"status": "failed", "error": _last_line(err)})
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            done = {"status": "failed", "error": f"killed after {timeout_s:g} s"}
        except Exception as e:  # the status must not stay 'running' because the watcher broke
            done = {"status": "failed", "error": f"{type(e).__name__}"}
        layout.write_json(path, {**job, **done, "heartbeat_at": time.time(), "finished_at": _now()})

    threading.Thread(target=watch, name=f"admin-job-{job['job_id'][:8]}", daemon=True).start()
    return job
