"""Purge on a running application (the session's Ray Serve app: two Retriever replicas,
``generation_check_ms`` 200): a document with a unique marker is built, searched, fetched
and cited, then purged; the marker is then in no byte under the index root (the trace store
included) nor in any local shard copy, and no replica returns it to a search, a fetch or a
citation check. The same for a whole tenant. The time from the purge's return to
gone-on-every-replica is measured and printed (docs/operations.md states the bound)."""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

import pytest

from quarry.core.records import SourceDocument

pytestmark = [pytest.mark.timeout(600)]

MARKER = "vexquarrymarker"
PROBES = 8  # requests per check; the router spreads them over both replicas
QUERY = "glacier expedition logbook crevasse"


def _docs(tenant: str, marker: str) -> list[SourceDocument]:
    return [
        SourceDocument(doc_id="pm-doc", tenant=tenant, acl=("*",), title="Glacier expedition logbook",
                       text=f"The glacier expedition logbook records the crevasse survey. {marker} code word."),
        SourceDocument(doc_id="keep-a", tenant=tenant, acl=("*",), title="Harbour dredging",
                       text="The harbour dredging schedule starts in March and the glacier museum stays open."),
        SourceDocument(doc_id="keep-b", tenant=tenant, acl=("*",), title="Expedition kit",
                       text="Expedition kit lists include crampons, ropes and a logbook for every team."),
    ]


def _search(app, tok):
    run = app.new_run(tok)
    r = app.search(tok, run, QUERY, top_k=6)
    assert r.status_code == 200, r.text
    return run, r.json()


def _fetch(app, tok, id_):
    return app.http.post("/v1/fetch", headers=app.h(tok, app.new_run(tok)), json={"id": id_}).status_code


def _scan(root: str, needle: bytes) -> list[str]:
    return [str(p) for p in Path(root).rglob("*") if p.is_file() and needle in p.read_bytes()]


def _gone(app, tok, ids) -> bool:
    for _ in range(PROBES):
        _, body = _search(app, tok)
        if any(e["doc_id"] == "pm-doc" or MARKER in e["text"] for e in body["excerpts"]):
            return False
        if any(_fetch(app, tok, i) != 404 for i in ids):
            return False
    return True


