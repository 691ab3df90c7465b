"""The Reranker deployment serves, per tenant and generation, the second stage its
promotion gate recorded; the decision shows in the response, the trace and /healthz.

The gate's *evaluation* is tested in tests/core; here a decision is recorded directly
(``record_decision`` with fixed numbers) so the test is about serving obeying it.
"""

from __future__ import annotations

import time

import pytest

pytestmark = [pytest.mark.serve, pytest.mark.slow]

SMALL = {"n_estimators": 20, "num_leaves": 4, "min_child_samples": 1}


def _train(root: str, tenant: str):
    from quarry.core.embed.embedders import HashingEmbedder
    from quarry.core.index.shards import TenantIndex
    from quarry.core.rank.model import LearnedRanker
    from quarry.core.rank.train import label_candidates, mine_candidates
    from quarry.core.records import Principal
    from quarry.core.search.settings import SearchSettings

    idx = TenantIndex.load(root, tenant)
    principal = Principal(tenant=tenant, subject="trainer",
                          groups=frozenset({"all-staff", "support", "engineering", "finance-admins"}))
    docs = sorted({pid.split("@")[0] for sh in idx.shards for pid in sh.passage_ids})
    titles = {d: idx.document(d, principal)[0].envelope.title for d in docs if idx.document(d, principal)}
    mined = mine_candidates(idx, principal, HashingEmbedder(dim=64), titles, SearchSettings())
    groups = [(m.query, m.candidates, m.passages, label_candidates(m.candidates, {d: 1})) for d, m in mined.items()]
    return idx.generation, LearnedRanker(params=SMALL).fit(groups)


def _record(root, tenant, enabled: bool):
    from quarry.core.rank.gate import evaluate_gate, record_decision

    gen, ranker = _train(root, tenant)
    fused, stage = (0.5, 0.6) if enabled else (0.6, 0.5)
    decision = evaluate_gate(fused, stage, model_id=ranker.model_id, n_queries=7)
    assert decision.enabled is enabled
    record_decision(root, tenant, gen, decision, ranker)
    return gen, ranker.model_id


def _search_until(app, tok, query, pred, timeout=20, **body):
    deadline = time.time() + timeout
    while True:
        run = app.new_run(tok)
        r = app.search(tok, run, query, **body)
        assert r.status_code == 200, r.text
        if pred(r.json()) or time.time() > deadline:
            return r.json()
        time.sleep(0.3)


def _rerank_note(body):
    return next(s["note"] for s in body["stages"] if s["name"] == "rerank")


def test_gate_promoted_learned_ranker_is_served_and_visible(quarry_app):
    app = quarry_app
    gen, model_id = _record(app.root, "initech", enabled=True)
    tok = app.token(tenant="initech", subject="i1", groups=("all-staff",))
    body = _search_until(app, tok, "payroll delay postmortem INC-1877", lambda b: "learned" in _rerank_note(b), top_k=3)
    note = _rerank_note(body)
    assert "learned" in note and "gate" in note and body["excerpts"]
    trace = app.trace(body["trace_id"], tenant="initech").json()
    ss = trace["second_stage"]
    assert ss["kind"] == "learned" and ss["enabled"] and ss["status"] == "applied"
    assert ss["model_id"] == model_id and ss["metrics"]["fused"] == 0.5 and ss["metrics"]["stage"] == 0.6
    assert ss["generation"] == gen == body["generation"]
    ranked = [c for c in trace["candidates"] if c["rerank_rank"] is not None]
    assert ranked and all(c["final_position"] is not None for c in ranked)
    # /healthz: anonymous callers learn nothing; the tenant's operator sees its decision
    assert app.http.get("/healthz").json() == {"status": "ok"}
    op = app.token(tenant="initech", subject="ops", groups=(), scope="operator")
    health = app.http.get("/healthz", headers=app.h(op)).json()
    assert set(health["tenants"]) == {"initech"}
    hs = health["tenants"]["initech"]["second_stage"]
    assert hs["enabled"] and hs["kind"] == "learned" and hs["model_id"] == model_id
    # a plain user token gets the probe answer only
    assert app.http.get("/healthz", headers=app.h(tok)).json() == {"status": "ok"}
    platform = app.platform_token()  # the cross-tenant view needs the platform credential
    assert "initech" in app.http.get("/healthz", headers=app.h(platform)).json()["tenants"]


def test_gate_that_said_no_keeps_the_fused_order_and_says_why(quarry_app):
    app = quarry_app
    _, model_id = _record(app.root, "acme", enabled=False)
    tok = app.token()
    body = _search_until(app, tok, "settlement batch", lambda b: (
        app.trace(b["trace_id"]).json()["second_stage"].get("gate") or {}).get("model_id") == model_id, top_k=3)
    assert "skipped" in _rerank_note(body)
    ss = app.trace(body["trace_id"]).json()["second_stage"]
    assert ss["enabled"] is False and ss["status"] == "skipped"
    assert ss["gate"]["enabled"] is False and ss["gate"]["model_id"] == model_id
    assert "does not beat the margin" in ss["reason"]
    assert all(c["rerank_rank"] is None for c in app.trace(body["trace_id"]).json()["candidates"])


def test_candidate_width_per_request_up_to_the_ceiling(quarry_app):
    app = quarry_app
    tok = app.token(tenant="initech", subject="i2", groups=("all-staff",))
    run = app.new_run(tok)
    r = app.search(tok, run, "settlement cutoff", top_k=3, candidates=5)
    assert r.status_code == 200
    trace = app.trace(r.json()["trace_id"], tenant="initech").json()
    assert trace["second_stage"]["candidate_width"] == 5 and len(trace["candidates"]) <= 5
    r = app.search(tok, run, "refund window", top_k=4, candidates=2)  # never fewer than top_k
    assert app.trace(r.json()["trace_id"], tenant="initech").json()["second_stage"]["candidate_width"] == 4
    before = r.json()["searches_left"]
    assert before >= 1
    assert app.search(tok, run, "refund window", candidates=61).status_code == 422  # server ceiling
    assert app.search(tok, run, "refund window", candidates=0).status_code == 422
    # the refused requests spent nothing: the run's next search still has its slot
    after = app.search(tok, run, "incident response communication owner")
    assert after.status_code == 200 and after.json()["searches_left"] == before - 1
