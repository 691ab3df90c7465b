"""Change records the admin API appends are exactly what ``quarry apply-changes`` reads: the
batch job (real local Spark) applied to the change folder makes an upsert searchable and a
delete gone. The reconciliation job started by the admin API repairs drift the same way.
The admin routes run in-process here (FastAPI's ASGI test client over the Gateway's app);
tests/serve/test_admin.py drives them over the live Serve application."""

from __future__ import annotations

import time

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(1200)]

SECRET = "admin-apply-test-secret-0123456789-0123456789-0123456789"
PLATFORM = "admin-apply-platform-secret-0123456789-0123456789-0123456789"


def _client(root: str, **settings):
    from fastapi.testclient import TestClient

    from quarry.serve.http import edge
    from quarry.serve.http.auth import mint_platform_token
    from quarry.serve.http.gateway import api
    from quarry.serve.settings import AuthSettings, ServeSettings

    edge.configure(ServeSettings(index_root=root, auth=AuthSettings(hs256_secret=SECRET, platform_hs256_secret=PLATFORM),
                                 **settings))
    return TestClient(api), {"Authorization": f"Bearer {mint_platform_token(PLATFORM)}"}


@pytest.fixture()
def acme_root(tmp_path, sample_docs):
    from quarry.core.embed.embedders import HashingEmbedder
    from quarry.core.ingest.pipeline import build_corpus

    root = str(tmp_path / "idx")
    build_corpus([d for d in sample_docs if d.tenant == "acme"], root, HashingEmbedder(64))
    return root


def _ids(root: str, query: str, groups=("support", "all-staff", "engineering")) -> list[str]:
    from quarry.core.embed.factory import embedder_for_index
    from quarry.core.index.shards import TenantIndex
    from quarry.core.records import Principal, SearchRequest
    from quarry.core.search.in_process import search

    index = TenantIndex.load(root, "acme")
    res = search(index, Principal(tenant="acme", subject="t", groups=frozenset(groups)),
                 SearchRequest(query=query, top_k=10), embedder_for_index(index.manifest), resolve=False)
    return [e.doc_id for e in res.excerpts]


def test_apply_changes_job_applies_what_the_admin_api_appended(spark, acme_root):
    from quarry.core.index import layout
    from quarry.jobs.apply_changes import ApplySettings, run_apply

    c, pt = _client(acme_root)
    assert "help-api-keys" in _ids(acme_root, "how do I rotate API keys")
    new = {"doc_id": "wombat-ledger", "tenant": "acme", "acl": ["support"], "doc_type": "page",
           "title": "Wombat ledger", "text": "The wombat ledger reconciles marsupial payouts every Tuesday."}
    assert "wombat-ledger" not in _ids(acme_root, "wombat ledger marsupial payouts")
    up = c.post("/v1/admin/tenants/acme/documents", headers=pt, json=new)
    gone = c.delete("/v1/admin/tenants/acme/documents/help-api-keys", headers=pt)
    assert up.status_code == 200 and gone.status_code == 200, (up.text, gone.text)
    lag = c.get("/v1/admin/tenants", headers=pt).json()["tenants"][0]["change_lag"]
    assert lag["unapplied"] == 2 and lag["watermark"] is None

    rep = run_apply(ApplySettings(changes=layout.join(acme_root, "_changes"), index_root=acme_root, quiet=True),
                    spark=spark)
    tr = rep.tenants["acme"]
    assert (tr.changes, tr.applied, tr.quarantined, tr.delta) == (2, 2, 0, 1) and tr.upserted_passages >= 1
    assert "wombat-ledger" in _ids(acme_root, "wombat ledger marsupial payouts")
    assert "help-api-keys" not in _ids(acme_root, "how do I rotate API keys")
    assert "wombat-ledger" not in _ids(acme_root, "wombat ledger marsupial payouts", groups=("finance-admins",))
    lag = c.get("/v1/admin/tenants", headers=pt).json()["tenants"][0]["change_lag"]
    assert lag["unapplied"] == 0 and lag["changes_applied"] == 2 and lag["watermark"] == "delta-1 gen-1"
    assert lag["delta_applies"] is True


def test_reconciliation_job_repairs_drift_from_the_configured_source(acme_root, tmp_path, sample_docs):
    from quarry.core.ingest.sources import write_source_jsonl

    keep = [d for d in sample_docs if d.tenant == "acme" and d.doc_id != "help-api-keys"]
    source = write_source_jsonl(keep, tmp_path / "truth" / "acme.jsonl")
    c, pt = _client(acme_root, reconcile_source=str(source.parent))
    r = c.post("/v1/admin/tenants/acme/reconciliation", headers=pt, json={})
    assert r.status_code == 202, r.text
    job_id = r.json()["job_id"]
    deadline = time.time() + 300
    while (job := c.get(f"/v1/admin/jobs/{job_id}", headers=pt).json())["status"] == "running":
        assert time.time() < deadline, job
        time.sleep(0.5)
    assert job["status"] == "succeeded", job
    acme = job["outcome"]["tenants"]["acme"]
    assert acme["extra"] == 1 and acme["extra_ids"] == ["help-api-keys@1"] and acme["applied"] == 1
    assert job["outcome"]["repaired"] is True
    assert "help-api-keys" not in _ids(acme_root, "how do I rotate API keys")
