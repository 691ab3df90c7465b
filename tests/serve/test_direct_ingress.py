"""Direct ingress (``ServeSettings.direct_ingress``, on in the serve test session): every
Gateway replica also answers on a port of its own. That address skips the proxy, so it must
hold the same rules as the proxy's: the same principal handling, the same request limits
(the middleware lives in the replica), and the same run state across replicas."""

from __future__ import annotations

import socket

import httpx
import pytest

from quarry.serve import launch

pytestmark = [pytest.mark.serve, pytest.mark.slow]


@pytest.fixture(scope="module")
def direct(quarry_app) -> list[httpx.Client]:
    urls = launch.ingress_urls("127.0.0.1")
    clients = [httpx.Client(base_url=u, timeout=60) for u in urls]
    yield clients
    for c in clients:
        c.close()


def test_each_gateway_replica_has_its_own_address_besides_the_proxy(quarry_app, direct):
    assert len(direct) == 2  # the session deploys two Gateway replicas
    assert all(c.base_url.port != int(quarry_app.base.rsplit(":", 1)[1]) for c in direct)
    assert len({c.base_url.port for c in direct}) == 2
    for c in direct:
        assert c.get("/healthz").status_code == 200


def test_a_run_moves_between_the_proxy_and_both_replicas_under_the_same_rules(quarry_app, direct):
    app = quarry_app
    tok = app.token(tenant="acme", subject="direct-1", groups=("support",))
    run = app.new_run(tok)
    # different questions, so each search brings new evidence (a repeat would end the run)
    queries = ["settlement cutoff", "INC-2291 duplicate payouts", "webhook signature errors"]
    bodies = [c.post("/v1/search", headers=app.h(tok, run), json={"query": q, "top_k": 2}).json()
              for c, q in zip(direct, queries)]
    bodies.append(app.search(tok, run, queries[2], top_k=2).json())
    assert [b["searches_left"] for b in bodies] == [2, 1, 0]  # one budget, whichever address
    acme = {d.doc_id for d in app.docs["acme"]}
    assert bodies[0]["excerpts"] and {e["doc_id"] for b in bodies for e in b["excerpts"]} <= acme
    # the fourth search ends the run, through a replica's own port too
    r = direct[0].post("/v1/search", headers=app.h(tok, run), json={"query": "settlement cutoff"})
    assert r.status_code == 409
    # another tenant's principal cannot use the run, and finds only its own tenant's passages
    other = app.token(tenant="globex", subject="direct-1", groups=("all-staff",))
    assert direct[1].post("/v1/search", headers=app.h(other, run), json={"query": "x"}).status_code == 404
    assert direct[1].post("/v1/runs").status_code == 401  # no token
    grun = direct[1].post("/v1/runs", headers=app.h(other)).json()["run_id"]
    g = direct[1].post("/v1/search", headers=app.h(other, grun), json={"query": "acme settlement cutoff"}).json()
    assert {e["doc_id"] for e in g["excerpts"]} <= {d.doc_id for d in app.docs["globex"]}


def test_request_limits_hold_on_a_replicas_own_port(quarry_app, direct):
    app = quarry_app
    c = direct[0]
    r = c.post("/v1/runs", headers={"Authorization": "Bearer " + "a" * (64 << 10)})
    assert r.status_code == 431 and "headers too large" in r.json()["detail"]
    tok = app.token(tenant="acme", subject="direct-2", groups=("support",))
    run = app.new_run(tok)
    big = b'{"query": "' + b"q" * 1_000_000 + b'"}'
    r = c.post("/v1/search", content=big, headers={**app.h(tok, run), "Content-Type": "application/json"})
    assert r.status_code == 413
    r = c.post("/v1/search", content=b"query=x", headers={**app.h(tok, run), "Content-Type": "text/plain"})
    assert r.status_code == 415
    # below httpx: a 4 MiB header line and a 1 MB request target, neither hangs nor answers 5xx
    with socket.create_connection((c.base_url.host, c.base_url.port), timeout=60) as s:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"b" * (4 << 20) + b"\r\n\r\n")
        head = s.recv(64)
    assert head.startswith(b"HTTP/1.1 4"), head
    with socket.create_connection((c.base_url.host, c.base_url.port), timeout=60) as s:
        s.sendall(b"GET /healthz?x=" + b"a" * 1_000_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n")
        head = s.recv(64)
    assert head.startswith(b"HTTP/1.1 4"), head
    # the run was not spent by any refused request
    assert app.search(tok, run, "settlement").json()["searches_left"] == 2
