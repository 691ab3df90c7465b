"""Ranking metrics over doc ids, as BEIR/pytrec_eval compute them: the promotion gate's
held-out comparison and the eval suite's reports both use these."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence


def ndcg_at_k(ranked: Sequence[str], qrels: Mapping[str, int], k: int = 10) -> float:
    """nDCG@k with linear gains (trec_eval's ndcg_cut); 0 when the query has no relevant doc."""
    ideal = sorted((g for g in qrels.values() if g > 0), reverse=True)[:k]
    if not ideal:
        return 0.0
    dcg = sum(qrels.get(d, 0) / math.log2(i + 2) for i, d in enumerate(ranked[:k]) if qrels.get(d, 0) > 0)
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / idcg


def recall_at_k(ranked: Sequence[str], qrels: Mapping[str, int], k: int = 100) -> float:
    rel = {d for d, g in qrels.items() if g > 0}
    if not rel:
        return 0.0
    return len(rel & set(ranked[:k])) / len(rel)


def doc_ranking(passage_doc_ids: Sequence[str]) -> list[str]:
    """Collapse a passage ranking to documents at their best passage's rank."""
    return list(dict.fromkeys(passage_doc_ids))


def mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0
