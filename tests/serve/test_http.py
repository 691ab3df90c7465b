"""Acceptance tests against a real local Serve application over HTTP."""

from __future__ import annotations

import json
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from jsonschema import Draft202012Validator

from quarry.core.agent.citations import ABSTENTION_MESSAGE, ABSTENTION_REASONS

RUN_HEADER = "X-Quarry-Run"

pytestmark = [pytest.mark.serve, pytest.mark.slow]


def _ids(resp):
    return [e["passage_id"] for e in resp.json()["excerpts"]]


def _find(app, token, query, doc_id, **kw):
    run = app.new_run(token)
    r = app.search(token, run, query, top_k=10, **kw)
    assert r.status_code == 200, r.text
    hits = [e for e in r.json()["excerpts"] if e["doc_id"] == doc_id]
    return run, r, hits


def test_health_docs_and_tools(quarry_app):
    http = quarry_app.http
    assert http.get("/healthz").json() == {"status": "ok"}
    assert http.get("/docs").status_code == 200
    paths = http.get("/openapi.json").json()["paths"]
    assert {"/v1/runs", "/v1/search", "/v1/fetch", "/v1/answer", "/v1/tools", "/v1/trace/{trace_id}"} <= set(paths)
    tools = http.get("/v1/tools").json()
    for t in tools["anthropic"]:
        Draft202012Validator.check_schema(t["input_schema"])
    assert "tenant" not in json.dumps(tools["anthropic"][0]["input_schema"]["properties"])


def test_bad_tokens_get_identical_401(quarry_app):
    import jwt

    app = quarry_app
    now = int(time.time())
    base = {"iss": "quarry-dev", "aud": "quarry", "sub": "u", "iat": now, "exp": now + 60, "tenant": "acme",
            "groups": ["support"]}
    bad = {
        "missing": None,
        "forged": jwt.encode(base, "another-secret-0123456789-0123456789-0123456789", algorithm="HS256"),
        "expired": jwt.encode({**base, "iat": now - 120, "exp": now - 60}, app.secret, algorithm="HS256"),
        "wrong_audience": jwt.encode({**base, "aud": "someone-else"}, app.secret, algorithm="HS256"),
        "alg_none": jwt.encode(base, None, algorithm="none"),
    }
    good = app.token()
    run = app.new_run(good)
    bodies = set()
    for name, tok in bad.items():
        headers = {RUN_HEADER: run} | ({"Authorization": f"Bearer {tok}"} if tok else {})
        for method, path, body in [("POST", "/v1/runs", None), ("POST", "/v1/search", {"query": "settlement"}),
                                   ("POST", "/v1/fetch", {"id": "x"}), ("GET", "/v1/trace/abc", None)]:
            r = app.http.request(method, path, headers=headers, json=body)
            assert r.status_code == 401, (name, path, r.text)
            bodies.add(r.text)
    assert bodies == {'{"detail":"unauthorized"}'}
    # the failed attempts spent nothing
    assert app.search(good, run, "settlement").json()["searches_left"] == 2


def test_extra_fields_get_422(quarry_app):
    app = quarry_app
    tok = app.token()
    run = app.new_run(tok)
    h = app.h(tok, run)
    assert app.http.post("/v1/search", headers=h, json={"query": "pay bands", "tenant": "globex"}).status_code == 422
    assert app.http.post("/v1/fetch", headers=h, json={"id": "x", "groups": ["hr"]}).status_code == 422
    assert app.http.post("/v1/search", headers=h, json={"query": "x", "top_k": 11}).status_code == 422  # ceiling
    # neither search consumed budget (validation precedes the run store)
    assert app.search(tok, run, "settlement").json()["searches_left"] == 2
    r = app.http.post("/v1/answer", headers=h, json={"abstention": {"reason": "r"}, "tenant": "globex"})
    assert r.status_code == 422
    # an invalid decision is the run's one exit: it ended as invalid_decision
    assert app.search(tok, run, "settlement").status_code == 409


def test_query_naming_another_tenant_stays_in_callers_tenant(quarry_app):
    app = quarry_app
    tok = app.token(groups=("support",))
    run = app.new_run(tok)
    r = app.search(tok, run, "tenant:globex quokkaband pay bands", top_k=10)
    assert r.status_code == 200
    docs = {e["doc_id"] for e in r.json()["excerpts"]}
    assert "globex-pay" not in docs and "pay-bands" not in docs


