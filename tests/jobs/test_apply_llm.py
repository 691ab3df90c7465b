"""Upserts over an LLM-contextualized base use the LLM contextualizer with the endpoint the
base's manifest records (real local Spark, the fake OpenAI-compatible server of
tests/helpers/llm_server.py), with its cost account in the job report; switched off, the
fallback is recorded in the delta's manifest and the report, never silently."""

from __future__ import annotations

import datetime as dt

import pytest

from helpers.llm_server import FakeLLMServer

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(900)]


def _upsert_log(path, doc_id: str, minute: int):
    from quarry.core.changes.log import Change, change_lines
    from quarry.core.records import SourceDocument

    doc = SourceDocument(doc_id=doc_id, tenant="initech", acl=("*",), title="New page",
                         text="# Badge access\n\nBadges are renewed every March by the facilities team.")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(change_lines([Change(op="upsert", tenant="initech", doc_id=doc_id, document=doc,
                                          at=dt.datetime(2026, 3, 1, 0, minute, tzinfo=dt.timezone.utc))]))
    return str(path)


def _delta_contexts(root: str, doc_id: str) -> list[str]:
    from quarry.core.index.shards import TenantIndex

    sh = TenantIndex.load(root, "initech").delta.shard
    return [c for d, c in zip(sh.doc_ids, sh.passages.column("context").to_pylist()) if d == doc_id]


def test_upserts_use_the_bases_recorded_llm_endpoint_and_report_its_cost(spark, tmp_path):
    from quarry.core.index import layout
    from quarry.core.ingest.contextualize import LLMSettings
    from quarry.core.ingest.sources import SAMPLE_CORPUS
    from quarry.jobs.apply_changes import ApplySettings, run_apply
    from quarry.jobs.build import run_build
    from quarry.jobs.build_settings import BuildSettings

    root = str(tmp_path / "idx")
    with FakeLLMServer() as srv:
        llm = LLMSettings(base_url=srv.base_url, model="fake-ctx", backoff_s=0.05, max_retries=1,
                          price_in_per_1k=0.5, price_out_per_1k=2.0)
        run_build(BuildSettings(source=str(SAMPLE_CORPUS), index_root=root, tenants=("initech",), contextualizer="llm",
                                llm=llm, embedder="hashing", partitions=1), spark=spark)
        manifest = layout.read_json(layout.join(root, "initech", "manifest.json"))
        assert manifest["contextualizer"] == "llm" and manifest["contextualizer_llm"]["base_url"] == srv.base_url
        built = srv.requests
        rep = run_apply(ApplySettings(changes=_upsert_log(tmp_path / "c1" / "a.jsonl", "badge-access", 1),
                                      index_root=root, quiet=True, partitions=1), spark=spark)
        calls = srv.requests - built
    tr = rep.tenants["initech"]
    assert tr.applied == 1 and tr.delta == 1
    assert tr.contextualizer == {"kind": "llm", "base": "llm", "fallback": None,
                                 "llm": {"base_url": llm.base_url, "model": "fake-ctx"}}
    cost = tr.contextualizer_cost
    assert cost["kind"] == "llm" and cost["requests"] == calls == 1 and cost["input_tokens"] > 0
    assert cost["cost"] == pytest.approx(cost["input_tokens"] / 1000 * 0.5 + cost["output_tokens"] / 1000 * 2.0)
    ctx = _delta_contexts(root, "badge-access")
    assert ctx and all(c.startswith("Chunk ") for c in ctx)  # the fake server's preambles
    dm = layout.read_json(layout.join(root, "initech", "changes", "delta-1", "manifest.json"))
    assert dm["contextualizer"]["kind"] == "llm"

    # the endpoint switched off for a run: upserts fall back to none, and that is recorded
    rep = run_apply(ApplySettings(changes=_upsert_log(tmp_path / "c2" / "b.jsonl", "badge-renewal", 2),
                                  index_root=root, quiet=True, partitions=1, use_recorded_llm=False), spark=spark)
    tr = rep.tenants["initech"]
    assert tr.applied == 1 and tr.contextualizer["kind"] == "none" and "--no-llm" in tr.contextualizer["fallback"]
    dm = layout.read_json(layout.join(root, "initech", "changes", f"delta-{tr.delta}", "manifest.json"))
    assert dm["contextualizer"]["kind"] == "none" and dm["contextualizer"]["fallback"]
    renewal = _delta_contexts(root, "badge-renewal")
    assert renewal and all(c == "" for c in renewal)
    assert all(c.startswith("Chunk ") for c in _delta_contexts(root, "badge-access"))  # carried, not redone


def test_an_llm_base_without_a_recorded_endpoint_records_the_fallback():
    from quarry.core.changes.delta import upsert_contextualizer
    from quarry.core.index.manifest import IndexManifest

    m = IndexManifest(tenant="t", generation=1, shards=(), counts={"passages": 0, "parents": 0, "documents": 0},
                      contextualizer="llm")
    c = upsert_contextualizer(m)
    assert c.kind == "none" and "records no LLM endpoint" in c.fallback
    from quarry.core.errors import UsageError

    with pytest.raises(UsageError):
        upsert_contextualizer(m, "llm")
    assert upsert_contextualizer(m.model_copy(update={"contextualizer": "extractive"})).fallback is None
