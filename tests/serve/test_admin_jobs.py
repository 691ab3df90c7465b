"""Admin jobs that outlive their replica (``quarry.serve.admin_jobs``): the record names its
owner and child and carries a heartbeat; killing the child fails the job, killing the
replica process that watches it makes the job ``lost`` (with when) instead of ``running``
forever."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from quarry.serve import admin_jobs

pytestmark = [pytest.mark.unit, pytest.mark.timeout(120)]

SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]


def _until(pred, timeout_s: float = 30.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = pred()
        if got:
            return got
        time.sleep(0.1)
    raise AssertionError("condition not met in time")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


def test_killing_the_child_fails_the_job(tmp_path):
    root = str(tmp_path)
    job = admin_jobs.start_job(root, "compaction", "acme", SLEEPER, timeout_s=60, heartbeat_s=0.2)
    rec = admin_jobs.read_job(root, job["job_id"])
    assert rec["status"] == "running" and rec["pid"] > 0 and rec["owner"].endswith(f":{os.getpid()}")
    first = rec["heartbeat_at"]
    _until(lambda: admin_jobs.read_job(root, job["job_id"])["heartbeat_at"] > first)  # the watcher beats
    os.kill(rec["pid"], signal.SIGKILL)
    done = _until(lambda: (r := admin_jobs.read_job(root, job["job_id"]))["status"] != "running" and r)
    assert done["status"] == "failed" and done["finished_at"] and "lost_at" not in done


def test_a_job_whose_replica_died_is_reported_lost(tmp_path):
    root = str(tmp_path)
    parent = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import json, sys, time
        from quarry.serve import admin_jobs
        job = admin_jobs.start_job({root!r}, "compaction", "acme", {SLEEPER!r}, timeout_s=60, heartbeat_s=0.2)
        print(json.dumps(job), flush=True)
        time.sleep(60)
    """)], stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    child = None
    try:
        job = json.loads(parent.stdout.readline())
        rec = _until(lambda: (r := admin_jobs.read_job(root, job["job_id"])) and "pid" in r and r)
        child = rec["pid"]
        assert rec["status"] == "running" and rec["owner"].endswith(f":{parent.pid}")
        time.sleep(1.0)  # several heartbeats: still running while the replica lives
        assert admin_jobs.read_job(root, job["job_id"])["status"] == "running"
        parent.kill()  # the replica dies; its orphaned child keeps running
        parent.wait(10)
        lost = _until(lambda: (r := admin_jobs.read_job(root, job["job_id"]))["status"] == "lost" and r)
        assert lost["lost_at"] and str(parent.pid) in lost["error"] and "start the job again" in lost["error"]
        assert _alive(child)  # lost is about the record: the orphan is named by its pid
    finally:
        if parent.poll() is None:
            parent.kill()
        if child is not None and _alive(child):
            os.kill(child, signal.SIGKILL)


def test_liveness_is_judged_from_the_heartbeat_only_while_running():
    running = {"status": "running", "heartbeat_at": 1000.0, "stale_after_s": 15.0, "owner": "h:1"}
    assert admin_jobs.with_liveness(running, 1010.0)["status"] == "running"
    lost = admin_jobs.with_liveness(running, 1016.0)
    assert lost["status"] == "lost" and lost["lost_at"] == "1970-01-01T00:16:55+00:00"
    done = {**running, "status": "succeeded"}
    assert admin_jobs.with_liveness(done, 10_000.0)["status"] == "succeeded"
    assert admin_jobs.with_liveness({"status": "running"}, 10_000.0)["status"] == "running"  # an old record