def _until_gone(app, tok, ids, deadline_s=60.0) -> tuple[float, float]:
    """(when the first all-clean probe round started, when it ended), seconds after now."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < deadline_s:
        start = time.monotonic() - t0
        if _gone(app, tok, ids):
            return start, time.monotonic() - t0
        time.sleep(0.05)
    raise AssertionError(f"still served {deadline_s}s after the purge")


def _served(app, tok):
    deadline = time.time() + 60
    while time.time() < deadline:
        run, body = _search(app, tok)
        hits = [e for e in body["excerpts"] if e["doc_id"] == "pm-doc"]
        if hits:
            return run, hits[0]
        time.sleep(0.2)
    raise AssertionError("the marked document was never served")


@pytest.mark.serve
def test_document_purge_reaches_every_copy(quarry_app):
    from quarry.core.index import layout
    from quarry.jobs.purge import purge_document, purge_tenant

    app, tenant = quarry_app, "purgeco"
    app.build(app.root, tenant, _docs(tenant, MARKER))
    tok = app.token(tenant=tenant, subject="p1", groups=("support",))
    run_before, hit = _served(app, tok)
    pid = hit["passage_id"]
    ids = [pid, "pm-doc"] + ([hit["expanded_to"]] if hit.get("expanded_to") else [])
    assert _fetch(app, tok, pid) == 200
    claim = {"statement": "The logbook records the crevasse survey.", "passage_id": pid,
             "quote": "logbook records the crevasse survey"}
    run_control, _ = _search(app, tok)
    r = app.http.post("/v1/answer", headers=app.h(tok, run_control), json={"claims": [claim]})
    assert r.json()["status"] == "answered", r.text  # the control: this citation passes before
    time.sleep(0.5)  # the gateways' trace buffers are flushed (flush_ms 200)
    assert _scan(app.root, MARKER.encode())  # the marker is on storage before

    purge_document(app.root, tenant, "pm-doc")
    start, end = _until_gone(app, tok, ids)
    print(f"\n[purge] document gone from every replica: the first clean probe round ({PROBES} searches, "
          f"{PROBES * len(ids)} fetches) ran {start * 1000:.0f}-{end * 1000:.0f} ms after purge_document returned")

    r = app.http.post("/v1/answer", headers=app.h(tok, run_before), json={"claims": [claim]})
    assert r.status_code == 200 and r.json()["status"] == "abstained", r.text  # retrieved before, refused now
    _, body = _search(app, tok)
    assert {e["doc_id"] for e in body["excerpts"]} & {"keep-a", "keep-b"}  # the rest of the tenant serves
    time.sleep(0.5)
    assert _scan(app.root, MARKER.encode()) == []  # index root, _traces, _serve: nowhere
    assert layout.fetched_copies(tempfile.gettempdir(), layout.tenant_dir(app.root, tenant)) == []

    # the whole tenant ---------------------------------------------------------------------
    purge_tenant(app.root, tenant)
    t0, purged_at = time.monotonic(), time.time()
    while time.monotonic() - t0 < 60:
        bodies = [_search(app, tok)[1] for _ in range(PROBES)]
        if all(not b["excerpts"] for b in bodies) and all(_fetch(app, tok, "keep-a") == 404 for _ in range(PROBES)):
            break
        time.sleep(0.05)
    else:
        raise AssertionError("the purged tenant was still served")
    print(f"[purge] tenant gone from every replica {(time.monotonic() - t0) * 1000:.0f} ms after purge_tenant returned")
    assert sorted(p.name for p in Path(app.root, tenant).iterdir()) == ["LEASE", "PURGED"]  # the lease claims (owner, expiry: no text) and the purge record
    time.sleep(0.5)
    # the probes above wrote new traces (ids only, nothing found); none from before the purge is left
    for f in Path(app.root, "_traces", tenant).rglob("*.jsonl"):
        for line in f.read_text().splitlines():
            rec = json.loads(line)
            assert rec["at"] >= purged_at and not rec.get("delivered") and not rec.get("candidates"), rec
    assert _scan(app.root, b"crampons") == [] and _scan(app.root, b"dredging schedule") == []
    assert tenant not in layout.list_tenants(app.root)


@pytest.mark.unit
def test_purge_watch_drops_what_was_loaded_before_the_purge(tmp_path):
    """Without Serve: a deployment's generation cache and the process text caches, as the
    Reranker's and Retriever's watch threads drop them."""
    from helpers.freshness import BASE, EMB
    from quarry.core.evidence.sentences import passage_sentences
    from quarry.core.index import layout
    from quarry.core.ingest.pipeline import build_corpus
    from quarry.jobs.purge import purge_document
    from quarry.serve.deployments.generations import GenerationIndexes
    from quarry.serve.deployments.purges import PurgeWatch, clear_text_caches

    root = str(tmp_path / "idx")
    build_corpus(BASE, root, EMB)
    held = GenerationIndexes(root, 4)
    held.get("t", layout.current_generation(root, "t"))
    dropped = []
    watch = PurgeWatch(root, 3600, held.epochs, lambda t, e: dropped.append((t, held.drop_tenant(t))))
    try:
        assert watch.check() == [] and held.epochs() == {"t": {None}}
        purge_document(root, "t", "d0")
        assert watch.check() == ["t"] and dropped == [("t", 1)] and held.epochs() == {}
        held.get("t", layout.current_generation(root, "t"))  # loaded after the purge: kept
        assert watch.check() == []
    finally:
        watch.stop()
    passage_sentences(f"A sentence with {MARKER}. Another one.", tenant="acme")
    assert passage_sentences.cache_info().currsize > 0
    clear_text_caches()
    assert passage_sentences.cache_info().currsize == 0
