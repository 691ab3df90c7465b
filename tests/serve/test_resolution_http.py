"""The decision record over HTTP: the Resolver deployment runs in the search path, every
search response carries ``decision`` next to the excerpts (each with its verdict), the
trace records it by ids and codes, and ``submit_answer`` refuses a citation of rejected
evidence (check 5: the user gets the one generic abstention, the code is in the trace).

The Acme assertions are the resolver's rules (seed 000 §11.7). A passage fetched by id is
resolved like a searched one, so a superseded passage fetched directly cannot be cited.
"""

from __future__ import annotations

import json

import pytest

from quarry.core.agent.citations import ABSTENTION_MESSAGE, ABSTENTION_REASONS

pytestmark = [pytest.mark.serve, pytest.mark.slow]

ACME_Q = "What is the EUR settlement cutoff for Acme?"
SELECTED = ("governing", "supporting")


def _acme(app):
    tok = app.token(subject="acme-agent", groups=("all-staff",))
    run = app.new_run(tok)
    r = app.search(tok, run, ACME_Q, top_k=10)
    assert r.status_code == 200, r.text
    return tok, run, r.json()


def test_every_search_response_carries_the_decision_record(quarry_app):
    app = quarry_app
    _, _, body = _acme(app)
    d = body["decision"]
    assert set(d) >= {"governing", "supporting", "rejected", "unresolved", "related"} and body["excerpts"]
    verdicts = {}
    for kind in SELECTED:
        for s in d[kind]:
            assert {"passage_id", "reason"} <= set(s)
            verdicts[s["passage_id"]] = kind
    for x in d["related"]:
        verdicts[x["passage_id"]] = "related"
    for x in d["rejected"]:
        assert {"passage_id", "reason", "by"} <= set(x)
        verdicts[x["passage_id"]] = "rejected"
    for u in d["unresolved"]:
        assert set(u) == {"passage_ids", "reason"}
        verdicts.update({pid: "unresolved" for pid in u["passage_ids"]})
    # each excerpt carries its verdict, and it is the decision's
    assert all(e["verdict"] == verdicts[e["passage_id"]] for e in body["excerpts"])
    resolve_stage = next(s for s in body["stages"] if s["name"] == "resolve")
    assert resolve_stage["kept"] == len(d["governing"]) + len(d["supporting"])
    assert resolve_stage["dropped"] == len(d["rejected"])
    # the trace holds the same decision by ids and codes, and each candidate's verdict
    trace = app.trace(body["trace_id"]).json()
    assert trace["decision"]["governing"] and trace["decision"] == d
    assert {c["passage_id"]: c["verdict"] for c in trace["candidates"] if c["final_position"]} == {
        e["passage_id"]: e["verdict"] for e in body["excerpts"]}
    assert all("query" not in f and len(f["query_sha256"]) == 16 for f in trace["follow_ups"])


def test_tool_description_tells_the_agent_how_to_use_the_decision(quarry_app):
    search = next(t for t in quarry_app.http.get("/v1/tools").json()["anthropic"] if t["name"] == "search")
    desc = search["description"]
    assert all(w in desc for w in ("decision", "governing", "supporting", "rejected", "unresolved", "related"))
    fetch = next(t for t in quarry_app.http.get("/v1/tools").json()["anthropic"] if t["name"] == "fetch")
    assert "rejected" in fetch["description"]


def test_acme_decision_and_a_rejected_citation_fails_check_five(quarry_app):
    app = quarry_app
    tok, run, body = _acme(app)
    d = body["decision"]
    rejected = {x["passage_id"]: x for x in d["rejected"]}
    ticket = next(pid for pid in rejected if pid.startswith("ticket-482-comment-17@"))
    assert rejected[ticket]["reason"] == "condition_ended" and rejected[ticket]["by"].startswith("deploy-acme-cutover@")
    runbook = [pid for pid in rejected if pid.startswith("settlement-runbook@2#")]
    assert runbook and all(rejected[p]["reason"] == "superseded_by" and rejected[p]["by"].startswith(
        "settlement-policy@3") for p in runbook)
    assert {s["passage_id"].split("#")[0] for s in d["governing"]} == {"settlement-policy@3"}
    assert "deploy-acme-cutover@1" in {s["passage_id"].split("#")[0] for s in d["supporting"]}
    assert d["unresolved"] == []
    excerpt = {e["passage_id"]: e for e in body["excerpts"]}
    if ticket in excerpt:
        assert excerpt[ticket]["verdict"] == "rejected"  # delivered, but marked
    else:  # found by the contradiction search only: let the agent's next search deliver it
        r = app.search(tok, run, "Acme remains on the 16:00 cutoff until cutover ticket 482", top_k=10)
        assert r.status_code == 200, r.text
        assert ticket in {e["passage_id"] for e in r.json()["excerpts"]}

    claim = {"statement": "Acme's EUR cutoff is 16:00.", "passage_id": ticket,
             "quote": "Acme remains on the 16:00 cutoff until cutover"}
    r = app.http.post("/v1/answer", headers=app.h(tok, run), json={"claims": [claim]})
    assert r.status_code == 200
    out = r.json()
    assert out["status"] == "abstained" and out["message"] == ABSTENTION_MESSAGE
    assert not any(code in r.text for code in ABSTENTION_REASONS)
    trace = app.trace(out["trace_id"]).json()
    assert trace["reason"] == "cites_rejected_evidence" and trace["checks"][0]["failed"] == ["not_rejected"]

    # the same answer from the governing policy passes every check
    tok2, run2, body2 = _acme(app)
    policy = next(s["passage_id"] for s in body2["decision"]["governing"]
                  if s["passage_id"].startswith("settlement-policy@3#eur-cutoff"))
    good = {"statement": "Acme's EUR cutoff is 15:00.", "passage_id": policy,
            "quote": "Migrated tenants use the 15:00 EUR cutoff"}
    r2 = app.http.post("/v1/answer", headers=app.h(tok2, run2), json={"claims": [good]})
    assert r2.json()["status"] == "answered", json.dumps(app.trace(r2.json()["trace_id"]).json())


def test_a_superseded_passage_fetched_by_id_is_rejected_and_cannot_be_cited(quarry_app):
    app = quarry_app
    tok = app.token(subject="acme-fetcher", groups=("all-staff",))
    run = app.new_run(tok)
    r = app.search(tok, run, "settlement runbook cutoffs table", top_k=3)
    assert r.status_code == 200, r.text
    runbook = next((e["passage_id"] for e in r.json()["excerpts"] if e["passage_id"].startswith(
        "settlement-runbook@2#cutoffs")), "settlement-runbook@2#cutoffs.1")
    f = app.http.post("/v1/fetch", headers=app.h(tok, run), json={"id": runbook})
    assert f.status_code == 200, f.text
    body = f.json()
    (p,) = body["passages"]
    assert p["verdict"] == "rejected"
    (rej,) = [x for x in body["decision"]["rejected"] if x["passage_id"] == runbook]
    assert rej["reason"] == "superseded_by" and rej["by"].startswith("settlement-policy@3")
    claim = {"statement": "The runbook states the cutoffs.", "passage_id": runbook,
             "quote": " ".join(p["text"].split()[:6])}
    out = app.http.post("/v1/answer", headers=app.h(tok, run), json={"claims": [claim]}).json()
    assert out["status"] == "abstained"
    trace = app.trace(out["trace_id"]).json()
    assert trace["reason"] == "cites_rejected_evidence" and trace["checks"][0]["failed"] == ["not_rejected"]