def test_cross_tenant_and_cross_group_probes_are_indistinguishable(quarry_app):
    app = quarry_app
    hr = app.token(subject="hr1", groups=("hr",))
    _, _, hr_hits = _find(app, hr, "quokkaband pay bands engineering levels", "pay-bands")
    globex = app.token(tenant="globex", subject="g1", groups=("staff",))
    _, _, gx_hits = _find(app, globex, "quokkaband globex pay bands", "globex-pay")
    assert hr_hits and gx_hits
    hidden, foreign = hr_hits[0]["passage_id"], gx_hits[0]["passage_id"]

    support = app.token(subject="s1", groups=("support",))
    run = app.new_run(support)
    r = app.search(support, run, "quokkaband pay bands", top_k=10)
    assert {e["doc_id"] for e in r.json()["excerpts"]}.isdisjoint({"pay-bands", "globex-pay"})

    fetches = [app.http.post("/v1/fetch", headers=app.h(support, run), json={"id": i})
               for i in (hidden, foreign, "no-such-doc@1#p0", "pay-bands", "globex-pay")]
    assert {(f.status_code, f.text) for f in fetches} == {(404, '{"detail":"not found"}')}
    # hr may fetch it
    assert app.http.post("/v1/fetch", headers=app.h(hr, app.new_run(hr)), json={"id": hidden}).status_code == 200

    answers = []
    for pid in (hidden, foreign, "no-such-doc@1#p0"):
        run = app.new_run(support)
        claim = {"statement": "Pay bands are reviewed.", "passage_id": pid, "quote": "pay bands are reviewed every"}
        r = app.http.post("/v1/answer", headers=app.h(support, run), json={"claims": [claim]})
        assert r.status_code == 200
        body = r.json()
        body.pop("trace_id")
        answers.append(body)
    assert answers[0] == answers[1] == answers[2] == {"status": "abstained", "message": ABSTENTION_MESSAGE,
                                                      "searches_left": 0}

    # someone else's run id answers exactly like a made-up one
    other = app.token(subject="s2", groups=("support",))
    r1 = app.search(other, run, "settlement")
    r2 = app.search(other, "00000000-0000-0000-0000-000000000000", "settlement")
    assert (r1.status_code, r1.text) == (r2.status_code, r2.text) == (404, '{"detail":"not found"}')


def test_budget_and_new_evidence_rules(quarry_app):
    app = quarry_app
    tok = app.token()
    run = app.new_run(tok)
    r1 = app.search(tok, run, "settlement", top_k=1)
    r2 = app.search(tok, run, "settlement", top_k=2)
    r3 = app.search(tok, run, "settlement", top_k=3)
    assert [r.json()["searches_left"] for r in (r1, r2, r3)] == [2, 1, 0]
    assert len(r2.json()["new_passage_ids"]) == 1
    r4 = app.search(tok, run, "something else entirely", top_k=5)
    assert r4.status_code == 409 and r4.json()["message"] == ABSTENTION_MESSAGE
    trace = app.trace(r4.json()["trace_id"]).json()
    assert trace["reason"] == "budget_exhausted"
    # same subject, fresh token: still the same run, still exhausted
    assert app.search(app.token(), run, "settlement").status_code == 409

    run = app.new_run(tok)
    a = app.search(tok, run, "settlement", top_k=2)
    b = app.search(tok, run, "settlement", top_k=2)  # the same ids again: no new evidence
    assert a.json()["searches_left"] == 2 and b.json()["searches_left"] == 0 and b.json()["new_passage_ids"] == []
    assert app.search(tok, run, "access groups", top_k=2).status_code == 409


def test_replayed_requests_cannot_reset_budget_across_replicas(quarry_app):
    app = quarry_app
    tok = app.token()
    run = app.new_run(tok)
    headers = app.h(tok, run)
    body = {"query": "settlement", "top_k": 1}

    def send(_):
        return app.http.post("/v1/search", headers=headers, json=body).status_code

    with ThreadPoolExecutor(8) as ex:
        codes = list(ex.map(send, range(24)))
    # the first search may be followed by at most one more allowed search before the
    # repeat is seen to add nothing; never more than the budget
    assert 1 <= codes.count(200) <= 3 and codes.count(409) == 24 - codes.count(200), codes
    assert send(0) == 409
    # a replayed POST /v1/runs makes a *new* run; it never revives the old one
    assert app.new_run(tok) != run and send(0) == 409


