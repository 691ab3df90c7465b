"""Hostile input over real HTTP through
the Serve proxy. Every malformed request gets a clear 4xx that never echoes the input; no
tenant token sees another tenant's health; operators see only what their groups may read.
"""

from __future__ import annotations

import json
import socket
import time

import jwt
import pytest
from jsonschema import Draft202012Validator

pytestmark = [pytest.mark.serve, pytest.mark.slow]

RUN_HEADER = "X-Quarry-Run"


def _raw_post(app, path: str, body: bytes, headers: dict[str, str]):
    return app.http.post(path, content=body, headers={"Content-Type": "application/json", **headers})


def _assert_clean_4xx(r, status: int | tuple[int, ...], *secrets: str):
    codes = (status,) if isinstance(status, int) else status
    assert r.status_code in codes, (r.status_code, r.text[:300])
    body = r.json()  # always JSON, whatever the input was
    assert '"input"' not in r.text and len(r.content) < 4096
    for s in secrets:
        assert s not in r.text
    return body


@pytest.fixture
def searcher(quarry_app):
    tok = quarry_app.token()
    return tok, quarry_app.new_run(tok)


# -- no 5xx on unencodable or non-finite input ---------------------------------

@pytest.mark.parametrize("raw", [
    rb'{"query": "refund \ud800 window"}',
    rb'{"query": "refund \udfff window"}',
    rb'{"query": "refund", "top_k": NaN}',
    rb'{"query": "refund", "top_k": Infinity}',
    rb'{"query": "refund", "top_k": -Infinity}',
    rb'{"query": "refund", "top_k": 1e400}',
    rb'{"query": "refund", "candidates": NaN}',
    rb'{"query": "refund", "\ud800": 1}',  # an extra key that cannot be encoded
])
def test_unencodable_and_non_finite_input_is_422(quarry_app, searcher, raw):
    app = quarry_app
    tok, run = searcher
    r = _raw_post(app, "/v1/search", raw, app.h(tok, run))
    body = _assert_clean_4xx(r, 422)
    assert body["detail"] and all(set(d) == {"loc", "type", "msg"} for d in body["detail"])
    # refused before the run store: nothing was spent
    assert app.search(tok, run, "settlement").json()["searches_left"] == 2


@pytest.mark.parametrize("raw", [rb'{"id": "a\ud800b"}', rb'{"id": NaN}', rb'{"id": "x", "\udfff": 1}'])
def test_fetch_rejects_the_same(quarry_app, searcher, raw):
    tok, run = searcher
    _assert_clean_4xx(_raw_post(quarry_app, "/v1/fetch", raw, quarry_app.h(tok, run)), 422)


@pytest.mark.parametrize("raw", [
    rb'{"abstention": {"reason": "no \ud800"}}',
    rb'{"claims": [{"statement": "s", "passage_id": "p", "quote": "a b c d"}], "x": NaN}',
    rb'{"claims": [{"statement": "s", "passage_id": "p", "quote": "a b c d"}], "abstention": {"reason": "r"}}',
])
def test_answer_rejects_the_same_and_ends_the_run(quarry_app, searcher, raw):
    app = quarry_app
    tok, run = searcher
    _assert_clean_4xx(_raw_post(app, "/v1/answer", raw, app.h(tok, run)), 422)
    assert app.search(tok, run, "settlement").status_code == 409  # invalid_decision was its one exit


# -- one validation handler, never echoing; limits before parsing --------------

def test_validation_errors_never_echo_input(quarry_app, searcher):
    app = quarry_app
    tok, run = searcher
    h = app.h(tok, run)
    for path, body in [("/v1/search", {"query": "refund", "tenant": "globex"}),
                       ("/v1/search", {"query": "refund", "top_k": "globex"}),
                       ("/v1/fetch", {"id": "x", "groups": ["globex"]}),
                       ("/v1/answer", {"abstention": {"reason": "r"}, "tenant": "globex"})]:
        body = _assert_clean_4xx(app.http.post(path, headers=h, json=body), 422, "globex")
        assert all(set(d) == {"loc", "type", "msg"} for d in body["detail"])
    # an extra key's name is the caller's input too: the location says only that it is one
    r = app.http.post("/v1/search", headers=h, json={"query": "x", "secret-key-name-1234 with spaces": 1})
    _assert_clean_4xx(r, 422, "secret-key-name-1234")


