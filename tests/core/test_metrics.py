"""Ranking metrics (quarry/core/rank/metrics.py) against hand-computed answers (trec_eval's ndcg_cut)."""

import math

import pytest

from quarry.core.rank.metrics import doc_ranking, mean, ndcg_at_k, recall_at_k

pytestmark = pytest.mark.unit


def test_ndcg_known_answer():
    # DCG = 1/log2(2) + 2/log2(4) = 2; ideal order (2, 1): 2 + 1/log2(3).
    assert ndcg_at_k(["a", "b", "c"], {"a": 1, "c": 2}) == pytest.approx(2 / (2 + 1 / math.log2(3)))
    assert ndcg_at_k(["c", "a"], {"a": 1, "c": 2}) == pytest.approx(1.0)
    assert ndcg_at_k(["x"], {"a": 1}) == 0.0
    assert ndcg_at_k(["a"], {"a": 0}) == 0.0  # no relevant document: 0, never a division by zero
    assert ndcg_at_k(["b", "a"], {"a": 1}, k=1) == 0.0  # the cut-off counts


def test_recall_doc_ranking_and_mean():
    assert recall_at_k(["a", "b", "c"], {"a": 1, "c": 1, "d": 1}, k=2) == pytest.approx(1 / 3)
    assert recall_at_k(["a"], {}) == 0.0
    assert doc_ranking(["d1", "d2", "d1", "d3", "d2"]) == ["d1", "d2", "d3"]  # best passage's rank
    assert mean([1.0, 2.0]) == 1.5 and mean([]) == 0.0
