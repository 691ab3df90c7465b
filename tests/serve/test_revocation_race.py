"""Issue 23's revocation window, found: while one request re-read ``CURRENT`` (holding the
tenant's load lock), concurrent requests were handed the cached index without reading the
change watermark, so a search that started after ``apply-changes`` returned could still see
a revoked document. Outside a replica (no Ray cluster): the lock is held by the test."""

from __future__ import annotations

import datetime as dt

import pytest

pytestmark = [pytest.mark.serve]


def test_a_request_during_a_reload_still_reads_the_watermark(tmp_path, sample_docs):
    from quarry.core.changes.delta import apply_local
    from quarry.core.changes.log import Change
    from quarry.core.embed.embedders import HashingEmbedder
    from quarry.core.index import layout
    from quarry.core.ingest.pipeline import build_corpus
    from quarry.serve.deployments.retriever import Retriever
    from quarry.serve.settings import AuthSettings, ServeSettings

    root = str(tmp_path)
    docs = [d for d in sample_docs if d.tenant == "acme"]
    build_corpus(docs, root, HashingEmbedder(64))
    r = Retriever.func_or_class(ServeSettings(index_root=root, auth=AuthSettings(hs256_secret="x" * 40),
                                              reranker_enabled=False, generation_check_ms=60_000))
    before = r.index_for("acme")
    entry = r._cache.peek("acme")
    entry.checked_at -= 3600  # CURRENT is due for a re-read
    lock = r._loading["acme"]
    assert lock.acquire(blocking=False)  # a reload is under way in another request
    try:
        doc = docs[0]
        seq, _ = apply_local(root, "acme", [Change(op="acl", tenant="acme", doc_id=doc.doc_id, acl=("nobody",),
                                                   at=dt.datetime.now(dt.timezone.utc))], HashingEmbedder(64))
        assert seq is not None
        wm = layout.read_watermark(root, "acme")
        got = r.index_for("acme")  # fails on the old code: the cached index, watermark unread
        assert got.watermark == wm != before.watermark
    finally:
        if lock.locked():
            lock.release()