def test_body_above_the_limit_is_413_before_parsing(quarry_app, searcher):
    app = quarry_app
    tok, run = searcher
    h = app.h(tok, run)
    big = json.dumps({"query": "refund " + "x" * (10 << 20)}).encode()
    r = _raw_post(app, "/v1/search", big, h)
    assert r.status_code == 413 and len(r.content) < 200 and "at most" in r.json()["detail"]

    def chunks():  # no Content-Length: the middleware counts the streamed bytes
        yield b'{"query": "'
        for _ in range(40):
            yield b"y" * (64 << 10)
        yield b'"}'

    r = app.http.post("/v1/search", content=chunks(), headers={"Content-Type": "application/json", **h})
    assert r.status_code == 413
    # a 1 MB query and a 20,000-entry doc_type list are bodies too
    assert _raw_post(app, "/v1/search", json.dumps({"query": "q" * 1_000_000}).encode(), h).status_code == 413
    flood = {"query": "refund", "doc_type": ["d" * 50] * 20_000}
    assert app.http.post("/v1/search", headers=h, json=flood).status_code == 413
    assert app.search(tok, run, "settlement").json()["searches_left"] == 2


@pytest.mark.parametrize("size", [64 << 10, 4 << 20])
def test_headers_above_the_limit_are_431(quarry_app, size):
    """Ray Serve's proxy forwards any header size; the gateway refuses before reading the token."""
    app = quarry_app
    r = app.http.post("/v1/runs", headers={"Authorization": "Bearer " + "a" * size})
    assert r.status_code == 431 and "headers too large" in r.json()["detail"]
    r = app.http.get("/healthz", headers={"X-Padding": "p" * size})
    assert r.status_code == 431


def test_deeply_nested_json_is_400(quarry_app, searcher):
    app = quarry_app
    tok, run = searcher
    deep = b'{"query": "x", "doc_type": ' + b"[" * 50_000 + b"]" * 50_000 + b"}"
    r = _raw_post(app, "/v1/search", deep, app.h(tok, run))
    assert r.status_code == 400 and "nested" in r.json()["detail"]
    # brackets inside strings are text, not nesting
    ok = app.search(tok, run, "[[[[" * 100 + "settlement")
    assert ok.status_code == 200


