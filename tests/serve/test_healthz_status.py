"""What the Retriever reports to /healthz, outside a replica (no Ray cluster needed): a
named tenant is loaded on the call, so the answer does not depend on which replica took
it; the platform view lists every published tenant, loaded or not."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.serve]


def test_status_names_published_tenants_whichever_replica_answers(tmp_path, sample_docs):
    from quarry.core.embed.embedders import HashingEmbedder
    from quarry.core.ingest.pipeline import build_corpus
    from quarry.serve.deployments.retriever import Retriever
    from quarry.serve.settings import AuthSettings, ServeSettings

    root = str(tmp_path)
    build_corpus([d for d in sample_docs if d.tenant in ("acme", "globex")], root, HashingEmbedder(64))
    settings = ServeSettings(index_root=root, auth=AuthSettings(hs256_secret="x" * 40), reranker_enabled=False)
    r = Retriever.func_or_class(settings)  # a fresh replica: nothing loaded yet
    assert r.loaded() == {}
    own = r._status(["acme"])  # an operator's view loads its own tenant
    assert set(own) == {"acme"} and own["acme"].loaded and own["acme"].generation == 1
    assert set(own["acme"].model_dump(mode="json")) == {"generation", "loaded", "dense", "freshness"}
    assert r._status(["initech"]) == {}  # not published here: nothing, and nothing loaded
    platform = r._status(None)
    assert set(platform) == {"acme", "globex"}
    assert platform["globex"].model_dump(mode="json") == {"generation": 1, "loaded": False}  # listed, not loaded
    assert set(r.loaded()) == {"acme"}
