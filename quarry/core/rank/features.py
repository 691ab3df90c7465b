"""Features of the learned second stage: one row per candidate, computed **only** from what
the second stage is handed: the query, the fused candidate list (which already passed the
principal's filter) and each candidate's own passage. The ranker never touches the index,
other candidates' hidden rows, or another tenant: :func:`candidate_features` takes no index
argument.

Features (one row per candidate; ``FEATURES`` lists the names in column order):

- ``lex_score``, ``lex_rank``, ``lex_missing``: the lexical leg's BM25 score and 1-based rank,
  or sentinels (score 0, rank :data:`MISSING_RANK`) plus an indicator when the leg missed it;
  ``lex_score_rel``: score / the best lexical score in the list (0 when missing).
- ``dense_score``, ``dense_rank``, ``dense_missing``, ``dense_score_rel``: the same for the
  dense leg (missing score sentinel -1; rel = score minus the best dense score in the list).
- ``fused_rank``, ``fused_score``: the RRF rank and score.
- ``ident_query``, ``ident_match``: whether the query holds identifiers
  (:func:`quarry.core.text.units.is_identifier`: ``E-4471``, ``reconcile_settlement``, ``v2.3.1``,
  ``INC2291``) and the fraction of them found literally (case-insensitive) in the passage's
  title, headings or text.
- ``title_overlap``: fraction of the query's tokens (:func:`quarry.core.text.tokenizer.tokenize`)
  present in the title + heading path.
- ``coverage``: fraction of the query's distinct tokens present in the passage
  (title + headings + text); ``proximity``: for two or more matched terms, matched terms /
  the shortest token window holding all of them (1 = adjacent), else 0.
- ``sent_max_sim``, ``sent_max_sim_rel``, ``title_sim`` (optional, ``sentence=True``): the
  max cosine between the query and the passage's sentences
  (:func:`quarry.core.text.units.split_sentences`) under the packaged MiniLM embedder, that
  value minus the best in the list, and the cosine to the title + heading path.
- ``doc_hits``: how many candidates in the list come from the same document.
- ``length``: the passage's token count; ``authority``: its authority rank.
- ``age_days``, ``age_missing``: days from effective_from (else published_at) to the
  reference date, or 0 plus an indicator when the passage has neither date.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Sequence

import numpy as np

from quarry.core.lru import LRU
from quarry.core.records import Candidate, Passage
from quarry.core.rank.sentence_vectors import SentenceVectors
from quarry.core.text.units import heading_text, identifiers_in
from quarry.core.text.tokenizer import tokenize

__all__ = ["BASE_FEATURES", "SENTENCE_FEATURES", "FEATURES", "MISSING_RANK", "candidate_features"]

MISSING_RANK = 1000  # rank sentinel for a leg that did not return the candidate

BASE_FEATURES: tuple[str, ...] = (
    "lex_score", "lex_rank", "lex_missing", "lex_score_rel",
    "dense_score", "dense_rank", "dense_missing", "dense_score_rel",
    "fused_rank", "fused_score",
    "ident_query", "ident_match", "title_overlap", "coverage", "proximity",
    "doc_hits", "length", "authority", "age_days", "age_missing",
)
SENTENCE_FEATURES: tuple[str, ...] = ("sent_max_sim", "sent_max_sim_rel", "title_sim")
FEATURES: tuple[str, ...] = BASE_FEATURES + SENTENCE_FEATURES


def _proximity(q: set[str], toks: Sequence[str]) -> float:
    """Matched terms / shortest window (in token positions) holding every matched term."""
    matched = q.intersection(toks)
    need = len(matched)
    if need < 2:
        return 0.0
    counts: dict[str, int] = {}
    have, left, best = 0, 0, math.inf
    for right, t in enumerate(toks):
        if t in matched:
            counts[t] = counts.get(t, 0) + 1
            if counts[t] == 1:
                have += 1
        while have == need:
            best = min(best, right - left + 1)
            lt = toks[left]
            if lt in matched:
                counts[lt] -= 1
                if counts[lt] == 0:
                    have -= 1
            left += 1
    return need / best if best < math.inf else 0.0


_TERMS: LRU[tuple[str, str, str, str], tuple[frozenset[str], list[str], str]] = LRU(100_000)


def _passage_terms(p: Passage) -> tuple[frozenset[str], list[str], str]:
    """(heading tokens, body tokens, lower-cased body) of a passage, memoised by its tenant,
    id and text: the same passage recurs across queries."""
    head = heading_text(p.envelope.title, p.heading_path)
    key = (p.tenant, p.passage_id, head, p.text)
    hit = _TERMS.get(key)
    if hit is None:
        body = "\n".join(s for s in (head, p.text) if s)
        hit = (frozenset(tokenize(head)), tokenize(body), body.lower())
        _TERMS.put(key, hit)
    return hit


def forget_terms(tenant: str | None = None) -> int:
    """Drop the memoised terms of ``tenant``'s passages (every tenant's when None); returns
    how many (a purge: no copy of the tenant's text stays in memory)."""
    gone = [k for k, _ in _TERMS.items() if tenant is None or k[0] == tenant]
    for k in gone:
        _TERMS.pop(k)
    return len(gone)


def _age(p: Passage, reference_date: dt.date | None) -> float | None:
    e = p.envelope
    d = e.effective_from or e.published_at
    if d is None or reference_date is None:
        return None
    return float((reference_date - d).days)



def candidate_features(
    query: str,
    candidates: Sequence[Candidate],
    passages: Sequence[Passage],
    *,
    sentence: SentenceVectors | None = None,
    reference_date: dt.date | None = None,
) -> np.ndarray:
    """The feature matrix (len(candidates) x n_features) for one query.

    Inputs are exactly the second stage's: the query, the candidates (already filtered
    for the principal) and their passages, aligned by position. Columns follow
    ``BASE_FEATURES`` then, when ``sentence`` is given, ``SENTENCE_FEATURES``.
    """
    if len(candidates) != len(passages):
        raise ValueError(f"{len(candidates)} candidates but {len(passages)} passages")
    for c, p in zip(candidates, passages):
        if c.passage_id != p.passage_id:
            raise ValueError(f"candidate {c.passage_id!r} is not aligned with passage {p.passage_id!r}")
    n = len(candidates)
    width = len(BASE_FEATURES) + (len(SENTENCE_FEATURES) if sentence is not None else 0)
    X = np.zeros((n, width), dtype=np.float64)
    if n == 0:
        return X
    qtoks = tokenize(query)
    qset = set(qtoks)
    idents = identifiers_in(query)
    lex_best = max((c.lexical_score for c in candidates if c.lexical_score is not None), default=0.0)
    den_best = max((c.dense_score for c in candidates if c.dense_score is not None), default=0.0)
    doc_count: dict[str, int] = {}
    for c in candidates:
        doc_count[c.doc_id] = doc_count.get(c.doc_id, 0) + 1
    for i, (c, p) in enumerate(zip(candidates, passages)):
        htoks, btoks, lower = _passage_terms(p)
        lex_missing = c.lexical_rank is None
        den_missing = c.dense_rank is None
        age = _age(p, reference_date)
        X[i, :len(BASE_FEATURES)] = (
            0.0 if lex_missing else float(c.lexical_score or 0.0),
            float(MISSING_RANK if lex_missing else c.lexical_rank),
            float(lex_missing),
            0.0 if lex_missing or lex_best <= 0 else float(c.lexical_score or 0.0) / lex_best,
            -1.0 if den_missing else float(c.dense_score or 0.0),
            float(MISSING_RANK if den_missing else c.dense_rank),
            float(den_missing),
            -1.0 if den_missing else float(c.dense_score or 0.0) - den_best,
            float(c.fused_rank),
            float(c.fused_score),
            float(bool(idents)),
            (sum(1 for t in idents if t in lower) / len(idents)) if idents else 0.0,
            (sum(1 for t in qtoks if t in htoks) / len(qtoks)) if qtoks else 0.0,
            (len(qset.intersection(btoks)) / len(qset)) if qset else 0.0,
            _proximity(qset, btoks),
            float(doc_count[c.doc_id]),
            float(p.token_count),
            float(p.envelope.authority_rank),
            0.0 if age is None else age,
            float(age is None),
        )
    if sentence is not None:
        smax, tsim = sentence.similarities(query, passages)
        best = max(smax)
        k = len(BASE_FEATURES)
        X[:, k] = smax
        X[:, k + 1] = [s - best for s in smax]
        X[:, k + 2] = tsim
    return X
