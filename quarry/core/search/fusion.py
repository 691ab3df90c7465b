"""Reciprocal rank fusion (Cormack, Clarke & Buettcher, SIGIR 2009), the one place it lives."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TypeVar

K = TypeVar("K", bound=Hashable)


def rrf(
    ranked_lists: Sequence[Sequence[K]],
    k: int = 60,
    weights: Sequence[float] | None = None,
) -> list[tuple[K, float]]:
    """Fuse ranked lists by summing ``weight / (k + rank)`` over every list holding an id.

    Ranks are 1-based. A duplicate inside one list votes once, at its best rank. Ties break
    deterministically: by best rank in any list, then by the id itself. Raw scores are
    never compared, which is the point: BM25 and cosine live on different scales.
    """
    if k < 0:
        raise ValueError(f"rrf k must be >= 0, got {k}")
    if weights is None:
        weights = [1.0] * len(ranked_lists)
    if len(weights) != len(ranked_lists):
        raise ValueError(f"got {len(weights)} weights for {len(ranked_lists)} ranked lists")
    scores: dict[K, float] = {}
    best: dict[K, int] = {}
    for ranked, w in zip(ranked_lists, weights):
        for rank, key in enumerate(dict.fromkeys(ranked), start=1):
            scores[key] = scores.get(key, 0.0) + w / (k + rank)
            best[key] = min(best.get(key, rank), rank)
    return sorted(scores.items(), key=lambda kv: (-kv[1], best[kv[0]], kv[0]))
