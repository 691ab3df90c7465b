"""The build's tenant term statistics: merged per tenant on the executors (never a
structure of every tenant's vocabulary on the driver), joined to that tenant's shard tasks,
and identical to core's in-process build, empty shards included."""

from __future__ import annotations

import pandas as pd
import pytest

from helpers.build_job import reference_build


def _passages(tenant: str, texts: list[str]):
    from quarry.core.ingest.chunking import chunk_document
    from quarry.core.records import SourceDocument

    out = []
    for i, t in enumerate(texts):
        doc = SourceDocument(doc_id=f"d{i}", tenant=tenant, text=t, acl=("*",))
        out += chunk_document(doc)[0]
    return out


@pytest.mark.unit
def test_partial_stats_merge_to_the_tenant_wide_stats():
    from quarry.core.index.lexical import TermStats, lexical_text
    from quarry.core.text.tokenizer import tokenize
    from quarry.jobs import stages

    ps = {"a": _passages("a", ["refund window 30 days", "refund E-4471 escalated", "payout cutoff EUR"]),
          "b": _passages("b", ["cutoff cutoff 15:00", "unrelated words here"])}
    rows = [(p.tenant, p.model_dump_json()) for t in ps for p in ps[t]]
    # Two "partitions" that split both tenants; each yields one partial per tenant it saw.
    parts = []
    for chunk in (rows[0::2], rows[1::2]):
        pdf = pd.DataFrame(chunk, columns=["tenant", "passage_json"])
        parts += [r for out in stages.partial_term_stats(iter([pdf[:1], pdf[1:]])) for r in out.itertuples()]
    assert sorted(r.tenant for r in parts) == ["a", "a", "b", "b"]
    for tenant in ("a", "b"):
        mine = pd.DataFrame([{"tenant": r.tenant, "stats": r.stats} for r in parts if r.tenant == tenant])
        merged = next(stages.merge_sorted_term_stats(iter([mine[:1], mine[1:]]))).iloc[0]
        want = TermStats.from_tokens([tokenize(lexical_text(p)) for p in ps[tenant]])
        got = stages.stats_from_bytes(merged["stats"])
        assert got == want and merged["n_docs"] == want.n_docs and merged["terms"] == len(want.df)
        assert merged["total_len"] == want.total_len


@pytest.mark.spark
@pytest.mark.timeout(600)
def test_many_small_tenants_and_empty_shards_equal_in_process_build(spark, tmp_path):
    from quarry.core.embed.embedders import HashingEmbedder
    from quarry.core.index.manifest import read_manifest
    from quarry.core.ingest.contextualize_factory import make_contextualizer
    from quarry.core.ingest.sources import load_documents
    from quarry.eval.synth_tenants import SynthSpec, write_corpus
    from quarry.jobs.build import run_build
    from quarry.jobs.build_settings import BuildSettings

    src = tmp_path / "src"
    write_corpus(SynthSpec(tenants=24, docs_per_tenant=3, large_tenant_docs=11, docs_per_file=25), src)
    root = tmp_path / "idx"
    report = run_build(BuildSettings(source=str(src), index_root=str(root), embedder="hashing",
                                     contextualizer="none", shard_docs=2, partitions=3, quiet=True), spark=spark)
    assert report.published and len(report.tenants) == 25 and report.documents == 24 * 3 + 11
    stats_stage = next(s for s in report.stages if s.name == "stats")
    assert stats_stage.counts["tenants"] == 25
    empty = sorted(t for t in report.tenants if any(i.passages == 0 for i in read_manifest(str(root), t, 1).shards))
    assert empty == ["big"]  # doc-0..doc-10 over 6 shards leave shard 5 empty (shard_of hashes the doc id)
    docs, bad = load_documents(str(src))
    assert not bad
    emb = HashingEmbedder(256)
    for tenant in ["big", "t000000", "t000023"]:
        ref = str(tmp_path / f"ref-{tenant}")
        reference_build(docs, ref, tenant, contextualizer=make_contextualizer("none"), embedder=emb, shard_docs=2)
        job_m, ref_m = read_manifest(str(root), tenant, 1), read_manifest(ref, tenant, 1)
        assert (job_m.bm25.n_docs, job_m.bm25.avgdl) == (ref_m.bm25.n_docs, ref_m.bm25.avgdl)
        assert [(s.shard, s.passages, s.checksums) for s in job_m.shards] == \
               [(s.shard, s.passages, s.checksums) for s in ref_m.shards], tenant


@pytest.mark.unit
def test_wide_stage_partitions_grow_with_the_records():
    from quarry.jobs.build_plan import DOCS_PER_PARTITION, partitions_for

    assert partitions_for(10, base=4) == 4
    assert partitions_for(1_000_000, base=4) == 1_000_000 // DOCS_PER_PARTITION
    assert partitions_for(DOCS_PER_PARTITION * 8 + 1, base=4) == 9


@pytest.mark.spark
def test_documents_spread_over_tasks_and_shards_stay_whole(spark):
    """Tenants reuse doc ids: (tenant, doc_id) partitioning spreads them over every task
    (doc_id alone filled at most 3 of 8 here); (tenant, shard) partitioning keeps each shard
    in one task and spreads a large tenant's shards over several."""
    from pyspark.sql import functions as F

    from quarry.jobs.build_plan import by_tenant_doc, by_tenant_shard

    docs = spark.createDataFrame([(f"t{i}", f"doc-{d}") for i in range(300) for d in range(3)],
                                 "tenant string, doc_id string")
    per_task = by_tenant_doc(docs, 8).groupBy(F.spark_partition_id().alias("p")).count().collect()
    assert len(per_task) == 8 and max(r["count"] for r in per_task) < 900 / 4
    old = docs.repartition(8, "doc_id").groupBy(F.spark_partition_id()).count().collect()
    assert len(old) <= 3

    rows = [("big", s, k) for s in range(8) for k in range(50)] + [(f"t{i}", 0, 0) for i in range(200)]
    passages = by_tenant_shard(spark.createDataFrame(rows, "tenant string, shard int, k int"), 8)
    placed = passages.select("tenant", "shard", F.spark_partition_id().alias("p")).distinct()
    assert placed.groupBy("tenant", "shard").count().filter("count > 1").count() == 0  # a shard is never split
    assert placed.filter("tenant = 'big'").select("p").distinct().count() > 1
    assert placed.filter("tenant != 'big'").groupBy("p").count().filter("count > 1").count() > 0  # tenants share tasks
