"""Freshness over real HTTP (two Retriever replicas): after ``quarry apply-changes`` (real
local Spark) revokes a group, deletes a document or upserts one, the very next search,
fetch, parent expansion and answer citation on every replica reflect it; no rebuild."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from quarry.core.records import SourceDocument

pytestmark = [pytest.mark.serve, pytest.mark.spark, pytest.mark.timeout(2400)]

TENANT = "freshco"
AT = dt.datetime(2026, 3, 1, tzinfo=dt.timezone.utc)
SCOPE = " ".join(f"The zanzibar acquisition plan item {i} covers the harbour assets, their leases and the "
                 f"berth contracts listed in annex {i}." for i in range(14))  # longer than a passage
QUOTE = "covers the harbour assets, their leases and the berth contracts"
DOCS = [
    SourceDocument(doc_id="secret-plan", tenant=TENANT, acl=("finance",), doc_type="policy", title="Zanzibar plan",
                   text=f"## Scope\n\n{SCOPE}\n\n## Terms\n\nThe zanzibar terms cap the bid and expire in June."),
    SourceDocument(doc_id="retire-me", tenant=TENANT, acl=("*",), doc_type="runbook", title="Okapi runbook",
                   text="## Steps\n\n" + " ".join(f"Step {i}: restart the okapi ledger service and verify the "
                                                   f"okapi queue drains." for i in range(14))
                        + "\n\n## Rollback\n\nIf the okapi queue stalls, roll back."),
    SourceDocument(doc_id="open-doc", tenant=TENANT, acl=("*",), title="Harbour hours",
                   text="The harbour office opens at 09:00 and closes at 17:00 on weekdays."),
]
REPLICA_PROBES = 8  # requests after each change; the router spreads them over both replicas


def _change(op, doc_id, minutes, **kw) -> dict:
    return {"op": op, "tenant": TENANT, "doc_id": doc_id, "at": (AT + dt.timedelta(minutes=minutes)).isoformat(), **kw}


def _apply(spark, app, tmp_path, name, records) -> dict:
    from quarry.jobs.apply_changes import ApplySettings, run_apply

    d = tmp_path / name
    d.mkdir()
    (d / "changes.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    rep = run_apply(ApplySettings(changes=str(d), index_root=app.root, quiet=True), spark=spark)
    assert rep.tenants[TENANT].applied == len(records), rep
    return rep.model_dump()


def _search(app, tok, query, **kw):
    run = app.new_run(tok)
    r = app.search(tok, run, query, top_k=6, **kw)
    assert r.status_code == 200, r.text
    return run, r.json()


def _fetch(app, tok, id_):
    return app.http.post("/v1/fetch", headers=app.h(tok, app.new_run(tok)), json={"id": id_})


@pytest.fixture(scope="module")
def freshco(quarry_app):
    from quarry.core.ingest.contextualize_extractive import ExtractiveContextualizer
    from quarry.core.embed.embedders import HashingEmbedder
    from quarry.core.ingest.pipeline import build_corpus

    build_corpus(DOCS, quarry_app.root, HashingEmbedder(dim=64), ExtractiveContextualizer(),
                 extra={"contextualizer": "extractive"})
    return quarry_app


def test_revocation_delete_and_upsert_are_visible_on_the_next_request(freshco, spark, tmp_path):
    app = freshco
    fin = app.token(tenant=TENANT, subject="f1", groups=("finance",))
    ops = app.token(tenant=TENANT, subject="o1", groups=("ops",))

    # before: finance sees the plan (search, expanded parent, fetch), everyone sees the runbook
    run_before, body = _search(app, fin, "zanzibar acquisition plan harbour assets")
    plan = [e for e in body["excerpts"] if e["doc_id"] == "secret-plan" and QUOTE in e["text"]]
    assert plan and plan[0]["expanded_to"], body["excerpts"]
    pid, parent = plan[0]["passage_id"], plan[0]["expanded_to"]
    assert _fetch(app, fin, pid).status_code == 200 and _fetch(app, fin, parent).status_code == 200
    claim = {"statement": "The plan covers the harbour assets.", "passage_id": pid, "quote": QUOTE}
    run_control, _ = _search(app, fin, "zanzibar acquisition plan harbour assets")
    r = app.http.post("/v1/answer", headers=app.h(fin, run_control), json={"claims": [claim]})
    assert r.json()["status"] == "answered", r.text  # the control: this citation passes before
    _, rb = _search(app, ops, "okapi ledger queue runbook")
    okapi = [e for e in rb["excerpts"] if e["doc_id"] == "retire-me"]
    assert okapi
    okapi_pid, okapi_parent = okapi[0]["passage_id"], okapi[0]["expanded_to"]

    # revoke finance (the plan moves to the board group) -------------------------------
    _apply(spark, app, tmp_path, "revoke", [_change("acl", "secret-plan", 1, acl=["board"])])
    for _ in range(REPLICA_PROBES):  # every replica, on its very next request
        _, body = _search(app, fin, "zanzibar acquisition plan harbour assets")
        assert all(e["doc_id"] != "secret-plan" for e in body["excerpts"]), body["excerpts"]
        trace = app.trace(body["trace_id"], tenant=TENANT).json()
        assert all(c["doc_id"] != "secret-plan" for c in trace["candidates"])
        for id_ in (pid, parent, "secret-plan"):
            assert _fetch(app, fin, id_).status_code == 404
    # the same citation, retrieved before the revocation, no longer passes
    r = app.http.post("/v1/answer", headers=app.h(fin, run_before), json={"claims": [claim]})
    assert r.status_code == 200 and r.json()["status"] == "abstained", r.text
    board = app.token(tenant=TENANT, subject="b1", groups=("board",))
    _, body = _search(app, board, "zanzibar acquisition plan harbour assets")
    assert any(e["doc_id"] == "secret-plan" for e in body["excerpts"])

    # delete the runbook: passages, parents and preambles (its title lives only there) ----
    _apply(spark, app, tmp_path, "delete", [_change("delete", "retire-me", 2)])
    for _ in range(REPLICA_PROBES):
        _, body = _search(app, ops, "okapi runbook")
        assert all(e["doc_id"] != "retire-me" for e in body["excerpts"])
        for id_ in (okapi_pid, okapi_parent, "retire-me"):
            if id_:
                assert _fetch(app, ops, id_).status_code == 404

    # upsert a new document: searchable without a rebuild, with its preamble -------------
    new = SourceDocument(doc_id="quagga-notice", tenant=TENANT, acl=("*",), title="Quagga notice",
                         text="The quagga berth closes for dredging from 3 March.")
    _apply(spark, app, tmp_path, "upsert", [_change("upsert", "quagga-notice", 3, document=new.model_dump(mode="json"))])
    for _ in range(REPLICA_PROBES):
        _, body = _search(app, ops, "quagga berth dredging")
        assert body["excerpts"] and body["excerpts"][0]["doc_id"] == "quagga-notice"
        assert body["generation"] == 1

    # operators see the tenant's freshness on /healthz
    op = app.token(tenant=TENANT, subject="ops", groups=(), scope="operator")
    health = app.http.get("/healthz", headers=app.h(op)).json()
    fresh = health["tenants"][TENANT]["freshness"]
    assert fresh["delta"] == 3 and fresh["changes_applied"] == 3 and fresh["lag"]["changes"] == 3
