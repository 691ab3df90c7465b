"""The MCP endpoint, driven by the MCP SDK's own client over real HTTP."""

from __future__ import annotations

import asyncio
import json

import pytest

from quarry.core.agent.citations import ABSTENTION_MESSAGE

pytestmark = [pytest.mark.serve, pytest.mark.slow]

mcp = pytest.importorskip("mcp")

GOOD_QUOTE = "the settlement batch for Acme runs daily at 16:00 UTC"


def _client(app, token: str | None, extra_headers: dict[str, str] | None = None, mode: str = "auto"):
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    headers.update(extra_headers or {})
    transport = streamable_http_client(f"{app.base}/mcp", http_client=create_mcp_http_client(headers=headers))
    return Client(transport, mode=mode)


def _body(result) -> dict:
    return json.loads(result.content[0].text)


def run(coro):
    return asyncio.run(coro)


def test_lists_the_rest_tools_with_the_same_schemas(quarry_app):
    rest = {t["name"]: t for t in quarry_app.http.get("/v1/tools").json()["anthropic"]}

    async def go():
        async with _client(quarry_app, quarry_app.token()) as c:
            return (await c.list_tools()).tools

    tools = run(go())
    assert {t.name for t in tools} == {"search", "fetch", "submit_answer"}
    for t in tools:
        assert t.description == rest[t.name]["description"]
        assert t.input_schema == rest[t.name]["input_schema"]
    search = next(t for t in tools if t.name == "search")
    assert search.input_schema["properties"]["top_k"]["maximum"] == 10  # the server's ceiling


def test_search_fetch_answer_with_citations_checked(quarry_app):
    app = quarry_app
    tok = app.token()

    async def go():
        async with _client(app, tok) as c:
            s = _body(await c.call_tool("search", {"query": "zebrafinch settlement batch Acme", "top_k": 5}))
            hit = next(e for e in s["excerpts"] if e["doc_id"] == "cutover-window")
            f = _body(await c.call_tool("fetch", {"id": hit["passage_id"]}))
            bad = await c.call_tool("submit_answer", {"claims": [{
                "statement": "The Acme settlement batch runs at 16:00 UTC.", "passage_id": hit["passage_id"],
                "quote": GOOD_QUOTE}]})
            again = await c.call_tool("submit_answer", {"abstention": {"reason": "second exit"}})
            return s, hit, f, _body(bad), again

    s, hit, f, answer, again = run(go())
    assert s["searches_left"] == 2 and s["new_passage_ids"]
    assert f["passages"][0]["passage_id"] == hit["passage_id"]
    assert answer["status"] == "answered" and answer["claims"][0]["passage_id"] == hit["passage_id"]
    trace = app.trace(answer["trace_id"]).json()
    assert trace["outcome"] == "answered" and trace["checks"][0]["failed"] == []
    # one exit per run, and a session is one run
    assert again.is_error and _body(again)["status_code"] == 409


def test_citation_failure_abstains_with_the_generic_message(quarry_app):
    app = quarry_app

    async def go():
        async with _client(app, app.token()) as c:
            s = _body(await c.call_tool("search", {"query": "zebrafinch settlement batch Acme"}))
            pid = next(e["passage_id"] for e in s["excerpts"] if e["doc_id"] == "cutover-window")
            return _body(await c.call_tool("submit_answer", {"claims": [{
                "statement": "The Acme settlement batch runs at 15:00 UTC.", "passage_id": pid, "quote": GOOD_QUOTE}]}))

    body = run(go())
    assert body["status"] == "abstained" and body["message"] == ABSTENTION_MESSAGE
    assert app.trace(body["trace_id"]).json()["reason"] == "citation_check_failed"


def test_cross_tenant_probe_finds_nothing(quarry_app):
    app = quarry_app
    acme_hr = app.token(subject="hr1", groups=("hr",))

    async def acme_passage():
        async with _client(app, acme_hr) as c:
            s = _body(await c.call_tool("search", {"query": "quokkaband pay bands engineering levels", "top_k": 10}))
            return next(e["passage_id"] for e in s["excerpts"] if e["doc_id"] == "pay-bands")

    hidden = run(acme_passage())
    globex = app.token(tenant="globex", subject="g1", groups=("staff",))

    async def probe():
        async with _client(app, globex) as c:
            s = _body(await c.call_tool("search", {"query": "tenant:acme quokkaband pay bands engineering"}))
            fetched = [await c.call_tool("fetch", {"id": i}) for i in (hidden, "pay-bands", "no-such-doc@1#p0")]
            return s, fetched

    s, fetched = run(probe())
    assert all(e["doc_id"] != "pay-bands" and e["passage_id"] != hidden for e in s["excerpts"])
    assert {(r.is_error, r.content[0].text) for r in fetched} == {
        (True, json.dumps({"status_code": 404, "detail": "not found"}))}
    # a tool input cannot name a tenant either
    async def extra_field():
        async with _client(app, globex) as c:
            return await c.call_tool("search", {"query": "pay bands", "tenant": "acme"})

    r = run(extra_field())
    assert r.is_error and _body(r)["status_code"] == 422 and "acme" not in r.content[0].text


def test_bad_tokens_are_rejected(quarry_app):
    app = quarry_app
    forged = app.token()[:-4] + "AAAA"
    expired = app.token(ttl_s=-10)

    async def connect(tok):
        async with _client(app, tok) as c:
            return await c.list_tools()

    for tok in (None, forged, expired, "not-a-jwt"):
        with pytest.raises(Exception):  # the SDK client cannot even initialize
            run(connect(tok))
    # on the wire: 401 with the protected-resource challenge
    r = app.http.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                      headers={"Authorization": f"Bearer {forged}", "Accept": "application/json, text/event-stream"})
    assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Bearer")
    meta = app.http.get("/.well-known/oauth-protected-resource/mcp").json()
    assert meta["resource"].endswith("/mcp") and meta["authorization_servers"]


def test_session_is_a_run_under_the_budget_and_bound_to_its_principal(quarry_app):
    app = quarry_app
    tok = app.token(subject="budget-mcp")

    async def go():
        async with _client(app, tok) as c:
            lefts = []
            for q in ("settlement window", "refund approval", "zebrafinch marker", "cutover daily"):
                r = await c.call_tool("search", {"query": q})
                lefts.append(_body(r).get("searches_left") if not r.is_error else _body(r)["status_code"])
            return lefts

    lefts = run(go())
    assert lefts[:3] == [2, 1, 0] and lefts[3] == 409  # budget 3 per session; a search past it ends the run
    # a new session is a new run with a fresh budget
    async def fresh():
        async with _client(app, tok) as c:
            return _body(await c.call_tool("search", {"query": "settlement window"}))["searches_left"]

    assert run(fresh()) == 2
    # a run (session) id used with another principal's token is not found
    run_id = app.new_run(tok)
    other = app.token(subject="someone-else")

    async def hijack():
        async with _client(app, other, {"X-Quarry-Run": run_id}) as c:
            return await c.call_tool("search", {"query": "settlement window"})

    r = run(hijack())
    assert r.is_error and _body(r) == {"status_code": 404, "detail": "not found"}
    # and the REST run id works through MCP for its own principal
    async def own():
        async with _client(app, tok, {"X-Quarry-Run": run_id}) as c:
            return _body(await c.call_tool("search", {"query": "settlement window"}))

    assert own_body_left(run(own())) == 2


def own_body_left(body: dict) -> int:
    return body["searches_left"]
