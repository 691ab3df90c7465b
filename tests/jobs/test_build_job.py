"""The PySpark build job in local mode (the session-wide ``spark`` fixture): accounting with
malformed records, equality with core's in-process build, context never cited, re-runs."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from helpers.build_job import (
    assert_excerpts_are_evidence,
    compare_indexes,
    passage_ids,
    principal_for,
    reference_build,
    write_jsonl,
)

from quarry.core.index.manifest import read_manifest

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]

SAMPLE_QUERIES = [
    "refund window", "refund_window_expired", "settlement cutoff EUR", "incident severity paging",
    "who approves payout limits", "rollback the deployment", "access review", "E-4471",
]


def _settings(source, root, **kw):
    from quarry.jobs.build_settings import BuildSettings

    kw.setdefault("embedder", "hashing")
    kw.setdefault("quiet", False)
    kw.setdefault("partitions", 2)
    return BuildSettings(source=str(source), index_root=str(root), **kw)


@pytest.fixture(scope="module")
def sample_build(spark, tmp_path_factory):
    """The sample corpus built once by the job, sharded (shard_docs=8 -> several shards)."""
    from quarry.core.ingest.sources import SAMPLE_CORPUS
    from quarry.jobs.build import run_build

    root = tmp_path_factory.mktemp("job-sample") / "idx"
    report = run_build(_settings(SAMPLE_CORPUS, root, shard_docs=8), spark=spark)
    return root, report


def test_sample_corpus_equals_in_process_build(sample_build, sample_docs, tmp_path):
    from quarry.core.ingest.contextualize_extractive import ExtractiveContextualizer
    from quarry.core.embed.embedders import HashingEmbedder
    from quarry.core.index.shards import TenantIndex

    root, report = sample_build
    emb = HashingEmbedder(256)
    assert report.published and set(report.tenants) == {"acme", "globex", "initech"}
    compared = 0
    for tenant, tr in report.tenants.items():
        n_docs = sum(d.tenant == tenant for d in sample_docs)
        assert tr.documents == n_docs and tr.quarantined == 0 and tr.input_records == n_docs
        assert tr.shards == math.ceil(n_docs / 8) > 1
        ref_root = str(tmp_path / "ref")
        reference_build(sample_docs, ref_root, tenant, contextualizer=ExtractiveContextualizer(), embedder=emb,
                        shard_docs=8)
        job, ref = TenantIndex.load(str(root), tenant), TenantIndex.load(ref_root, tenant)
        assert passage_ids(str(root), tenant) == passage_ids(ref_root, tenant)
        assert len(job) == tr.passages
        # Same shards, same rows: the shard files themselves are identical.
        for a, b in zip(job.manifest.shards, ref.manifest.shards):
            assert a.shard == b.shard and a.passages == b.passages
            assert a.checksums == b.checksums, (tenant, a.shard)
        compared += compare_indexes(job, ref, principal_for(sample_docs, tenant), SAMPLE_QUERIES, emb)
    assert compared > 20


def test_context_is_indexed_but_never_evidence(sample_build, sample_docs):
    from quarry.core.embed.embedders import HashingEmbedder
    from quarry.core.index.shards import TenantIndex

    root, _ = sample_build
    emb = HashingEmbedder(256)
    n = 0
    for tenant in ("acme", "globex", "initech"):
        idx = TenantIndex.load(str(root), tenant)
        for sh in idx.shards:
            ctx = sh.passages.column("context").to_pylist()
            assert all(c.startswith("From ") for c in ctx)  # the extractive preamble
        n += assert_excerpts_are_evidence(idx, principal_for(sample_docs, tenant), SAMPLE_QUERIES, emb)
    assert n > 20


def test_report_files_and_stage_timings(sample_build):
    from quarry.core.index import layout

    root, report = sample_build
    names = [s.name for s in report.stages]
    assert names == ["read", "validate", "quarantine", "chunk", "contextualize", "embed", "stats", "build",
                     "manifest", "publish"]
    assert report.embed["max_model_loads_per_worker"] == 1
    assert report.peak_driver_rss_mb > 0 and report.docs_per_s > 0
    for tenant, tr in report.tenants.items():
        rep = layout.read_json(layout.join(tr.generation_uri, "report.json"))
        assert rep["accounting"]["ok"] and rep["passages"] == tr.passages and rep["tokens_embedded"] > 0
        assert set(rep["stage_seconds"]) >= {"read", "embed", "build"}
        man = read_manifest(str(root), tenant, tr.generation)
        assert man.report["documents"] == tr.documents and man.counts.passages == tr.passages
    run = json.loads((Path(root) / "_runs" / f"{report.run_id}.json").read_text())
    assert run["documents"] == 71  # the sample corpus (quarry/sample_corpus/README.md)


MALFORMED = [
    # a: 3 good, 1 empty acl, 1 bad dates, 1 duplicate of a-1 (the first occurrence wins)
    '{"doc_id": "a-1", "tenant": "a", "title": "Alpha one", "text": "Alpha refund window is 120 days.", "acl": ["*"]}',
    '{"doc_id": "a-2", "tenant": "a", "text": "Alpha settlement cutoff is 16:00 CET.", "acl": ["ops"]}',
    '{"doc_id": "a-3", "tenant": "a", "text": "Alpha payout limit is EUR 50k.", "acl": ["*"], "doc_type": "policy"}',
    '{"doc_id": "a-4", "tenant": "a", "text": "No readers.", "acl": []}',
    '{"doc_id": "a-5", "tenant": "a", "text": "Backwards dates.", "acl": ["*"], '
    '"effective_from": "2026-02-01", "effective_to": "2026-01-01"}',
    '{"doc_id": "a-1", "tenant": "a", "text": "A duplicate of a-1.", "acl": ["*"]}',
    # b: 2 good, 1 blank text
    '{"doc_id": "b-1", "tenant": "b", "text": "Beta incident paging policy.", "acl": ["*"]}',
    '{"doc_id": "b-2", "tenant": "b", "text": "Beta rollback runbook: revert the deploy.", "acl": ["sre"]}',
    '{"doc_id": "b-3", "tenant": "b", "text": "   ", "acl": ["*"]}',
    # _unknown: bad JSON line, missing tenant, unparseable tenant
    '{"doc_id": "x-1", "tenant": "a", "text": "truncated',
    '{"doc_id": "x-2", "text": "No tenant at all.", "acl": ["*"]}',
    '{"doc_id": "x-3", "tenant": "Not A Slug", "text": "Bad tenant.", "acl": ["*"]}',
]


def test_accounting_with_malformed_records(spark, tmp_path):
    from quarry.jobs.build import run_build

    src = write_jsonl(tmp_path / "src" / "corpus.jsonl", MALFORMED)
    root = tmp_path / "idx"
    r = run_build(_settings(src, root), spark=spark)
    got = {t: (tr.input_records, tr.documents, tr.quarantined) for t, tr in r.tenants.items()}
    assert got == {"a": (6, 3, 3), "b": (3, 2, 1), "_unknown": (3, 0, 3)}
    assert all(tr.accounted for tr in r.tenants.values())
    assert r.input_records == len(MALFORMED) == r.documents + r.quarantined
    assert r.tenants["a"].published and r.tenants["b"].published and not r.tenants["_unknown"].published
    q = [json.loads(line) for f in sorted(Path(r.quarantine_uri).glob("part-*.jsonl"))
         for line in f.read_text().splitlines()]
    assert len(q) == 7 and Path(r.quarantine_uri).parent.name == "_quarantine"
    by_id = {(x["tenant"], x["record_id"]): x["reason"] for x in q}
    assert by_id[("a", "a-4")].startswith("acl:")
    assert "effective_to is before effective_from" in by_id[("a", "a-5")]
    assert by_id[("a", "a-1@1")] == "duplicate"
    assert by_id[("b", "b-3")].startswith("text:")
    by_src = {x["source"].rsplit(":", 1)[1]: x for x in q}
    assert by_src["10"]["reason"].startswith("json:") and by_src["10"]["record_id"] is None  # unparseable line
    assert by_id[("_unknown", "x-2")].startswith("tenant:")
    assert by_id[("_unknown", "x-3")].startswith("tenant:")
    assert all(x["source"].startswith(str(src)) for x in q)
    # the duplicate lost: a-1's text is the first occurrence's
    assert "a-1@1#top.1" in passage_ids(str(root), "a")
    from quarry.core.index.shards import TenantIndex
    from quarry.core.records import Principal

    idx = TenantIndex.load(str(root), "a")
    assert idx.passage("a-1@1#top.1", Principal(tenant="a", subject="s")).text.startswith("Alpha refund")

    # --tenants filters; the rest is reported as filtered out; unknown names are an error
    r2 = run_build(_settings(src, tmp_path / "idx2", tenants=("b",)), spark=spark)
    assert set(r2.tenants) == {"b", "_unknown"} and r2.filtered_out == 6 and r2.input_records == 6
    from quarry.core.errors import UsageError

    with pytest.raises(UsageError, match="not in the source: zzz; tenants found: a, b"):
        run_build(_settings(src, tmp_path / "idx3", tenants=("b", "zzz")), spark=spark)


def test_rerun_same_input_same_ids_and_results(spark, tmp_path, sample_docs):
    from quarry.core.embed.embedders import HashingEmbedder
    from quarry.core.index.shards import TenantIndex
    from quarry.core.ingest.sources import SAMPLE_CORPUS
    from quarry.jobs.build import run_build

    root = tmp_path / "idx"
    s = _settings(SAMPLE_CORPUS, root, tenants=("globex",), shard_docs=10)
    r1 = run_build(s, spark=spark)
    ids1 = passage_ids(str(root), "globex")
    r2 = run_build(s, spark=spark)
    assert (r1.tenants["globex"].generation, r2.tenants["globex"].generation) == (1, 2)
    assert passage_ids(str(root), "globex") == ids1
    a = TenantIndex.load(str(root), "globex", generation=1)
    b = TenantIndex.load(str(root), "globex", generation=2)
    assert compare_indexes(a, b, principal_for(sample_docs, "globex"), SAMPLE_QUERIES, HashingEmbedder(256)) > 0


@pytest.mark.slow
def test_scifact_slice_equals_in_process_build(spark, scifact_dir, tmp_path):
    from quarry.core.ingest.contextualize_extractive import ExtractiveContextualizer
    from quarry.core.embed.embedders import HashingEmbedder
    from quarry.core.index.shards import TenantIndex
    from quarry.core.ingest.sources import load_beir_corpus, load_beir_queries
    from quarry.core.ingest.sources import write_source_jsonl
    from quarry.jobs.build import run_build

    docs = load_beir_corpus(scifact_dir, tenant="scifact", limit=300)
    src = write_source_jsonl(docs, tmp_path / "scifact.jsonl")
    root = tmp_path / "idx"
    r = run_build(_settings(src, root, shard_docs=100, partitions=4), spark=spark)
    tr = r.tenants["scifact"]
    assert (tr.input_records, tr.documents, tr.quarantined, tr.shards) == (300, 300, 0, 3)
    emb = HashingEmbedder(256)
    reference_build(docs, str(tmp_path / "ref"), "scifact", contextualizer=ExtractiveContextualizer(),
                    embedder=emb, shard_docs=100)
    job, ref = TenantIndex.load(str(root), "scifact"), TenantIndex.load(str(tmp_path / "ref"), "scifact")
    assert passage_ids(str(root), "scifact") == passage_ids(str(tmp_path / "ref"), "scifact")
    queries = list(load_beir_queries(scifact_dir).values())[:25]
    p = principal_for(docs, "scifact")
    assert compare_indexes(job, ref, p, queries, emb) > 50
    assert assert_excerpts_are_evidence(job, p, queries[:10], emb) > 0


@pytest.mark.slow
def test_minilm_in_spark_matches_plain_process(spark, scifact_dir, tmp_path):
    """The real packaged MiniLM inside Spark workers vs. in this process (small slice)."""
    from quarry.core.ingest.contextualize_extractive import ExtractiveContextualizer
    from quarry.core.embed.embedders import SentenceTransformerEmbedder
    from quarry.core.index.shards import TenantIndex
    from quarry.core.ingest.sources import load_beir_corpus, load_beir_queries
    from quarry.core.ingest.sources import write_source_jsonl
    from quarry.jobs.build import run_build

    docs = load_beir_corpus(scifact_dir, tenant="sf", limit=40)
    src = write_source_jsonl(docs, tmp_path / "sf.jsonl")
    r = run_build(_settings(src, tmp_path / "idx", embedder="default", batch_size=16), spark=spark)
    assert r.embed["max_model_loads_per_worker"] == 1 and r.embedder["dim"] == 384
    emb = SentenceTransformerEmbedder(batch_size=16)
    reference_build(docs, str(tmp_path / "ref"), "sf", contextualizer=ExtractiveContextualizer(), embedder=emb,
                    shard_docs=50_000)
    job, ref = TenantIndex.load(str(tmp_path / "idx"), "sf"), TenantIndex.load(str(tmp_path / "ref"), "sf")
    queries = list(load_beir_queries(scifact_dir).values())[:10]
    # batch composition differs between Spark and one process: scores agree to float noise
    assert compare_indexes(job, ref, principal_for(docs, "sf"), queries, emb, exact=False) > 0


def test_cli_bad_paths_exit_2(tmp_path, capsys):
    from quarry.cli import main as quarry_main

    def main(argv):
        return quarry_main(["build", *argv])

    assert main(["--source", str(tmp_path / "nope"), "--index-root", str(tmp_path / "idx")]) == 2
    assert "no such file or directory" in capsys.readouterr().err
    f = tmp_path / "file"
    f.write_text("x")
    (tmp_path / "src").mkdir()
    assert main(["--source", str(tmp_path / "src"), "--index-root", str(f)]) == 2
    assert "not a directory" in capsys.readouterr().err
    assert main(["--source", str(f), "--index-root", str(tmp_path / "idx")]) == 2
    assert "unsupported source format" in capsys.readouterr().err
    assert main(["--source", str(tmp_path / "src"), "--index-root", str(tmp_path / "i"), "--contextualizer", "llm"]) == 2
    assert "--llm-url" in capsys.readouterr().err
