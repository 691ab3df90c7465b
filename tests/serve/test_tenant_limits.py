"""Tenant limits over real HTTP (REST and MCP), on an application of the session's Serve
instance with small limits: a flooding tenant gets 429 with ``Retry-After`` and a body
naming the limit, while another tenant's calls, made at the same time, all succeed."""

from __future__ import annotations

import asyncio
import json
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from quarry.serve.http.responses import Limited
from test_quotas import deploy

pytestmark = [pytest.mark.serve, pytest.mark.slow]

LIMITS = {"window_s": 60, "requests_per_tenant": 10, "requests_per_subject": 6, "concurrent_per_tenant": 64,
          "overrides": {"acme": {"requests_per_tenant": 10_000, "requests_per_subject": 10_000},
                        "hooli": {"runs_open_per_subject": 2},
                        "initech": {"requests_per_subject": 3}}}


@pytest.fixture(scope="module")
def limited(quarry_app, tmp_path_factory):
    from ray import serve

    http = deploy(quarry_app, tmp_path_factory, "limited", gateway_replicas=1, tenant_limits=LIMITS, run_idle_s=120)
    yield http
    http.close()
    serve.delete("limited")


def _h(tok, run=None):
    return {"Authorization": f"Bearer {tok}", **({"X-Quarry-Run": run} if run else {})}


def test_flooding_tenant_gets_429_while_another_tenants_calls_all_succeed(quarry_app, limited):
    app = quarry_app
    flood_tok = app.token(tenant="globex", subject="flooder", groups=("staff",))
    victim = app.token(tenant="acme", subject="busy-agent")

    def victim_task(i):  # one agent task: a run, a search, an abstention
        codes = []
        r = limited.post("/v1/runs", headers=_h(victim))
        codes.append(r.status_code)
        run = r.json().get("run_id")
        codes.append(limited.post("/v1/search", headers=_h(victim, run), json={"query": "settlement window"}
                                  ).status_code)
        codes.append(limited.post("/v1/answer", headers=_h(victim, run), json={"abstention": {"reason": "t"}}
                                  ).status_code)
        return codes

    with httpx.Client(base_url=str(limited.base_url), timeout=60) as flood_http, ThreadPoolExecutor(4) as pool:
        flood = pool.map(lambda _: flood_http.post("/v1/runs", headers=_h(flood_tok)), range(30))
        victims = pool.map(victim_task, range(6))
        flood, victims = list(flood), list(victims)
    assert [c for task in victims for c in task] == [200] * 18  # tenant B: every call succeeded
    codes = [r.status_code for r in flood]
    assert codes.count(200) == 6 and codes.count(429) == 24  # the subject's 6 per minute
    refused = next(r for r in flood if r.status_code == 429)
    body = refused.json()
    retry = int(refused.headers["retry-after"])
    assert 1 <= retry <= 60
    assert body["limit"]["scope"] == "subject" and body["limit"]["kind"] == "rate"
    assert body["limit"]["limit"] == 6 and body["limit"]["window_s"] == 60
    assert time.time() < body["limit"]["reset_at"] <= time.time() + 61
    assert body["limit"]["retry_after_s"] == retry and "6 requests per 60 s" in body["detail"]
    Limited.model_validate(body)  # the 429 body the OpenAPI document declares
    spec = limited.get("/openapi.json").json()
    for path in ("/v1/runs", "/v1/search", "/v1/fetch", "/v1/answer"):
        assert "429" in spec["paths"][path]["post"]["responses"]
    # the tenant's own limit (10) holds over all its subjects
    others = [limited.post("/v1/runs", headers=_h(app.token(tenant="globex", subject=f"s{i}", groups=("staff",))))
              for i in range(6)]
    assert [r.status_code for r in others] == [200] * 4 + [429] * 2
    assert others[-1].json()["limit"]["scope"] == "tenant" and others[-1].json()["limit"]["limit"] == 10


def test_limits_key_on_the_verified_principal_only(quarry_app, limited):
    app = quarry_app
    forged = app.token(tenant="umbrella", subject="u")[:-4] + "AAAA"
    for _ in range(10):  # unverified calls answer 401 and spend nothing of the tenant named in them
        assert limited.post("/v1/runs", headers=_h(forged)).status_code == 401
    tok = app.token(tenant="umbrella", subject="u")
    assert [limited.post("/v1/runs", headers=_h(tok)).status_code for _ in range(7)] == [200] * 6 + [429]


def test_open_run_quota_override_states_limit_and_reset(quarry_app, limited):
    tok = quarry_app.token(tenant="hooli", subject="platform-service")
    assert [limited.post("/v1/runs", headers=_h(tok)).status_code for _ in range(2)] == [200, 200]
    r = limited.post("/v1/runs", headers=_h(tok))
    assert r.status_code == 429 and "open runs for this subject" in r.json()["detail"]
    lim = Limited.model_validate(r.json()).limit.model_dump()
    assert lim["kind"] == "open_runs" and lim["scope"] == "subject" and lim["limit"] == 2
    # the first open run closes when idle for run_idle_s (120 s) at the latest
    assert 100 <= int(r.headers["retry-after"]) <= 120 and lim["retry_after_s"] == int(r.headers["retry-after"])


def test_mcp_tool_calls_spend_the_same_limits(quarry_app, limited):
    pytest.importorskip("mcp")
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    tok = quarry_app.token(tenant="initech", subject="mcp-agent")
    url = f"{limited.base_url}".rstrip("/") + "/mcp"

    async def go():
        transport = streamable_http_client(url, http_client=create_mcp_http_client(
            headers={"Authorization": f"Bearer {tok}"}))
        async with Client(transport, mode="auto") as c:  # initialize: one call (the session's run)
            out = [await c.call_tool("search", {"query": "settlement window"}) for _ in range(3)]
        return out

    first, second, third = asyncio.run(go())
    assert not first.is_error and not second.is_error  # initialize + 2 searches = initech's 3 per subject
    body = json.loads(third.content[0].text)
    assert third.is_error and body["status_code"] == 429
    assert body["limit"]["scope"] == "subject" and body["limit"]["limit"] == 3 and body["limit"]["retry_after_s"] >= 1
    # a new session needs a run: refused at initialize with the HTTP 429 and Retry-After
    r = limited.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}},
        headers={**_h(tok), "Accept": "application/json, text/event-stream"})
    assert r.status_code == 429 and int(r.headers["retry-after"]) >= 1 and r.json()["limit"]["scope"] == "subject"
