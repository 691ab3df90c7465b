"""The actor run store moving between nodes, on one machine: a ``ray.cluster_utils.Cluster``
head plus two worker nodes (separate temp dirs), the checkpoint under an ``s3://`` URI (the
moto server the test exports). Run by ``tests/serve/test_runstore_nodes.py`` in its own
process (one Ray per process).

    python tests/helpers/runstore_nodes.py OUT.json

The actor is first placed on worker A (a custom resource only A has); runs are created and
searched through ``ActorRunStore`` (what a Gateway replica holds). The actor is killed for
good and node A is removed from the cluster, its temp dir deleted; the next call through the
same client re-creates the actor by name, which Ray places on a surviving node, and reads
the checkpoint back from object storage. It writes what it observed to OUT.json.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

NAME, NS = "nodes-runstore", "quarry-runstore-nodes"


def main(out_path: str) -> int:
    import ray
    from ray.cluster_utils import Cluster

    from quarry.core.agent.runs import principal_key
    from quarry.core.records import Principal
    from quarry.serve.stores.runstore_actor import ActorRunStore, _ray_actor

    uri = os.environ["RUNSTORE_URI"]  # s3://bucket/prefix/_serve/runs
    cfg = {"ttl_s": 3600, "open_per_tenant": 100, "open_per_subject": 100, "kept_per_tenant": 100,
           "compact_every": 4}
    pk = principal_key(Principal(tenant="acme", subject="agent", groups=frozenset({"eng"})))
    obs: dict = {"uri": uri}
    tmp = Path(tempfile.mkdtemp(prefix="quarry-runstore-nodes-"))
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "temp_dir": str(tmp / "head"),
                                                            "include_dashboard": False})
    try:
        node_a = cluster.add_node(num_cpus=1, resources={"node_a": 1}, temp_dir=str(tmp / "a"))
        cluster.add_node(num_cpus=1, resources={"node_b": 1}, temp_dir=str(tmp / "b"))
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, namespace=NS, log_to_driver=False, configure_logging=False)
        obs["node_a"] = node_a.node_id
        first = _ray_actor().options(name=NAME, namespace=NS, resources={"node_a": 0.01}).remote(uri, cfg)
        obs["first_pid"] = ray.get(first.pid.remote())
        store = ActorRunStore(NAME, NS, uri, cfg, timeout_s=120)  # attaches to the actor on A by name

        async def before():
            runs = [(await store.create(pk, 3)).run_id for _ in range(3)]
            for i, r in enumerate(runs):
                await store.apply_search(r, pk, [f"p{i}"])
            await store.apply_search(runs[0], pk, ["q"])
            await store.begin_answer(runs[2], pk)
            return runs, {r: (await store.get(r, pk)).model_dump(mode="json") for r in runs}

        runs, seen = asyncio.run(before())
        obs["before"] = seen
        ray.kill(first, no_restart=True)
        cluster.remove_node(node_a)  # the node is gone, and its disk with it
        shutil.rmtree(tmp / "a", ignore_errors=True)

        async def after():
            got = {r: (await store.get(r, pk)).model_dump(mode="json") for r in runs}
            more = await store.apply_search(runs[1], pk, ["p9"])  # the run goes on where it was
            return got, more.model_dump(mode="json")

        obs["after"], obs["continued"] = asyncio.run(after())
        second = ray.get_actor(NAME, namespace=NS)
        obs["second_pid"] = ray.get(second.pid.remote())
        obs["alive_nodes"] = [n["NodeID"] for n in ray.nodes() if n["Alive"]]
    finally:
        Path(out_path).write_text(json.dumps(obs, indent=2, default=str))
        ray.shutdown()
        cluster.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
