"""`quarry serve` stops cleanly on SIGTERM (how Kubernetes stops a pod) and on SIGINT:
exit 0, Serve and Ray shut down, and no Ray process it started outlives it.

Runs `quarry serve` as a subprocess with its own Ray (RAY_TMPDIR: a session directory of
its own) on a free port over a tiny hashing-embedder index."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import pytest

pytestmark = [pytest.mark.serve, pytest.mark.slow, pytest.mark.timeout(180)]

REPO = Path(__file__).resolve().parents[2]


def _ray_processes(ray_tmp: str, known: set[int]) -> list:
    """Alive processes that are `quarry serve`'s descendants seen earlier, or that name its
    Ray session directory on their command line (a reparented Ray daemon)."""
    import psutil

    out = []
    for p in psutil.process_iter(["pid", "cmdline", "status"]):
        try:
            if p.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            if p.info["pid"] in known or any(ray_tmp in a for a in (p.info["cmdline"] or [])):
                out.append(p)
        except psutil.Error:
            pass
    return out


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_serve_stops_cleanly_on_signal(tmp_path, sig):
    import psutil
    from conftest import _free_port, build, corpus  # tests/serve/conftest.py helpers

    root = str(tmp_path / "idx")
    build(root, "acme", corpus()["acme"])
    port = _free_port()
    ray_tmp = tempfile.mkdtemp(prefix="rq-", dir="/tmp")  # short: Ray's socket paths must fit 107 bytes
    env = {**os.environ, "RAY_TMPDIR": ray_tmp, "PYTHONPATH": str(REPO), "QUARRY_HOME": str(tmp_path / "home"),
           "RAY_USAGE_STATS_ENABLED": "0"}
    log = tmp_path / "serve.log"  # a file, not a pipe: Ray's log lines must never block the server
    proc = subprocess.Popen([sys.executable, "-m", "quarry", "serve", "--index-root", root, "--port", str(port),
                             "--config", str(_config(tmp_path)), "--drain-s", "20"],
                            env=env, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)
    known: set[int] = set()
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, f"quarry serve exited early ({proc.returncode}): {log.read_text()[-2000:]}"
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "no /healthz within 120 s"
            time.sleep(0.5)
        known = {c.pid for c in psutil.Process(proc.pid).children(recursive=True)}
        assert known, "quarry serve started no Ray process of its own"
        proc.send_signal(sig)
        rc = proc.wait(timeout=60)
        out = log.read_text()
        assert rc == 0, f"exit {rc}: {out[-3000:]}"
        assert "shutting down" in out and "stopped" in out
        stragglers = []
        for _ in range(40):  # Ray's daemons exit asynchronously once the driver is gone
            stragglers = _ray_processes(ray_tmp, known)
            if not stragglers:
                break
            time.sleep(0.5)
        assert not stragglers, [(p.pid, p.name()) for p in stragglers]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        for p in _ray_processes(ray_tmp, known):
            try:
                p.kill()
            except psutil.Error:
                pass


def _config(tmp_path: Path) -> Path:
    """Small replicas so the test's Ray fits beside the suite's."""
    p = tmp_path / "serve.yaml"
    p.write_text("jwt_secret: test-secret-0123456789abcdef0123456789\n")
    return p
