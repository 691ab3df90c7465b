"""The pinned-expectation check behind `quarry eval beir --check`."""

import pytest

from quarry.eval.expected import check, load_expected

pytestmark = pytest.mark.unit


def test_pinned_scifact_file_is_complete():
    exp = load_expected("scifact")
    assert exp is not None and exp["tolerance"] > 0
    assert {"lexical", "dense", "hybrid", "rerank"} <= set(exp["stages"])


def test_check_passes_within_tolerance_and_names_each_drift():
    exp = {"tolerance": 0.005, "split": "test",
           "stages": {"hybrid": {"ndcg@10": 0.7162, "recall@100": 0.951}, "rerank": {"ndcg@10": 0.7401}}}
    ok = {"split": "test", "stages": {"hybrid": {"ndcg@10": 0.7190, "recall@100": 0.949},
                                      "rerank": {"ndcg@10": 0.7380}}}
    assert check(ok, exp) == []
    bad = {"split": "test", "stages": {"hybrid": {"ndcg@10": 0.7010, "recall@100": 0.951}}}
    drifts = check(bad, exp)
    assert drifts == ["hybrid ndcg@10 0.7010 vs pinned 0.7162 (tolerance 0.005)",
                      "rerank: not produced by this run (pinned {'ndcg@10': 0.7401})"]
    assert check({"split": "train", "stages": {}}, exp)[0].startswith("split 'train'")
