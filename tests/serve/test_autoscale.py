"""A planned autoscaling config, deployed through the real app builder next to the session's
application, scales the Retriever up under concurrent searches and back down when idle
(counted as the replicas Serve keeps: a replica can take long to start on a loaded machine).

No timing is asserted: the plan's target is set so far below any real load that any
concurrent traffic asks for max_replicas, and the waits are only upper bounds for a loaded
machine (Ray's default 10 s metrics push interval applies in this shared Ray session)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
import pytest

pytestmark = [pytest.mark.serve, pytest.mark.slow]

APP, ROUTE = "quarry-autoscale", "/autoscale"
RUN_HEADER = "X-Quarry-Run"
SEED = Path(__file__).resolve().parents[2] / "infra" / "profiles" / "seed-11-5.yaml"


def _profile():
    import yaml

    from quarry.core.capacity.workload import WorkloadProfile

    data = yaml.safe_load(SEED.read_text())
    data["trough_tasks_per_s"] = 0  # min_replicas 1
    # The look-back window must exceed the 10 s metrics push interval of this Ray session,
    # or the autoscaler sees no recent metrics at all.
    data["autoscaling"] = {"look_back_period_s": 12, "upscale_delay_s": 12, "downscale_delay_s": 12,
                           "target_utilization": 0.001}
    # Tiny CPU reservations: the session's application already holds most of the 2 CPUs.
    data["deployments"] = {
        "Gateway": {"service_ms": 50, "concurrency_per_replica": 4, "num_cpus": 0.05, "max_replicas_cap": 1},
        # 45 calls/s x 25 ms = 1.125 in flight; target 0.001 -> many replicas, capped at 2. The
        # Retriever is a few ms of each request, so any concurrent traffic exceeds that target.
        "Retriever": {"service_ms": 25, "concurrency_per_replica": 1, "num_cpus": 0.05, "max_replicas_cap": 2},
        # The other two deployments of the application, with tiny reservations too (their
        # defaults would not fit beside the session's application on 2 CPUs).
        "Reranker": {"service_ms": 10, "concurrency_per_replica": 1, "num_cpus": 0.05, "max_replicas_cap": 1},
        "Resolver": {"service_ms": 5, "concurrency_per_replica": 1, "num_cpus": 0.05, "max_replicas_cap": 1},
    }
    return WorkloadProfile.model_validate(data)


def _replicas(name: str) -> int:
    """Replicas Serve is keeping (starting, pending or running; not stopping): the
    autoscaler's decision. A replica may take long to start on a loaded machine."""
    from ray import serve

    d = serve.status().applications[APP].deployments[name]
    return sum(v for k, v in d.replica_states.items() if not str(k).endswith("STOPPING"))


def _details() -> str:
    try:
        from ray.serve.context import _get_global_client

        d = _get_global_client().get_serve_details()["applications"][APP]["deployments"]["Retriever"]
        return f"target {d.get('target_num_replicas')}, autoscaling {d.get('autoscaling_detail')}"
    except Exception as e:  # noqa: BLE001 - diagnostics only
        return f"no details: {e}"


def _wait(pred, bound_s: float) -> bool:
    deadline = time.monotonic() + bound_s
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.5)
    return pred()


def test_planned_autoscaling_scales_retriever_up_and_down(quarry_app):
    from ray import serve

    from quarry.core.capacity.workload import plan
    from quarry.plan_manifests import serve_config
    from quarry.serve.app import build_app
    from quarry.serve.settings import settings_from_args

    profile = _profile()
    p = plan(profile)
    r = p.deployment("Retriever")
    assert (r.min_replicas, r.max_replicas, r.capped) == (1, 2, True)
    cfg = serve_config(p, profile)
    dep_opts = {d["name"]: {k: v for k, v in d.items() if k != "name"} for d in cfg["applications"][0]["deployments"]}
    # The Gateway is not what this test scales. Its plan from the tiny target allows one request
    # at a time, so the proxy would spin on rejected retries of the other clients' requests, and
    # on a loaded machine that starved the metrics the autoscaler reads (no upscale in 150 s).
    dep_opts["Gateway"]["max_ongoing_requests"] = 16
    settings = settings_from_args({
        **cfg["applications"][0]["args"], "index_root": quarry_app.root, "jwt_secret": quarry_app.secret,
        "ray_namespace": "quarry-test", "store_name_prefix": "quarrytest-autoscale", "deployment_options": dep_opts,
    })
    serve.run(build_app(settings), name=APP, route_prefix=ROUTE)
    try:
        assert _wait(lambda: _replicas("Retriever") == 1, 120)
        base = f"{quarry_app.base}{ROUTE}"
        token = quarry_app.token(tenant="acme", groups=("support",))
        stop = threading.Event()
        statuses: list[int] = []

        def client() -> None:
            with httpx.Client(base_url=base, timeout=60) as http:
                while not stop.is_set():
                    run = http.post("/v1/runs", headers={"Authorization": f"Bearer {token}"}).json()["run_id"]
                    r = http.post("/v1/search", json={"query": "settlement cutoff"},
                                  headers={"Authorization": f"Bearer {token}", RUN_HEADER: run})
                    statuses.append(r.status_code)
                    # finish the run: open runs per subject are capped, and this loop opens many
                    http.post("/v1/answer", json={"abstention": {"reason": "load"}},
                              headers={"Authorization": f"Bearer {token}", RUN_HEADER: run})

        threads = [threading.Thread(target=client, daemon=True) for _ in range(6)]
        for t in threads:
            t.start()
        try:
            scaled_up = _wait(lambda: _replicas("Retriever") == 2, 150)
        finally:
            stop.set()
            for t in threads:
                t.join(timeout=60)
        assert scaled_up, f"Retriever never reached its planned max_replicas=2 under load ({_details()})"
        assert statuses and set(statuses) == {200}
        assert _wait(lambda: _replicas("Retriever") == 1, 150), "Retriever did not scale back to min_replicas=1"
    finally:
        serve.delete(APP, _blocking=False)  # a loaded machine may take minutes to stop replicas