def _claim_run(app, tok):
    run = app.new_run(tok)
    r = app.search(tok, run, "zebrafinch settlement batch Acme 16:00", top_k=5)
    hit = [e for e in r.json()["excerpts"] if e["doc_id"] == "cutover-window"]
    assert hit, r.json()
    return run, hit[0]["passage_id"]


GOOD_QUOTE = "the settlement batch for Acme runs daily at 16:00 UTC"


@pytest.mark.parametrize(
    "statement,quote,cite,failed",
    [
        ("The Acme settlement batch runs at 16:00 UTC.", GOOD_QUOTE, "hit", []),
        ("The Acme settlement batch runs at 15:00 UTC.", GOOD_QUOTE, "hit", ["numbers"]),
        ("The Acme batch runs daily.", "settlement batch for", "hit", ["quote_length"]),
        ("The Acme batch runs daily.", "the Acme batch for settlement runs daily", "hit", ["quote_match"]),
        ("The Acme batch runs daily.", GOOD_QUOTE, "unretrieved", ["retrieved", "quote_match"]),
    ],
)
def test_citation_checks_over_http(quarry_app, statement, quote, cite, failed):
    app = quarry_app
    tok = app.token()
    run, pid = _claim_run(app, tok)
    if cite == "unretrieved":
        pid = "access-control-policy@1#never-retrieved"
    claim = {"statement": statement, "passage_id": pid, "quote": quote}
    r = app.http.post("/v1/answer", headers=app.h(tok, run), json={"claims": [claim]})
    assert r.status_code == 200, r.text
    body = r.json()
    trace = app.trace(body["trace_id"]).json()
    if not failed:
        assert body["status"] == "answered" and body["claims"][0]["passage_id"] == pid
        assert trace["outcome"] == "answered"
    else:
        assert body["status"] == "abstained" and body["message"] == ABSTENTION_MESSAGE
        assert trace["reason"] == "citation_check_failed"
        assert set(failed) <= set(trace["checks"][0]["failed"])
        if cite == "hit":
            assert trace["checks"][0]["failed"] == failed
    assert not any(code in r.text for code in ABSTENTION_REASONS)
    # one exit: a second submission is refused
    assert app.http.post("/v1/answer", headers=app.h(tok, run), json={"claims": [claim]}).status_code == 409


def test_abstention_reasons_go_to_trace_only(quarry_app):
    app = quarry_app
    tok = app.token()
    run = app.new_run(tok)
    r = app.http.post("/v1/answer", headers=app.h(tok, run), json={"abstention": {"reason": "nothing"}})
    assert r.json()["message"] == ABSTENTION_MESSAGE
    assert app.trace(r.json()["trace_id"]).json()["reason"] == "no_visible_evidence"
    run, _ = _claim_run(app, tok)
    r2 = app.http.post("/v1/answer", headers=app.h(tok, run), json={"abstention": {"reason": "not enough"}})
    assert r2.json()["message"] == ABSTENTION_MESSAGE
    assert app.trace(r2.json()["trace_id"]).json()["reason"] == "model_abstained"
    for resp in (r, r2):
        assert not any(code in resp.text for code in ABSTENTION_REASONS)


def test_trace_holds_ids_and_ranks_never_text_and_needs_operator(quarry_app):
    app = quarry_app
    tok = app.token()
    run = app.new_run(tok)
    r = app.search(tok, run, "zebrafinch settlement", top_k=3)
    body = r.json()
    trace_id = body["trace_id"]
    assert body["excerpts"] and any(s["name"] == "rerank" and "skipped" in s["note"] for s in body["stages"])
    t = app.trace(trace_id)
    assert t.status_code == 200
    trace = t.json()
    # the group name never appears (the decision's "supporting" reason is a word of its own)
    assert trace["tenant"] == "acme" and len(trace["groups_hash"]) == 16
    assert not re.search(r'"support"|\bsupport\b', json.dumps(trace))
    assert trace["generation"] == body["generation"]
    assert trace["candidates"] and {"lexical_rank", "dense_rank", "fused_rank", "final_position"} <= set(
        trace["candidates"][0])
    dumped = json.dumps(trace).lower()
    for e in body["excerpts"]:
        words = e["text"].split()
        for i in range(0, max(1, len(words) - 5), 3):
            chunk = " ".join(words[i:i + 6]).lower()
            if chunk and chunk not in "zebrafinch settlement":
                assert chunk not in dumped
    # not an operator, or an operator of another tenant: same answer as a missing trace
    assert app.http.get(f"/v1/trace/{trace_id}", headers=app.h(tok)).text == '{"detail":"not found"}'
    assert app.trace(trace_id, tenant="globex").text == '{"detail":"not found"}'
    assert app.trace("f" * 32).status_code == 404


