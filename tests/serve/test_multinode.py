"""Serving across nodes: a head plus two worker nodes (``ray.cluster_utils.Cluster``, one
machine, separate temp dirs) over an ``s3://`` root on the moto server, runs in Redis.
Replicas are pinned to different nodes with custom resources; a run, a trace, a change and a
compaction cross them. Runs in a subprocess (``tests/helpers/multinode.py``): one Ray per process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.serve, pytest.mark.slow, pytest.mark.timeout(900)]
SCRIPT = Path(__file__).resolve().parents[1] / "helpers" / "multinode.py"


def test_search_runs_traces_and_freshness_across_nodes(s3_server, tmp_path):
    pytest.importorskip("ray")
    out = tmp_path / "obs.json"
    env = {**os.environ, **s3_server.env, "MULTINODE_ROOT": s3_server.uri("multinode", "idx")}
    p = subprocess.run([sys.executable, str(SCRIPT), str(out)], env=env, capture_output=True, text=True, timeout=840)
    assert out.exists(), p.stderr[-4000:]
    obs = json.loads(out.read_text())
    assert p.returncode == 0, (obs, p.stderr[-4000:])
    # two Gateway and two Retriever replicas, each pair on the two different worker nodes
    workers = set(obs["worker_nodes"])
    assert len(workers) == 2
    assert sorted(obs["replica_nodes"]["Gateway"]) == sorted(workers), obs["replica_nodes"]
    assert sorted(obs["replica_nodes"]["Retriever"]) == sorted(workers), obs["replica_nodes"]
    assert len(obs["gateway_urls"]) == 2
    # search through one Gateway on a run created through the other, then fetch through the first
    assert obs["search_status"] == 200 and obs["search_docs"][0] == "window", obs
    assert obs["fetch_status"] == 200 and obs["fetch_has_text"]
    assert "pay" not in obs["hidden_search_docs"]  # ACLs hold on every node
    # the search's trace, written by one replica, read through the other; stored on S3
    assert obs["trace_status"] == 200 and obs["trace_id_matches"]
    assert obs["trace_objects"] and all(o.endswith(".jsonl") and "/_traces/acme/" in o for o in obs["trace_objects"])
    # a change applied to the root is visible on the next query, whichever replica serves it
    assert obs["fresh_seen"] == [True] * 12, obs["fresh_seen"]
    # compaction on the root: every replica serves the new generation, change included
    gen = obs["compacted"]["generation"]
    assert obs["compacted"]["compacted"] and obs["compacted"]["current"] == gen == 2
    assert obs["after_compaction"] == [[gen, True]] * 8, obs["after_compaction"]
