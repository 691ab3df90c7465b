"""Run quotas over real HTTP: one tenant's flood of runs
and traces (bounded by small configured limits) leaves another tenant's live runs and
recent traces intact, and the flood gets a clear 429."""

from __future__ import annotations

import httpx
import pytest

from quarry.core.agent.citations import ABSTENTION_MESSAGE

pytestmark = [pytest.mark.serve, pytest.mark.slow]

SMALL = dict(runs_open_per_subject=5, runs_open_per_tenant=12, traces_per_tenant_hour=20, gateway_replicas=1)


def deploy(quarry_app, tmp_path_factory, name: str, **overrides) -> httpx.Client:
    """A second application on the session's Serve instance (same index root), with its
    own store names, state and trace folders, and tiny CPU reservations (every deployment:
    several such applications share the session's two CPUs). ``auth`` (AuthSettings)
    replaces the session's HS256 key."""
    from ray import serve

    from quarry.serve.app import build_app
    from quarry.serve.settings import AuthSettings, ServeSettings

    d = tmp_path_factory.mktemp(name)
    kw = dict(ray_namespace="quarry-test", store_name_prefix=f"quarrytest-{name}", state_dir=str(d / "state"),
              trace_dir=str(d / "traces"), reranker_enabled=False, gateway_num_cpus=0.01, retriever_num_cpus=0.01,
              reranker_num_cpus=0.01, resolver_num_cpus=0.01, generation_check_ms=200)
    settings = ServeSettings(**{"index_root": quarry_app.root, "auth": AuthSettings(hs256_secret=quarry_app.secret),
                                **kw, **overrides})
    serve.run(build_app(settings), name=name, route_prefix=f"/{name}")
    http = httpx.Client(base_url=f"{quarry_app.base}/{name}", timeout=60)
    http.quarry_settings = settings  # for tests that redeploy the same application
    return http


@pytest.fixture(scope="module")
def small(quarry_app, tmp_path_factory):
    from ray import serve

    http = deploy(quarry_app, tmp_path_factory, "small", **SMALL)
    yield http
    http.close()
    serve.delete("small")


def _h(app, tok, run=None):
    h = {"Authorization": f"Bearer {tok}"}
    if run:
        h["X-Quarry-Run"] = run
    return h


def test_run_flood_gets_429_and_never_ends_another_tenants_run(quarry_app, small):
    app = quarry_app
    victim = app.token(tenant="acme", subject="victim")
    live = small.post("/v1/runs", headers=_h(app, victim)).json()["run_id"]
    flood_subject = app.token(tenant="globex", subject="flooder", groups=("staff",))
    codes = [small.post("/v1/runs", headers=_h(app, flood_subject)).status_code for _ in range(9)]
    assert codes == [200] * 5 + [429] * 4
    r = small.post("/v1/runs", headers=_h(app, flood_subject))
    assert r.status_code == 429 and "open runs for this subject" in r.json()["detail"]
    assert r.headers["retry-after"]
    # many subjects of one tenant: the tenant limit (12 open) holds
    tenant_codes = [small.post("/v1/runs", headers=_h(app, app.token(tenant="globex", subject=f"s{i}",
                                                                          groups=("staff",)))).status_code
                    for i in range(12)]
    assert tenant_codes.count(200) == 7 and tenant_codes.count(429) == 5
    assert "open runs for this tenant" in small.post(
        "/v1/runs", headers=_h(app, app.token(tenant="globex", subject="new", groups=("staff",)))).json()["detail"]
    # the other tenant's live run is intact and usable, and it can still start runs
    s = small.post("/v1/search", headers=_h(app, victim, live), json={"query": "zebrafinch settlement"})
    assert s.status_code == 200 and s.json()["searches_left"] == 2
    # no Reranker in this application: even a first search gets its expansion from the
    # retrieval call, never from a separate expand hop
    timing = dict(p.split(";dur=") for p in s.headers["server-timing"].split(", "))
    assert s.json()["excerpts"] and "retrieve" in timing and "expand" not in timing
    assert small.post("/v1/runs", headers=_h(app, app.token(tenant="acme", subject="other"))).status_code == 200


def test_trace_flood_never_removes_another_tenants_traces(quarry_app, small):
    app = quarry_app
    op = {"acme": app.token(tenant="acme", subject="ops", groups=(), scope="operator"),
          "initech": app.token(tenant="initech", subject="ops", groups=(), scope="operator")}
    victim = app.token(tenant="acme", subject="victim2")
    run = small.post("/v1/runs", headers=_h(app, victim)).json()["run_id"]
    before = small.post("/v1/search", headers=_h(app, victim, run), json={"query": "zebrafinch settlement"}).json()
    # initech floods with cheap traced requests: runs abstained at once (each frees its open slot)
    flood_ids = []
    for i in range(45):
        tok = app.token(tenant="initech", subject=f"f{i % 4}", groups=("staff",))
        rid = small.post("/v1/runs", headers=_h(app, tok)).json()["run_id"]
        a = small.post("/v1/answer", headers=_h(app, tok, rid), json={"abstention": {"reason": "flood"}})
        assert a.status_code == 200 and a.json()["message"] == ABSTENTION_MESSAGE
        flood_ids.append(a.json()["trace_id"])
    after = small.post("/v1/search", headers=_h(app, victim, run), json={"query": "settlement window"}).json()
    for t in (before["trace_id"], after["trace_id"]):
        r = small.get(f"/v1/trace/{t}", headers=_h(app, op["acme"]))
        assert r.status_code == 200 and r.json()["tenant"] == "acme"
    # the flooder's quota (20 per hour) kept its first traces and dropped only its own excess
    kept = [small.get(f"/v1/trace/{t}", headers=_h(app, op["initech"])).status_code for t in flood_ids]
    assert kept[:20] == [200] * 20 and kept.count(404) == 25
