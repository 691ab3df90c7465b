"""Second-stage reranking (DESIGN §4 step 5).

A reranker scores (query, candidate) pairs; :func:`apply_rerank` turns scores into the
kept top-k. Candidates reach a reranker as :class:`RerankInput`, small frozen records
(id, title, heading path, chunk text) so a Serve payload never carries arrays.

The cross-encoder implementation lives in ``quarry.core.rank.cross_encoder``; the learned
ranker in ``quarry.core.rank.model`` (features, training: ``ranker_features``, ``ranker_train``). This module is pure Python.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from quarry.core.text.units import count_tokens, heading_text

__all__ = [
    "RerankInput",
    "Reranker",
    "rerank_text",
    "apply_rerank",
    "token_units",
]


@dataclass(frozen=True)
class RerankInput:
    """One candidate as the second stage sees it: ids and text, never arrays."""

    passage_id: str
    title: str
    heading_path: tuple[str, ...]
    text: str


def rerank_text(c: RerankInput) -> str:
    """The passage side of a reranker pair: the heading trail (title + heading path, see
    :func:`quarry.core.text.units.heading_text`), a newline, the chunk (DESIGN §4.5), e.g.
    ``"Refund policy > Exceptions\\nRefunds above $500 need ..."``.
    """
    return "\n".join(p for p in (heading_text(c.title, c.heading_path), c.text.strip()) if p)


@runtime_checkable
class Reranker(Protocol):
    """A second-stage scorer of (query, candidate) pairs.

    Contract:

    - ``score(query, candidates)`` returns exactly one finite float per candidate, in the
      candidates' order. Higher means more relevant. Scores are only comparable within one
      call (one query); they are not probabilities and not calibrated across models.
    - ``score`` never reorders, drops or deduplicates candidates; ordering is the job of
      :func:`apply_rerank`, which every caller uses so the rules live in one place:

      1. sort by score, descending;
      2. ties (equal scores) keep the incoming order, i.e. the fused order of the first
         stage: the sort is stable, so of two equally scored candidates the one with the
         better fused rank comes first;
      3. keep the first ``top_k``; ranks are 1-based;
      4. a NaN score is an error (``ValueError``), never silently ranked first or last.

    - ``name`` identifies the scorer in traces and promotion-gate records.
    """

    name: str

    def score(self, query: str, candidates: Sequence[RerankInput]) -> list[float]: ...


def apply_rerank(scores: Sequence[float], ids: Sequence[str], top_k: int) -> list[tuple[str, float, int]]:
    """Order candidates by reranker score and keep ``top_k``.

    ``ids`` must be in the incoming (fused) order; ``scores[i]`` belongs to ``ids[i]``.
    Returns ``(id, score, rank)`` with 1-based ranks, best first. Sorting is by score
    descending and stable, so ties keep the fused order. Raises ``ValueError`` on a NaN
    score, mismatched lengths, duplicate ids or a negative ``top_k``.
    """
    if len(scores) != len(ids):
        raise ValueError(f"got {len(scores)} scores for {len(ids)} ids")
    if top_k < 0:
        raise ValueError(f"top_k must be >= 0, got {top_k}")
    if len(set(ids)) != len(ids):
        raise ValueError("candidate ids must be unique")
    vals = [float(s) for s in scores]
    bad = [ids[i] for i, v in enumerate(vals) if math.isnan(v)]
    if bad:
        raise ValueError(f"NaN reranker score for {len(bad)} candidate(s), e.g. {bad[0]!r}")
    order = sorted(range(len(vals)), key=lambda i: -vals[i])  # sorted() is stable
    return [(ids[i], vals[i], r) for r, i in enumerate(order[:top_k], start=1)]


def token_units(candidates: Sequence[RerankInput | str], max_length: int) -> int:
    """Reranker work for one call: the sum over candidates of ``min(tokens, max_length)``.

    Tokens are counted cheaply (:func:`quarry.core.text.units.count_tokens`) on the passage side
    of the pair (:func:`rerank_text`). This is the funnel economics unit of the seed:
    candidates x tokens per candidate. A subword tokenizer yields somewhat more tokens, so
    this slightly under-counts long passages' real tokens but never exceeds the cap.
    """
    if max_length < 1:
        raise ValueError(f"max_length must be >= 1, got {max_length}")
    total = 0
    for c in candidates:
        text = c if isinstance(c, str) else rerank_text(c)
        total += min(count_tokens(text), max_length)
    return total