def test_hot_swap_under_load(quarry_app):
    app = quarry_app
    tok = app.token(tenant="globex", subject="g1", groups=("staff",))
    stop = threading.Event()
    results: list[tuple[int, int, bool]] = []

    def client():
        while not stop.is_set():
            try:
                run = app.new_run(tok)
                r = app.search(tok, run, "globex pay bands quokkaband", top_k=3)
                ok = r.status_code == 200
                marker = ok and any("hotswapmarker" in e["text"] for e in r.json()["excerpts"])
                results.append((r.status_code, r.json().get("generation", -1) if ok else -1, marker))
                # finish the run: open runs per subject are capped, and this loop opens many
                app.http.post("/v1/answer", headers=app.h(tok, run), json={"abstention": {"reason": "load"}})
            except Exception:  # a transport error is a failed request too
                results.append((599, -1, False))

    threads = [threading.Thread(target=client) for _ in range(2)]
    for th in threads:
        th.start()
    time.sleep(2)
    before = {g for _, g, _ in results}
    new_gen = app.build(app.root, "globex", app.docs["globex"], suffix=" hotswapmarker")
    deadline = time.time() + 30
    while time.time() < deadline and not any(g == new_gen for _, g, _ in results):
        time.sleep(0.2)
    time.sleep(1)
    stop.set()
    for th in threads:
        th.join()
    assert [r for r in results if r[0] != 200] == []
    assert new_gen not in before
    after = [r for r in results if r[1] == new_gen]
    assert after and all(m for _, _, m in after)
    # once switched, no replica goes back to the old generation
    first = next(i for i, r in enumerate(results) if r[1] == new_gen)
    assert all(r[1] == new_gen for r in results[first + 5:])


def test_search_reports_server_timing_without_content(quarry_app):
    """Per-stage latency rides in a Server-Timing header: names and durations only."""
    app = quarry_app
    tok = app.token(groups=("support",))
    r = app.search(tok, app.new_run(tok), "settlement cutoff", top_k=3)
    assert r.status_code == 200
    assert "settlement" not in r.headers["server-timing"]
    parts = {k: float(v) for k, v in (p.split(";dur=") for p in r.headers["server-timing"].split(", "))}
    names = list(parts)
    assert names[0] == "auth" and names[-1] == "total"  # in the order the request ran them
    stages = names[:-1]
    assert {"auth", "retrieve", "rerank", "resolve", "decide"} <= set(stages) <= {
        "auth", "check", "retrieve", "rerank", "expand", "resolve", "decide"}  # one run-store decision
    assert parts["retrieve"] > 0 and parts["resolve"] > 0 and parts["decide"] > 0  # deployment and store calls
    # the stages ran one after another inside the request: together they fit in its total
    assert sum(parts[k] for k in stages) <= parts["total"] + 0.01 * len(stages)  # 2-decimal rounding
    # the trace records the same timings (all but the total, measured after it was written)
    traced = app.trace(r.json()["trace_id"]).json()["timings_ms"]
    assert set(traced) == set(stages) and all(abs(traced[k] - parts[k]) < 0.01 for k in stages), traced


def test_search_without_a_second_stage_expands_in_the_retrieval_call(quarry_app):
    """Once the Gateway knows the tenant's generation serves no second stage, the first
    stage and the expansion come from one Retriever call (no separate expand hop), with the
    same delivered excerpts as the separate calls."""
    app = quarry_app
    tok = app.token(tenant="globex", subject="g9", groups=("all-staff",))
    seen: dict[bool, set[tuple]] = {True: set(), False: set()}
    for _ in range(8):
        r = app.search(tok, app.new_run(tok), "refund policy window", top_k=3)
        assert r.status_code == 200
        body = r.json()
        rerank = next(s for s in body["stages"] if s["name"] == "rerank")
        assert rerank["note"].startswith("skipped"), rerank  # no test promotes a ranker for globex
        parts = dict(p.split(";dur=") for p in r.headers["server-timing"].split(", "))
        seen["expand" in parts].add(tuple((e["passage_id"], e["text"]) for e in body["excerpts"]))
    assert seen[False], "no search took the one-call retrieval"
    assert len(seen[True] | seen[False]) == 1  # both paths deliver the same excerpts
