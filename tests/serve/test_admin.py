"""The admin API (``/v1/admin/...``) over the live Serve application: platform credential
only, tenant tokens refused on every route, and each route's effect on the index root
(CURRENT, change files, job status files)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from quarry.core.changes.delta import apply_local
from quarry.core.changes.log import read_changes
from quarry.core.embed.embedders import HashingEmbedder
from quarry.core.index import layout

pytestmark = [pytest.mark.serve, pytest.mark.slow]

T = "/v1/admin/tenants"
ROUTES = [("GET", T, None), ("POST", f"{T}/acme/rollback", {"generation": 1}),
          ("POST", f"{T}/acme/compaction", None), ("POST", f"{T}/acme/reconciliation", {}),
          ("GET", "/v1/admin/jobs/" + "0" * 32, None), ("DELETE", f"{T}/acme", None),
          ("POST", f"{T}/acme/purge?doc_id=help-api-keys", None),
          ("POST", f"{T}/acme/documents", {"doc_id": "x", "tenant": "acme", "text": "t", "acl": ["*"]}),
          ("DELETE", f"{T}/acme/documents/help-api-keys", None),
          ("POST", f"{T}/acme/acl", {"doc_id": "help-api-keys", "acl": ["support"]})]


def _own_tenant(app, name: str, generations: int = 1) -> None:
    """A tenant of this test's own (acme's documents under another name): rollbacks and
    compactions here cannot disturb the other serve tests."""
    docs = [d.model_copy(update={"tenant": name}) for d in app.docs["acme"]]
    for _ in range(generations):
        app.build(app.root, name, docs)


def _pt(app) -> dict[str, str]:
    return {"Authorization": f"Bearer {app.platform_token()}"}


def _wait_job(app, job_id: str, timeout_s: float = 120) -> dict:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        r = app.http.get(f"/v1/admin/jobs/{job_id}", headers=_pt(app))
        assert r.status_code == 200, r.text
        if r.json()["status"] != "running":
            return r.json()
        time.sleep(0.5)
    raise AssertionError(f"job {job_id} still running after {timeout_s} s")


@pytest.mark.parametrize("method,path,body", ROUTES, ids=[f"{m} {p}" for m, p, _ in ROUTES])
def test_every_admin_route_refuses_anything_but_a_platform_credential(quarry_app, method, path, body):
    app = quarry_app
    before = sorted(Path(app.root).rglob("*.jsonl"))
    kw = {"json": body} if body is not None else {}
    r = app.http.request(method, path, **kw)
    assert r.status_code == 401 and r.json() == {"detail": "unauthorized"}
    r = app.http.request(method, path, headers={"Authorization": "Bearer not-a-jwt"}, **kw)
    assert r.status_code == 401
    for scope in (None, "operator"):  # a valid tenant token, even an operator's, never reaches it
        tok = app.token(tenant="acme", subject="ops", groups=("support",), scope=scope)
        r = app.http.request(method, path, headers={"Authorization": f"Bearer {tok}"}, **kw)
        assert r.status_code == 404 and r.json() == {"detail": "not found"}, (scope, r.text)
    # a platform token signed with the tenant key (a forgery) is a tenant-side failure: 401
    from quarry.serve.http.auth import mint_platform_token

    forged = mint_platform_token(app.secret)
    assert app.http.request(method, path, headers={"Authorization": f"Bearer {forged}"}, **kw).status_code == 401
    assert sorted(Path(app.root).rglob("*.jsonl")) == before  # nothing was written
    assert layout.current_generation(app.root, "acme") == 1


def test_tenants_lists_generations_sizes_lag_and_second_stage_without_text(quarry_app):
    app = quarry_app
    _own_tenant(app, "adminlist", generations=2)
    (Path(app.root) / "adminlist" / "gen-3").mkdir()  # a build that never finished
    r = app.http.get(T, headers=_pt(app))
    assert r.status_code == 200, r.text
    body = r.json()
    by = {t["tenant"]: t for t in body["tenants"]}
    assert {"acme", "globex", "adminlist"} <= set(by)
    t = by["adminlist"]
    assert t["live_generation"] == 2
    assert [(g["generation"], g["complete"]) for g in t["generations"]] == [(1, True), (2, True), (3, False)]
    assert t["generations"][0]["size_bytes"] > 0 and t["size_bytes"] >= sum(g["size_bytes"] for g in t["generations"])
    assert t["change_lag"]["watermark"] is None and t["change_lag"]["unapplied"] == 0
    assert t["second_stage"] is None
    assert "zebrafinch" not in r.text and "quokkaband" not in r.text  # no document text, ever


def test_rollback_switches_current_and_refuses_what_cannot_be_served(quarry_app):
    app = quarry_app
    _own_tenant(app, "adminroll", generations=2)
    (Path(app.root) / "adminroll" / "gen-3").mkdir()  # incomplete: no manifest
    url = f"{T}/adminroll/rollback"
    r = app.http.post(url, headers=_pt(app), json={"generation": 1})
    assert r.status_code == 200, r.text
    assert r.json() == {"tenant": "adminroll", "generation": 1, "previous": 2, "retired_delta": None,
                        "restored_delta": None}
    assert layout.current_generation(app.root, "adminroll") == 1
    assert layout.read_json(layout.join(app.root, "adminroll", "manifest.json"))["generation"] == 1
    for gen, why in ((1, "already the live generation"), (3, "no manifest"), (9, "does not exist")):
        r = app.http.post(url, headers=_pt(app), json={"generation": gen})
        assert r.status_code == 409 and why in r.json()["detail"], r.text
    assert layout.current_generation(app.root, "adminroll") == 1
    assert app.http.post(f"{T}/nosuchtenant/rollback", headers=_pt(app), json={"generation": 1}).status_code == 404
    assert app.http.post(url, headers=_pt(app), json={"generation": "x"}).status_code == 422
    # the platform /healthz view follows the rollback (a Retriever picks up CURRENT)
    deadline = time.time() + 30
    while time.time() < deadline:
        h = app.http.get("/healthz", headers=_pt(app)).json()
        if h["tenants"]["adminroll"]["generation"] == 1:
            break
        time.sleep(0.3)
    assert h["tenants"]["adminroll"]["generation"] == 1


def test_document_and_acl_changes_are_appended_as_apply_changes_reads_them(quarry_app):
    app = quarry_app
    _own_tenant(app, "adminchg")
    doc = {"doc_id": "new-doc", "tenant": "adminchg", "text": "A brand new page about wombat ledgers.",
           "acl": ["support"], "doc_type": "page"}
    r1 = app.http.post(f"{T}/adminchg/documents", headers=_pt(app), json=doc)
    assert r1.status_code == 200, r1.text
    r2 = app.http.post(f"{T}/adminchg/documents", headers=_pt(app),
                       json=[{**doc, "doc_id": "d2"}, {**doc, "doc_id": "d3", "version": "2"}])
    r3 = app.http.delete(f"{T}/adminchg/documents/help-api-keys", headers=_pt(app), params={"version": "1"})
    r4 = app.http.post(f"{T}/adminchg/acl", headers=_pt(app), json={"doc_id": "refund-policy", "acl": ["finance-admins"]})
    for r in (r2, r3, r4):
        assert r.status_code == 200, r.text
    assert "wombat" not in r1.text + r2.text  # ids, never text
    files = [r.json()["changes_file"] for r in (r1, r2, r3, r4)]
    assert len(set(files)) == 4 and all(f.startswith("_changes/adminchg/") for f in files)
    changes, bad = read_changes(str(Path(app.root) / "_changes" / "adminchg"))
    assert not bad
    assert sorted(c.change_id for c in changes) == sorted(i for r in (r1, r2, r3, r4) for i in r.json()["change_ids"])
    by = {(c.op, c.doc_id): c for c in changes}
    assert by[("upsert", "d3")].version == "2" and by[("delete", "help-api-keys")].version == "1"
    assert by[("acl", "refund-policy")].acl == ("finance-admins",) and by[("acl", "refund-policy")].version is None
    # the tenant list counts them as unapplied
    lag = {t["tenant"]: t for t in app.http.get(T, headers=_pt(app)).json()["tenants"]}["adminchg"]["change_lag"]
    assert lag["unapplied"] == 5 and lag["oldest_unapplied_age_s"] >= 0
    # refused: a document of another tenant, an empty list, an unknown tenant, a malformed ACL
    assert app.http.post(f"{T}/adminchg/documents", headers=_pt(app), json={**doc, "tenant": "acme"}).status_code == 422
    assert app.http.post(f"{T}/adminchg/documents", headers=_pt(app), json=[]).status_code == 422
    assert app.http.post(f"{T}/nosuchtenant/documents", headers=_pt(app), json=doc).status_code == 404
    assert app.http.post(f"{T}/adminchg/acl", headers=_pt(app), json={"doc_id": "x", "acl": [" a"]}).status_code == 422
    assert app.http.delete(f"{T}/adminchg/documents/bad@id", headers=_pt(app)).status_code == 422
    assert len(list((Path(app.root) / "_changes" / "adminchg").glob("*.jsonl"))) == 4


def test_compaction_job_runs_in_the_background_and_reports_its_outcome(quarry_app):
    app = quarry_app
    _own_tenant(app, "admincmp")
    from quarry.core.changes.log import Change
    import datetime as dt

    at = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    seq, _ = apply_local(app.root, "admincmp", [Change(op="delete", tenant="admincmp", doc_id="help-api-keys", at=at)],
                         HashingEmbedder(64))
    assert seq == 1
    r = app.http.post(f"{T}/admincmp/compaction", headers=_pt(app))
    assert r.status_code == 202, r.text
    job = r.json()
    assert job["status"] == "running" and job["kind"] == "compaction" and job["tenant"] == "admincmp"
    done = _wait_job(app, job["job_id"])
    assert done["status"] == "succeeded", done
    out = done["outcome"]
    assert out["compacted"] is True and out["from_generation"] == 1 and out["generation"] == 2
    assert layout.current_generation(app.root, "admincmp") == 2
    # a second compaction has nothing to fold: still a success, with the reason
    again = _wait_job(app, app.http.post(f"{T}/admincmp/compaction", headers=_pt(app)).json()["job_id"])
    assert again["status"] == "succeeded" and again["outcome"]["compacted"] is False
    assert app.http.post(f"{T}/nosuchtenant/compaction", headers=_pt(app)).status_code == 404
    assert app.http.get("/v1/admin/jobs/" + "f" * 32, headers=_pt(app)).status_code == 404
    assert app.http.get("/v1/admin/jobs/not-an-id", headers=_pt(app)).status_code in (404, 422)


def test_reconciliation_needs_a_configured_source(quarry_app):
    app = quarry_app
    r = app.http.post(f"{T}/acme/reconciliation", headers=_pt(app), json={"dry_run": True})
    assert r.status_code == 409 and "reconcile_source" in r.json()["detail"]


def test_purge_jobs_remove_a_document_then_the_whole_tenant(quarry_app):
    """On a tenant of the test's own: a document purge leaves its text in no file under the
    tenant's folder and the rest served; a tenant purge leaves no generation at all."""
    app = quarry_app
    marker = "zqx-adminpurge-7f3a"
    base = app.docs["acme"][0]
    doc = base.model_copy(update={"tenant": "adminpurge", "doc_id": "purge-me",
                                  "text": f"The {marker} procedure ends at noon.\n\n{base.text}"})
    rest = [d.model_copy(update={"tenant": "adminpurge"}) for d in app.docs["acme"][1:]]
    for _ in range(2):
        app.build(app.root, "adminpurge", [doc, *rest])
    marker = marker.encode()
    tdir = Path(app.root) / "adminpurge"
    assert any(marker in p.read_bytes() for p in tdir.rglob("*") if p.is_file())
    # a live run of the tenant saw the document: the run store (actor checkpoint) holds its ids
    user = app.token(tenant="adminpurge", groups=tuple(sorted(set(doc.acl) - {"*"})) or ("support",))
    run = app.new_run(user)
    hit = app.search(user, run, "procedure ends at noon")
    assert hit.status_code == 200 and any(e["doc_id"] == "purge-me" for e in hit.json()["excerpts"]), hit.text
    runs_dir = Path(app.root, "_serve")

    def run_files_naming_it():
        return [p for p in runs_dir.rglob("*") if p.is_file() and b"purge-me@" in p.read_bytes()]

    assert run_files_naming_it()
    r = app.http.post(f"{T}/adminpurge/purge", params={"doc_id": doc.doc_id}, headers=_pt(app))
    assert r.status_code == 202 and r.json()["kind"] == "purge-document", r.text
    job = _wait_job(app, r.json()["job_id"])
    assert job["status"] == "succeeded", job
    assert not [p for p in tdir.rglob("*") if p.is_file() and marker in p.read_bytes()]
    assert not [p for p in Path(app.root).rglob("*") if p.is_file() and marker in p.read_bytes()]
    # the run goes on; its next search appends the run's whole state to the actor's log, so an
    # id still held in the actor's memory would be written again
    assert app.search(user, run, "settlement batch").status_code == 200
    assert run_files_naming_it() == []
    # ...and that write reached the checkpoint the actor reads back (a file rewritten under the
    # actor instead of by it would have swallowed it): the run's last state on disk has 2 searches
    states = [json.loads(line)["s"] for f in ("runs.snap", "runs.log") if (runs_dir / "runs" / f).exists()
              for line in (runs_dir / "runs" / f).read_text().splitlines() if '"s":' in line]
    assert [st["used"] for st in states if st["run_id"] == run][-1] == 2
    assert layout.current_generation(app.root, "adminpurge") is not None
    r = app.http.delete(f"{T}/adminpurge", headers=_pt(app))
    assert r.status_code == 202 and r.json()["kind"] == "purge", r.text
    job = _wait_job(app, r.json()["job_id"])
    assert job["status"] == "succeeded", job
    assert layout.current_generation(app.root, "adminpurge") is None
    assert layout.generations(app.root, "adminpurge") == []


def test_admin_routes_are_in_the_openapi_document(quarry_app):
    spec = quarry_app.http.get("/openapi.json").json()
    admin = {(p, m) for p, ops in spec["paths"].items() if p.startswith("/v1/admin") for m in ops}
    assert admin == {("/v1/admin/tenants", "get"), (f"{T}/{{tenant}}/rollback", "post"),
                     (f"{T}/{{tenant}}/compaction", "post"), (f"{T}/{{tenant}}/reconciliation", "post"),
                     ("/v1/admin/jobs/{job_id}", "get"), (f"{T}/{{tenant}}", "delete"),
                     (f"{T}/{{tenant}}/purge", "post"), (f"{T}/{{tenant}}/documents", "post"), (f"{T}/{{tenant}}/documents/{{doc_id}}", "delete"),
                     (f"{T}/{{tenant}}/acl", "post")}
    for p, m in admin:
        op = spec["paths"][p][m]
        assert op["security"] == [{"bearer": []}] and "401" in op["responses"] and "404" in op["responses"]
        ok = next(c for c in op["responses"] if c.startswith("2"))
        assert "schema" in op["responses"][ok]["content"]["application/json"]
