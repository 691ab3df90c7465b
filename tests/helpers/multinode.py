"""A three-node Ray cluster on one machine serving an ``s3://`` index root; run by
``tests/serve/test_multinode.py`` in its own process (one Ray per process, and the serve
test session already holds one).

    python tests/helpers/multinode.py OUT.json

The object store is whatever the environment names (the test exports the moto server's
fsspec/AWS variables); runs live in a Redis server started here. ``ray.cluster_utils.Cluster``
starts a head (no replicas: no custom resources) and two worker nodes, each with its own
temp dir and one ``gw_slot`` and one ``rt_slot``: two Gateway and two Retriever replicas
that each need a slot must sit on different worker nodes. Each Gateway replica answers on
its own port (direct ingress), so the script can write through one replica and read
through the other. It writes what it observed to OUT.json; the test asserts on it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))
SECRET = "multinode-secret-0123456789-0123456789-0123456789-0123456789"
DOCS = [
    dict(doc_id="window", tenant="acme", acl=("*",), doc_type="runbook", title="Settlement window",
         text="The settlement batch runs daily at 16:00 UTC. kestrelmark settlement window."),
    dict(doc_id="refunds", tenant="acme", acl=("*",), doc_type="policy", title="Refund approvals",
         text="Refunds above 2.5% need approval from the finance lead. refund approvals."),
    dict(doc_id="pay", tenant="acme", acl=("hr",), doc_type="policy", title="Pay bands",
         text="Pay bands are reviewed every April. quokkaband ranges."),
]


def _redis():
    spec = importlib.util.spec_from_file_location("redis_server", REPO / "scripts" / "redis_server.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    server = mod.RedisServer()
    return server, server.start()


def main(out_path: str) -> int:
    import ray
    from ray import serve
    from ray.cluster_utils import Cluster

    from quarry.core.changes.delta import apply_local
    from quarry.core.changes.log import validate_change
    from quarry.core.embed.embedders import HashingEmbedder
    from quarry.core.ingest.pipeline import build_corpus
    from quarry.core.records import SourceDocument
    from quarry.serve import launch
    from quarry.serve.app import build_app
    from quarry.serve.http.auth import mint_token
    from quarry.serve.settings import AuthSettings, ServeSettings

    root = os.environ["MULTINODE_ROOT"]  # s3://bucket/prefix
    emb = HashingEmbedder(dim=64)
    build_corpus([SourceDocument(**d) for d in DOCS], root, emb)
    obs: dict = {"root": root}
    redis, redis_url = _redis()
    launch.set_throughput_env()  # direct ingress: each Gateway replica on its own port
    tmp = Path(tempfile.mkdtemp(prefix="quarry-multinode-"))
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "temp_dir": str(tmp / "head"),
                                                            "include_dashboard": False})
    try:
        for i in range(2):
            cluster.add_node(num_cpus=1, resources={"gw_slot": 1, "rt_slot": 1}, temp_dir=str(tmp / f"worker{i}"))
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, namespace="quarry-multinode", log_to_driver=False, configure_logging=False)
        port = _free_port()
        serve.start(http_options={"host": "127.0.0.1", "port": port, "location": "HeadOnly"})
        settings = ServeSettings(
            index_root=root, auth=AuthSettings(hs256_secret=SECRET), run_store="redis", redis_url=redis_url,
            store_name_prefix="multinode", gateway_replicas=2, retriever_replicas=2, reranker_enabled=False,
            generation_check_ms=200, trace_flush_ms=50, gateway_num_cpus=0.1, retriever_num_cpus=0.1,
            resolver_num_cpus=0.05, ray_namespace="quarry-multinode",
            deployment_options={
                "Gateway": {"ray_actor_options": {"num_cpus": 0.1, "resources": {"gw_slot": 1}}},
                "Retriever": {"ray_actor_options": {"num_cpus": 0.1, "resources": {"rt_slot": 1}}},
            })
        serve.run(build_app(settings), name="quarry", route_prefix="/")
        proxy = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60)
        _wait(proxy)
        urls = launch.ingress_urls("127.0.0.1")
        obs["gateway_urls"] = urls
        replicas = {}
        # the GCS actor table (the state API needs the dashboard, which this cluster does not run)
        for a in ray._private.state.actors().values():
            cls, state = str(a.get("ActorClassName") or ""), str(a.get("State"))
            for dep in ("Gateway", "Retriever"):
                if cls.endswith(f":{dep}") and state in ("ALIVE", "2"):
                    replicas.setdefault(dep, []).append(a["Address"]["NodeID"])
        obs["replica_nodes"] = replicas
        obs["worker_nodes"] = sorted(n["NodeID"] for n in ray.nodes() if n["Alive"] and "gw_slot" in n["Resources"])
        a, b = (httpx.Client(base_url=u, timeout=60) for u in urls[:2])

        def h(run=None, groups=("support",)):
            tok = mint_token("acme", "agent-1", groups, secret=SECRET)
            return {"Authorization": f"Bearer {tok}", **({"X-Quarry-Run": run} if run else {})}

        # a run created through replica A, searched through B and fetched through A (Redis)
        run = a.post("/v1/runs", headers=h()).json()["run_id"]
        r = b.post("/v1/search", headers=h(run), json={"query": "settlement window kestrelmark", "top_k": 3})
        obs["search_status"] = r.status_code
        body = r.json()
        obs["search_docs"] = [e["doc_id"] for e in body.get("excerpts", [])]
        obs["searches_left"] = body.get("searches_left")
        pid = body["excerpts"][0]["passage_id"] if body.get("excerpts") else "none"
        f = a.post("/v1/fetch", headers=h(run), json={"id": pid})
        obs["fetch_status"], obs["fetch_has_text"] = f.status_code, "16:00" in f.text
        obs["hidden_search_docs"] = [e["doc_id"] for e in b.post(
            "/v1/search", headers=h(a.post("/v1/runs", headers=h()).json()["run_id"]),
            json={"query": "quokkaband pay bands", "top_k": 5}).json().get("excerpts", [])]
        # the trace written by replica B (the search) read back through replica A
        op = {"Authorization": "Bearer " + mint_token("acme", "ops", ("hr", "support"), secret=SECRET, scope="operator")}
        tid = body.get("trace_id")
        t = a.get(f"/v1/trace/{tid}", headers=op)
        obs["trace_status"], obs["trace_id_matches"] = t.status_code, t.json().get("trace_id") == tid
        obs["trace_objects"] = _trace_objects(root)
        # freshness: a change applied to the s3:// root; every later query, through either
        # gateway (and so whichever Retriever replica serves it), sees it
        upsert = validate_change({"op": "upsert", "tenant": "acme", "doc_id": "fresh", "at": "2026-06-01T00:00:00Z",
                                  "document": SourceDocument(
                                      doc_id="fresh", tenant="acme", acl=("*",), doc_type="runbook", title="Fresh",
                                      text="The zanzibar ledger freshness marker applies.").model_dump()})
        apply_local(root, "acme", [upsert], emb)
        seen = []
        time.sleep(0.5)  # generation_check_ms: the watermark is read per request
        for i in range(12):
            c = (a, b)[i % 2]
            rid = c.post("/v1/runs", headers=h()).json()["run_id"]
            res = c.post("/v1/search", headers=h(rid), json={"query": "zanzibar ledger freshness", "top_k": 3}).json()
            seen.append("fresh" in [e["doc_id"] for e in res.get("excerpts", [])])
        obs["fresh_seen"] = seen
        # compaction on the s3:// root switches CURRENT; every replica swaps to the new
        # generation and still holds the change
        from quarry.jobs.compact import compact_tenant

        obs["compacted"] = compact_tenant(root, "acme")
        time.sleep(1.0)  # generation_check_ms 200
        after = []
        for i in range(8):
            c = (a, b)[i % 2]
            rid = c.post("/v1/runs", headers=h()).json()["run_id"]
            res = c.post("/v1/search", headers=h(rid), json={"query": "zanzibar ledger freshness", "top_k": 3}).json()
            after.append((res.get("generation"), "fresh" in [e["doc_id"] for e in res.get("excerpts", [])]))
        obs["after_compaction"] = after
        proxy.close(), a.close(), b.close()
    finally:
        Path(out_path).write_text(json.dumps(obs, indent=2, default=str))
        try:
            serve.shutdown()
        except Exception:  # noqa: BLE001 - best effort teardown
            pass
        ray.shutdown()
        cluster.shutdown()
        redis.stop()
    return 0


def _trace_objects(root: str) -> list[str]:
    from quarry.core.index import layout

    fs, path = layout.fs_and_path(root + "/_traces")
    try:
        return sorted(fs.find(path))
    except FileNotFoundError:
        return []


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(client: httpx.Client, timeout_s: float = 300) -> None:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        try:
            if client.get("/healthz").status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise RuntimeError("the application did not become healthy")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
