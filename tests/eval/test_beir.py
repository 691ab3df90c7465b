"""The BEIR runner on a small slice of SciFact: JSON shape, Spark and in-process builds
agree, reuse of a cached index, and the train split is never the test split."""

from __future__ import annotations

import json

import pytest

from quarry.core.embed.embedders import HashingEmbedder
from quarry.eval import beir

pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.fixture(scope="module")
def tiny_beir(tmp_path_factory, scifact_dir):
    """The first 40 test queries and a 300-doc corpus holding their relevant documents."""
    out = tmp_path_factory.mktemp("tiny-scifact")
    qrels = [line.rstrip("\n").split("\t") for line in (scifact_dir / "qrels" / "test.tsv").open()][1:]
    qids = list(dict.fromkeys(q for q, _, _ in qrels))[:40]
    rel = {d for q, d, _ in qrels if q in qids}
    rows = [json.loads(line) for line in (scifact_dir / "corpus.jsonl").open()]
    keep = [r for r in rows if r["_id"] in rel] + [r for r in rows if r["_id"] not in rel][: 300 - len(rel)]
    (out / "corpus.jsonl").write_text("".join(json.dumps(r) + "\n" for r in keep))
    queries = [json.loads(line) for line in (scifact_dir / "queries.jsonl").open()]
    (out / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries if q["_id"] in qids))
    (out / "qrels").mkdir()
    (out / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(
        f"{q}\t{d}\t{s}\n" for q, d, s in qrels if q in qids))
    return out


def test_eval_json_through_the_spark_job_matches_in_process(tiny_beir, tmp_path, spark):
    emb = HashingEmbedder()
    via_spark = beir.evaluate(tiny_beir, str(tmp_path / "a"), embedder=emb, build="spark")
    in_proc = beir.evaluate(tiny_beir, str(tmp_path / "b"), embedder=emb, build="in-process")
    assert via_spark["queries"] == 40
    for stage in ("lexical", "dense", "hybrid"):
        assert set(via_spark["stages"][stage]) == {"ndcg@10", "recall@100"}
        assert via_spark["stages"][stage] == in_proc["stages"][stage]
    t = via_spark["throughput"]
    assert t["lexical_qps"] > 0 and t["raw_bm25s_qps"] > 0
    # The lexical leg alone on a relevant-rich slice finds most relevant documents.
    assert via_spark["stages"]["lexical"]["recall@100"] > 0.8
    again = beir.evaluate(tiny_beir, str(tmp_path / "a"), embedder=emb, build="spark")
    assert again["generation"] == via_spark["generation"]  # cached index reused, not rebuilt


def test_train_split_must_not_be_test(tiny_beir, tmp_path):
    with pytest.raises(ValueError, match="test"):
        beir.train_second_stage(None, tiny_beir, "test", HashingEmbedder())
