"""The ``llm`` contextualizer through the Spark job, against the local fake
OpenAI-compatible server (tests/helpers/llm_server.py): a server error, a slow response, and the
cost account summed from the partitions into the job report."""

from __future__ import annotations

import pytest

from helpers.llm_server import FakeLLMServer

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]


def test_llm_contextualizer_in_the_job(spark, tmp_path, sample_docs):
    from quarry.core.ingest.contextualize import LLMSettings
    from quarry.core.index.shards import TenantIndex
    from quarry.core.ingest.sources import SAMPLE_CORPUS
    from quarry.jobs.build import run_build
    from quarry.jobs.build_settings import BuildSettings

    from helpers.build_job import principal_for, search

    # request 1 stalls past the client timeout, request 2 answers HTTP 500; both are retried
    with FakeLLMServer(slow_first=1, slow_s=3.0, fail_first=2) as srv:
        llm = LLMSettings(base_url=srv.base_url, model="fake-ctx", timeout_s=1.0, backoff_s=0.05, max_retries=3,
                          max_concurrency=2, price_in_per_1k=0.5, price_out_per_1k=2.0)
        root = tmp_path / "idx"
        r = run_build(BuildSettings(source=str(SAMPLE_CORPUS), index_root=str(root), tenants=("initech",),
                                    contextualizer="llm", llm=llm, llm_api_key="sk-test", embedder="hashing",
                                    partitions=2), spark=spark)
        requests, usages, headers = srv.requests, list(srv.usages), list(srv.headers)

    tr = r.tenants["initech"]
    cost = r.contextualizer_cost
    assert tr.published and tr.documents == 20
    assert cost == {**tr.contextualizer_cost}
    # one request per document (all sample docs have < 32 chunks) plus the two retried ones
    assert cost["documents"] == 20 and cost["passages"] == tr.passages
    assert cost["requests"] == requests == 22 and cost["retries"] == 2
    assert cost["failures"] == cost["fallbacks"] == 0 and cost["estimated_usage"] == 0
    assert cost["input_tokens"] == sum(u[0] for u in usages)
    assert cost["output_tokens"] == sum(u[1] for u in usages)
    assert cost["cost"] == pytest.approx(cost["input_tokens"] / 1000 * 0.5 + cost["output_tokens"] / 1000 * 2.0)
    assert all(h.get("authorization") == "Bearer sk-test" for h in headers)
    assert "sk-test" not in repr(r.model_dump())

    # the per-tenant report carries the account too
    from quarry.core.index import layout

    rep = layout.read_json(layout.join(tr.generation_uri, "report.json"))
    assert rep["contextualizer_cost"]["requests"] == 22

    # context came from the LLM, is indexed, and is never evidence text
    idx = TenantIndex.load(str(root), "initech")
    ctx = [c for sh in idx.shards for c in sh.passages.column("context").to_pylist()]
    assert ctx and all(c.startswith("Chunk ") and " of " in c for c in ctx)
    p = principal_for(sample_docs, "initech")
    from quarry.core.embed.embedders import HashingEmbedder

    res = search(idx, p, "Chunk 1 of", HashingEmbedder(256))
    assert res.excerpts  # the preamble is indexed by the lexical leg ...
    for ex in res.excerpts:  # ... but never delivered as evidence
        assert "Chunk " not in ex.text or ex.text == idx.passage(ex.passage_id, p).text


def test_llm_config_error_fails_the_build_and_publishes_nothing(spark, tmp_path):
    from quarry.core.index import layout
    from quarry.core.ingest.contextualize import LLMSettings
    from quarry.core.ingest.sources import SAMPLE_CORPUS
    from quarry.jobs.build import run_build
    from quarry.jobs.build_settings import BuildSettings

    with FakeLLMServer(status=401) as srv:
        llm = LLMSettings(base_url=srv.base_url, model="nope", backoff_s=0.01, max_retries=1)
        root = tmp_path / "idx"
        with pytest.raises(Exception, match="HTTP 401"):
            run_build(BuildSettings(source=str(SAMPLE_CORPUS), index_root=str(root), tenants=("globex",),
                                    contextualizer="llm", llm=llm, embedder="hashing", partitions=1), spark=spark)
    assert layout.current_generation(str(root), "globex") is None