@pytest.mark.parametrize("ctype", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data", ""])
def test_wrong_content_type_is_415(quarry_app, searcher, ctype):
    app = quarry_app
    tok, run = searcher
    h = app.h(tok, run) | {"Content-Type": ctype}
    for path, body in [("/v1/search", b'{"query": "settlement"}'), ("/v1/answer", b'{"abstention": {"reason": "r"}}')]:
        r = app.http.post(path, content=body, headers=h)
        assert r.status_code == 415 and "application/json" in r.json()["detail"]
    assert app.search(tok, run, "settlement").json()["searches_left"] == 2  # nothing spent, run still open


@pytest.mark.parametrize("body", [
    {"query": "refund\x00window"},  # NUL byte
    {"query": "refund \x1b[31m"},  # terminal escape
    {"query": "q" * 2001},  # over the query length, under the body limit
    {"query": "refund", "top_k": 10**30},  # huge top_k
    {"query": "refund", "top_k": 11},  # over this server's ceiling
    {"query": "refund", "top_k": "5"},  # strict types
    {"query": "refund", "top_k": True},
    {"query": "refund", "top_k": 4.5},
    {"query": "refund", "candidates": "60"},
    {"query": "refund", "valid_at": 0},  # not 1970-01-01
    {"query": "refund", "valid_at": "2026-02-30"},  # invalid dates
    {"query": "refund", "valid_at": "yesterday"},
    {"query": "refund", "valid_at": "2026-01-01T00:00:00"},
    {"query": "refund", "valid_at": "99999-01-01"},
    {"query": "refund", "doc_type": ["policy"] * 17},  # count and length bounded
    {"query": "refund", "doc_type": ["p" * 64]},
    {"query": "refund", "doc_type": []},
    {"query": "refund", "doc_type": ["Policy Docs"]},
    {"query": "refund", "doc_type": "policy"},
    ["refund"],
    "refund",
    None,
])
def test_hostile_search_bodies_get_422(quarry_app, searcher, body):
    app = quarry_app
    tok, run = searcher
    r = app.http.post("/v1/search", headers=app.h(tok, run), json=body)
    _assert_clean_4xx(r, 422, "refund\x00", "31m")


def test_malformed_json_is_4xx(quarry_app, searcher):
    app = quarry_app
    tok, run = searcher
    for raw in (b"{", b'{"query": "x",}', b"\xff\xfe{}", b'{"query": "x"} trailing'):
        _assert_clean_4xx(_raw_post(app, "/v1/search", raw, app.h(tok, run)), (400, 422))


def test_empty_result_message_never_echoes_filters(quarry_app, searcher):
    app = quarry_app
    tok, run = searcher
    r = app.search(tok, run, "settlement", doc_type=["zzmarkerdoctype"])
    assert r.status_code == 200 and not r.json()["excerpts"]
    assert "doc_type" in r.json()["message"] and "zzmarkerdoctype" not in r.text


def test_bounded_requests_keep_working(quarry_app, searcher):
    app = quarry_app
    tok, run = searcher
    r = app.search(tok, run, "settlement " * 150, top_k=10, doc_type=["policy", "runbook"] * 8,
                   valid_at="2026-01-20", candidates=60)
    assert r.status_code == 200, r.text


# -- strict token claims, over HTTP --------------------------------------------

def _claims(**over):
    now = int(time.time())
    c = {"iss": "quarry-dev", "aud": "quarry", "sub": "u", "iat": now, "exp": now + 60,
         "tenant": "acme", "groups": ["support"]}
    c.update(over)
    return c


@pytest.mark.parametrize("over", [
    {"tenant": "acme\n"}, {"tenant": "acme\r\n"}, {"tenant": "\nacme"}, {"tenant": ["acme"]},
    {"exp": str(int(time.time()) + 600)}, {"exp": True}, {"iat": str(int(time.time()))},
    {"sub": "u\n"}, {"sub": 7}, {"groups": ["support\n"]}, {"groups": [" support"]},
    {"groups": ["g"] * 300}, {"scope": ["operator"]}, {"scope": "operator platform"},
])
def test_strict_claims_over_http(quarry_app, over):
    app = quarry_app
    tok = jwt.encode(_claims(**over), app.secret, algorithm="HS256")
    r = app.http.post("/v1/runs", headers={"Authorization": f"Bearer {tok}"})
    assert (r.status_code, r.text) == (401, '{"detail":"unauthorized"}')
    # the same claims, correctly typed, are accepted
    assert app.http.post("/v1/runs", headers={"Authorization": f"Bearer {jwt.encode(_claims(), app.secret)}"}
                         ).status_code == 200


# -- traces hold no free-text query; operators see only what their groups can --

def test_trace_keeps_a_hash_and_a_redacted_query(quarry_app):
    app = quarry_app
    tok = app.token(subject="privacy-1")
    q = "refund window for ord_4821 alice@example.com 2.5% settlement"
    r = app.search(tok, app.new_run(tok), q)
    trace = app.trace(r.json()["trace_id"]).json()
    dumped = json.dumps(trace)
    assert "query" not in trace and "ord_4821" not in dumped and "alice@example.com" not in dumped
    assert "2.5" not in trace["query_redacted"] and trace["query_redacted"].startswith("refund window for")
    assert len(trace["query_redacted"]) <= 80 and len(trace["query_sha256"]) == 16
    # the same query gives the same hash (capacity planning can group repeats)
    r2 = app.search(tok, app.new_run(tok), q)
    assert app.trace(r2.json()["trace_id"]).json()["query_sha256"] == trace["query_sha256"]


def test_operator_trace_view_is_filtered_by_the_operators_groups(quarry_app):
    app = quarry_app
    hr = app.token(subject="hr-trace", groups=("hr",))
    run = app.new_run(hr)
    r = app.search(hr, run, "quokkaband pay bands engineering levels", top_k=5)
    hidden = [e["passage_id"] for e in r.json()["excerpts"] if e["doc_id"] == "pay-bands"]
    assert hidden, r.json()
    trace_id = r.json()["trace_id"]
    plain_op = app.trace(trace_id, groups=()).json()  # an operator with no groups
    dumped = json.dumps(plain_op)
    assert hidden[0] not in dumped and "pay-bands" not in dumped and plain_op["redacted_ids"] >= 1
    redacted = [c for c in plain_op["candidates"] if c.get("redacted")]
    assert redacted and all(c["doc_id"] == "redacted" and c["fused_rank"] for c in redacted)
    hr_op = app.token(subject="hr-ops", groups=("hr",), scope="operator")
    full = app.http.get(f"/v1/trace/{trace_id}", headers=app.h(hr_op)).json()
    assert hidden[0] in json.dumps(full) and full["redacted_ids"] == 0
    # answer traces name passages too
    claim = {"statement": "Pay bands are reviewed every April.", "passage_id": hidden[0],
             "quote": "Pay bands for engineering levels are reviewed every April"}
    a = app.http.post("/v1/answer", headers=app.h(hr, run), json={"claims": [claim]})
    assert a.status_code == 200 and a.json()["status"] == "answered", a.text
    assert hidden[0] not in app.trace(a.json()["trace_id"], groups=()).text


# -- /healthz per tenant; the cross-tenant view needs the platform credential --

def test_healthz_never_crosses_tenants_for_tenant_tokens(quarry_app):
    app = quarry_app
    for t in ("acme", "globex", "initech"):  # make sure each tenant is loaded
        tok = app.token(tenant=t, subject="h", groups=("all-staff",))
        assert app.search(tok, app.new_run(tok), "refund").status_code == 200
    for scope in ("operator", "admin", "operator admin", "platform"):
        tok = app.token(tenant="acme", subject="ops", groups=(), scope=scope)
        body = app.http.get("/healthz", headers=app.h(tok)).json()
        assert set(body.get("tenants", {})) <= {"acme"}, (scope, body)
    forged = jwt.encode({**_claims(aud="quarry-platform", scope="platform"), "tenant": "acme"}, app.secret)
    assert app.http.get("/healthz", headers=app.h(forged)).json() == {"status": "ok"}
    platform = app.http.get("/healthz", headers=app.h(app.platform_token())).json()
    assert {"acme", "globex", "initech"} <= set(platform["tenants"])
    # the platform credential is no tenant token: it opens nothing else
    r = app.http.post("/v1/runs", headers=app.h(app.platform_token()))
    assert (r.status_code, r.text) == (401, '{"detail":"unauthorized"}')


# -- the spec describes what the server does -------------------------------------

def _resolve(spec, node):
    while isinstance(node, dict) and "$ref" in node:
        ref = node["$ref"]
        assert ref.startswith("#/"), ref
        node = spec  # a JSON pointer from the document's root
        for part in ref[2:].split("/"):
            node = node[part]
    return node


def _all_refs(node):
    if isinstance(node, dict):
        if "$ref" in node:
            yield node["$ref"]
        for v in node.values():
            yield from _all_refs(v)
    elif isinstance(node, list):
        for v in node:
            yield from _all_refs(v)


def test_openapi_spec_is_exact(quarry_app):
    app = quarry_app
    spec = app.http.get("/openapi.json").json()
    for ref in _all_refs(spec):
        _resolve(spec, {"$ref": ref})  # every reference resolves
    ops = spec["paths"]
    statuses = set().union(*(set(op["responses"]) for p in ops.values() for op in p.values()))
    assert {"200", "400", "401", "404", "405", "409", "413", "415", "422", "429", "431"} <= statuses
    search = ops["/v1/search"]["post"]
    body = _resolve(spec, search["requestBody"]["content"]["application/json"]["schema"])
    assert body["properties"]["top_k"]["maximum"] == 10  # this server's ceiling, not the model's 50
    assert [b for b in body["properties"]["candidates"]["anyOf"] if b.get("type") == "integer"][0]["maximum"] == 60
    v = Draft202012Validator(body, format_checker=Draft202012Validator.FORMAT_CHECKER)
    for bad in ({"query": "x", "top_k": "5"}, {"query": "x", "top_k": True}, {"query": "x", "valid_at": 0},
                {"query": "x", "top_k": 11}, {"query": "x\x00"}, {"query": "x", "doc_type": ["a"] * 17}):
        assert not v.is_valid(bad), bad
    assert v.is_valid({"query": "x", "top_k": 10, "valid_at": "2026-01-01", "doc_type": ["policy"]})
    assert not any(p["name"].lower() == "authorization" for p in search.get("parameters", []))
    assert search["security"] == [{"bearer": []}]
    answer = ops["/v1/answer"]["post"]
    a = Draft202012Validator(_resolve(spec, answer["requestBody"]["content"]["application/json"]["schema"]))
    claim = {"statement": "s", "passage_id": "d@1#a", "quote": "one two three four"}
    assert a.is_valid({"claims": [claim]}) and a.is_valid({"abstention": {"reason": "r"}})
    assert not a.is_valid({"claims": [claim], "abstention": {"reason": "r"}}) and not a.is_valid({})
    assert not a.is_valid({"claims": None})


def _check_response(spec, path, method, r):
    op = spec["paths"][path][method]
    assert str(r.status_code) in op["responses"], (path, r.status_code)
    schema = op["responses"][str(r.status_code)]["content"]["application/json"]["schema"]
    Draft202012Validator(schema).validate(r.json())


def test_real_responses_match_the_spec(quarry_app):
    app = quarry_app
    spec = app.http.get("/openapi.json").json()
    tok = app.token()
    run = app.new_run(tok)
    h = app.h(tok, run)
    calls = [
        ("/healthz", "get", app.http.get("/healthz")),
        ("/healthz", "get", app.http.get("/healthz", headers=app.h(app.token(scope="operator")))),
        ("/v1/tools", "get", app.http.get("/v1/tools")),
        ("/v1/runs", "post", app.http.post("/v1/runs", headers=app.h(tok))),
        ("/v1/runs", "post", app.http.post("/v1/runs")),
        ("/v1/search", "post", app.search(tok, run, "zebrafinch settlement batch Acme 16:00", top_k=5)),
        ("/v1/search", "post", app.http.post("/v1/search", headers=h, json={"query": "x", "top_k": "5"})),
        ("/v1/search", "post", app.http.post("/v1/search", headers=app.h(tok, "nope"), json={"query": "x"})),
        ("/v1/search", "post", app.http.post("/v1/search", headers=h, content=b"{", )),
        ("/v1/search", "post", app.http.post("/v1/search", headers=h, content=b"x" * (1 << 20))),
        ("/v1/fetch", "post", app.http.post("/v1/fetch", headers=h, json={"id": "cutover-window"})),
        ("/v1/fetch", "post", app.http.post("/v1/fetch", headers=h, json={"id": "pay-bands"})),
        ("/v1/trace/{trace_id}", "get", app.http.get("/v1/trace/nope", headers=app.h(tok))),
    ]
    hit = calls[5][2].json()["excerpts"][0]["passage_id"]
    claim = {"statement": "The batch runs daily.", "passage_id": hit, "quote": "one two three four five"}
    calls += [
        ("/v1/answer", "post", app.http.post("/v1/answer", headers=h, json={"claims": [claim]})),
        ("/v1/answer", "post", app.http.post("/v1/answer", headers=h, json={"claims": [claim]})),  # 409
        ("/v1/search", "post", app.search(tok, run, "settlement")),  # 409 abstained
        ("/v1/trace/{trace_id}", "get", app.trace(calls[5][2].json()["trace_id"])),
    ]
    seen = set()
    for path, method, r in calls:
        _check_response(spec, path, method, r)
        seen.add(r.status_code)
    assert {200, 401, 404, 409, 413, 415, 422} <= seen
    # a method the path does not have
    r = app.http.get("/v1/search")
    assert r.status_code == 405 and "POST" in r.headers.get("allow", "")


def _raw(app, request: bytes) -> bytes:
    host, port = app.base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=60) as s:
        s.sendall(request)
        return s.recv(64)


def test_raw_socket_oversized_header_and_target_are_refused(quarry_app):
    """Below httpx: a 4 MiB header line gets 431 from the gateway; a 1 MB request target is
    refused by the Serve proxy itself (uvicorn, 400). Neither hangs or answers 5xx."""
    head = _raw(quarry_app, b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"b" * (4 << 20) + b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 431"), head
    head = _raw(quarry_app, b"GET /healthz?x=" + b"a" * 1_000_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 4"), head
