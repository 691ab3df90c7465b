"""The actor run store is not node-local: with its checkpoint under an ``s3://`` URI (the
session's moto server), an actor killed with its node, and re-created on another node by
the next call, continues every run. Runs in a subprocess (``tests/helpers/runstore_nodes.py``):
one Ray per process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.serve, pytest.mark.slow, pytest.mark.timeout(600)]
SCRIPT = Path(__file__).resolve().parents[1] / "helpers" / "runstore_nodes.py"


def test_runs_continue_after_the_actor_moves_to_another_node(s3_server, tmp_path):
    pytest.importorskip("ray")
    out = tmp_path / "obs.json"
    uri = s3_server.uri("runstore-nodes", "idx", "_serve", "runs")
    env = {**os.environ, **s3_server.env, "RUNSTORE_URI": uri}
    p = subprocess.run([sys.executable, str(SCRIPT), str(out)], env=env, capture_output=True, text=True, timeout=540)
    assert out.exists(), p.stderr[-4000:]
    obs = json.loads(out.read_text())
    assert p.returncode == 0, (obs, p.stderr[-4000:])
    assert obs["node_a"] not in obs["alive_nodes"]  # the first actor's node is gone
    assert obs["second_pid"] != obs["first_pid"]
    assert obs["after"] == obs["before"]  # every run read back from object storage
    used = [v["used"] for v in obs["before"].values()]
    assert sorted(used) == [1, 1, 2]
    assert obs["continued"]["allowed"] and obs["continued"]["view"]["used"] == 2
    # nothing of the checkpoint on a local disk: the objects are on the server
    fs = s3_server.fs()
    keys = fs.find(f"{s3_server.bucket}/runstore-nodes/idx/_serve/runs")
    assert any(k.endswith("/runs.snap") for k in keys) and any("/log/" in k for k in keys), keys
