"""A learned second stage (DESIGN §4 step 5, §8): LightGBM LambdaRank over cheap features.

Features are computed for each candidate **only** from what the second stage is handed:
the query, the fused candidate list (which already passed the principal's filter) and each
candidate's own passage. The ranker never touches the index, other candidates' hidden
rows, or another tenant: :func:`candidate_features` takes no index argument.

Features (one row per candidate; ``FEATURES`` lists the names in column order):

- ``lex_score``, ``lex_rank``, ``lex_missing``: the lexical leg's BM25 score and 1-based rank,
  or sentinels (score 0, rank :data:`MISSING_RANK`) plus an indicator when the leg missed it;
  ``lex_score_rel``: score / the best lexical score in the list (0 when missing).
- ``dense_score``, ``dense_rank``, ``dense_missing``, ``dense_score_rel``: the same for the
  dense leg (missing score sentinel -1; rel = score minus the best dense score in the list).
- ``fused_rank``, ``fused_score``: the RRF rank and score.
- ``ident_query``, ``ident_match``: whether the query holds identifier tokens (``E-4471``,
  ``reconcile_settlement``, ``v2.3.1``, letter+digit codes) and the fraction of them found
  literally (case-insensitive) in the passage's title, headings or text.
- ``title_overlap``: fraction of the query's tokens (:func:`quarry.core.tokenizer.tokenize`)
  present in the title + heading path.
- ``coverage``: fraction of the query's distinct tokens present in the passage
  (title + headings + text); ``proximity``: for two or more matched terms, matched terms /
  the shortest token window holding all of them (1 = adjacent), else 0.
- ``sent_max_sim``, ``sent_max_sim_rel``, ``title_sim`` (optional, ``sentence=True``): the
  max cosine between the query and the passage's sentences
  (:func:`quarry.core.chunking.split_sentences`) under the packaged MiniLM embedder, that
  value minus the best in the list, and the cosine to the title + heading path.
- ``doc_hits``: how many candidates in the list come from the same document.
- ``length``: the passage's token count; ``authority``: its authority rank.
- ``age_days``, ``age_missing``: days from effective_from (else published_at) to the
  reference date, or 0 plus an indicator when the passage has neither date.

Sentence vectors are the expensive part; :class:`SentenceVectors` caches them by passage id
(in memory, and in an ``.npz`` file persisted beside the model, keyed by generation).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
import random
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from quarry.core.gate import DEFAULT_MARGIN, GateDecision, evaluate_gate
from quarry.core.records import Candidate, Passage, SearchRequest
from quarry.core.rerank import apply_rerank
from quarry.core.search import first_stage
from quarry.core.text import heading_text, split_sentences
from quarry.core.tokenizer import identifiers, tokenize

if TYPE_CHECKING:  # pragma: no cover
    from quarry.core.embedding import Embedder
    from quarry.core.index import TenantIndex
    from quarry.core.records import Principal
    from quarry.core.search import SearchSettings, SecondStage

__all__ = [
    "FEATURES",
    "BASE_FEATURES",
    "SENTENCE_FEATURES",
    "MISSING_RANK",
    "RANKER_VERSION",
    "SentenceVectors",
    "LearnedRanker",
    "candidate_features",
    "label_candidates",
    "mine_candidates",
    "split_queries",
    "doc_ndcg",
    "train_and_gate",
    "train_and_evaluate",
]

RANKER_VERSION = "learned-1"
MISSING_RANK = 1000  # rank sentinel for a leg that did not return the candidate
SENTENCE_CAP = 64  # sentences per passage embedded for the sentence feature

BASE_FEATURES: tuple[str, ...] = (
    "lex_score", "lex_rank", "lex_missing", "lex_score_rel",
    "dense_score", "dense_rank", "dense_missing", "dense_score_rel",
    "fused_rank", "fused_score",
    "ident_query", "ident_match", "title_overlap", "coverage", "proximity",
    "doc_hits", "length", "authority", "age_days", "age_missing",
)
SENTENCE_FEATURES: tuple[str, ...] = ("sent_max_sim", "sent_max_sim_rel", "title_sim")
FEATURES: tuple[str, ...] = BASE_FEATURES + SENTENCE_FEATURES

def _head(p: Passage) -> str:
    return heading_text(p.envelope.title, p.heading_path)


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


_TERMS: OrderedDict[tuple[str, str, str], tuple[frozenset[str], list[str], str]] = OrderedDict()
_TERMS_MAX = 100_000
_TERMS_LOCK = threading.Lock()


def _passage_terms(p: Passage) -> tuple[frozenset[str], list[str], str]:
    """(heading tokens, body tokens, lower-cased body) of a passage, memoised by its id and
    text: the same passage recurs across queries."""
    head = _head(p)
    key = (p.passage_id, head, p.text)
    hit = _TERMS.get(key)
    if hit is None:
        body = "\n".join(s for s in (head, p.text) if s)
        hit = (frozenset(tokenize(head)), tokenize(body), body.lower())
        with _TERMS_LOCK:
            _TERMS[key] = hit
            while len(_TERMS) > _TERMS_MAX:
                _TERMS.popitem(last=False)
    return hit


def _age(p: Passage, reference_date: dt.date | None) -> float | None:
    e = p.envelope
    d = e.effective_from or e.published_at
    if d is None or reference_date is None:
        return None
    return float((reference_date - d).days)


# ----------------------------------------------------------------------------- sentence vectors


class SentenceVectors:
    """Sentence vectors per passage, cached by passage id.

    For each passage the units are its title + heading path (unit 0, possibly empty) and
    up to :data:`SENTENCE_CAP` sentences of its text. Vectors are L2-normalised, so a dot
    product is a cosine. ``save``/``load`` persist the cache as one ``.npz`` (ids, offsets,
    a title flag and the stacked vectors); a cache belongs to one generation's passages and
    one embedder (its name is stored and checked on load).
    """

    def __init__(self, embedder: "Embedder", max_queries: int = 4096, max_passages: int | None = None):
        self.embedder = embedder
        self._vecs: dict[str, tuple[np.ndarray | None, np.ndarray]] = {}  # id -> (title vec, sentence vecs)
        self._queries: OrderedDict[str, np.ndarray] = OrderedDict()
        self._max_queries = max_queries
        self._max_passages = max_passages  # None: unbounded (training); serving bounds it
        self._lock = threading.Lock()
        self.encoded_units = 0  # units embedded by this object (cache misses), for reports

    def __len__(self) -> int:
        return len(self._vecs)

    def __contains__(self, passage_id: str) -> bool:
        return passage_id in self._vecs

    @staticmethod
    def units(p: Passage) -> tuple[str, list[str]]:
        sents = [s for s in split_sentences(p.text) if s.strip()][:SENTENCE_CAP]
        if not sents:
            sents = [p.text.strip() or p.passage_id]
        return _head(p), sents

    def ensure(self, passages: Iterable[Passage], batch: int = 4096) -> None:
        """Embed every passage not in the cache (in batches of units)."""
        todo: dict[str, Passage] = {}
        for p in passages:
            if p.passage_id not in self._vecs and p.passage_id not in todo:
                todo[p.passage_id] = p
        if not todo:
            return
        items = list(todo.values())
        for start in range(0, len(items), max(1, batch // 10)):
            chunk = items[start : start + max(1, batch // 10)]
            texts: list[str] = []
            spans = []
            for p in chunk:
                head, sents = self.units(p)
                t0 = len(texts)
                if head:
                    texts.append(head)
                texts.extend(sents)
                spans.append((p.passage_id, bool(head), t0, len(texts)))
            vecs = np.asarray(self.embedder.encode(texts), dtype=np.float32)
            self.encoded_units += len(texts)
            with self._lock:
                for pid, has_head, a, b in spans:
                    tv = vecs[a] if has_head else None
                    self._vecs[pid] = (tv, vecs[a + 1 if has_head else a : b])
                self._evict()

    def _evict(self) -> None:
        if self._max_passages is not None:
            while len(self._vecs) > self._max_passages:  # oldest inserted first
                self._vecs.pop(next(iter(self._vecs)))

    def query(self, query: str) -> np.ndarray:
        v = self._queries.get(query)
        if v is None:
            v = np.asarray(self.embedder.encode([query])[0], dtype=np.float32)
            with self._lock:
                self._queries[query] = v
                while len(self._queries) > self._max_queries:
                    self._queries.popitem(last=False)
        return v

    def set_query_vectors(self, queries: Mapping[str, np.ndarray]) -> None:
        """Seed query vectors computed elsewhere (e.g. in one batch)."""
        for q, v in queries.items():
            self._queries[q] = np.asarray(v, dtype=np.float32)

    def similarities(self, query: str, passages: Sequence[Passage]) -> tuple[list[float], list[float]]:
        """(max sentence cosine, title cosine) per passage; title cosine 0 without a title."""
        self.ensure(passages)
        qv = self.query(query)
        smax, tsim = [], []
        got = {p.passage_id: self._vecs.get(p.passage_id) for p in passages}
        if any(v is None for v in got.values()):  # evicted by a concurrent call: embed again
            missing = [p for p in passages if got[p.passage_id] is None]
            self.ensure(missing)
            got.update({p.passage_id: self._vecs.get(p.passage_id) for p in missing})
        for p in passages:
            tv, sv = got[p.passage_id]
            smax.append(float((sv @ qv).max()) if len(sv) else 0.0)
            tsim.append(float(tv @ qv) if tv is not None else 0.0)
        return smax, tsim

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        ids = sorted(self._vecs)
        dim = int(getattr(self.embedder, "dim", 0))
        for tv, sv in self._vecs.values():
            dim = sv.shape[1]
            break
        titles, sents, offsets, has_title = [], [], [0], []
        for pid in ids:
            tv, sv = self._vecs[pid]
            has_title.append(tv is not None)
            titles.append(tv if tv is not None else np.zeros(dim, np.float32))
            sents.append(sv)
            offsets.append(offsets[-1] + len(sv))
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp.npz")
        np.savez(
            tmp,
            ids=np.array(ids, dtype=object).astype(str),
            offsets=np.array(offsets, dtype=np.int64),
            has_title=np.array(has_title, dtype=bool),
            titles=np.stack(titles) if titles else np.zeros((0, dim), np.float32),
            sentences=np.concatenate(sents) if sents else np.zeros((0, dim), np.float32),
            embedder=np.array(getattr(self.embedder, "name", "unknown")),
        )
        tmp.replace(path)
        return path

    def load(self, path: str | Path) -> int:
        """Merge a saved cache; returns how many passages it added. A cache written by a
        different embedder is ignored (returns 0)."""
        path = Path(path)
        if not path.is_file():
            return 0
        with np.load(path, allow_pickle=False) as z:
            if str(z["embedder"]) != getattr(self.embedder, "name", "unknown"):
                return 0
            ids, offsets, has_title = z["ids"], z["offsets"], z["has_title"]
            titles, sents = z["titles"], z["sentences"]
        n = 0
        with self._lock:
            for i, pid in enumerate(ids.tolist()):
                if pid in self._vecs:
                    continue
                self._vecs[pid] = (titles[i] if has_title[i] else None, sents[offsets[i] : offsets[i + 1]])
                n += 1
            self._evict()
        return n


# ----------------------------------------------------------------------------- features


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
    idents = list(dict.fromkeys(identifiers(qtoks)))
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


def label_candidates(candidates: Sequence[Candidate], relevant: Mapping[str, int]) -> list[int]:
    """Doc-level labels: a candidate's grade is its passage id's, else its doc id's, else 0."""
    out = []
    for c in candidates:
        g = relevant.get(c.passage_id)
        if g is None:
            g = relevant.get(c.doc_id, 0)
        out.append(max(0, int(g)))
    return out


def doc_ndcg(candidates: Sequence[Candidate], order: Sequence[int], relevant: Mapping[str, int], k: int = 10) -> float:
    """nDCG@k of candidates visited in ``order``, collapsed to documents by first occurrence.
    Passage-id labels count for their document."""
    from quarry.eval.metrics import doc_ranking, ndcg_at_k

    docs = doc_ranking([candidates[i].doc_id for i in order])
    grades: dict[str, int] = {}
    for key, g in relevant.items():
        did = key.split("@", 1)[0] if "#" in key else key
        grades[did] = max(grades.get(did, 0), int(g))
    return ndcg_at_k(docs, grades, k)


# ----------------------------------------------------------------------------- the ranker

DEFAULT_PARAMS: dict[str, Any] = {
    "objective": "lambdarank",
    "n_estimators": 300,
    "learning_rate": 0.03,
    "num_leaves": 15,
    "min_child_samples": 20,
    "subsample": 0.8,
    "subsample_freq": 1,
    "colsample_bytree": 0.8,
    "reg_lambda": 1.0,
    "lambdarank_truncation_level": 20,
    "deterministic": True,
    "force_row_wise": True,
    "num_threads": 1,
    "verbose": -1,
}

Group = tuple[str, Sequence[Candidate], Sequence[Passage], Sequence[int]]


class LearnedRanker:
    """LightGBM LambdaRank over :func:`candidate_features`.

    ``sentence``: a :class:`SentenceVectors` (enables the sentence features) or None.
    ``reference_date``: the date recency is measured against; fixed at construction and
    saved with the model so training and serving agree. ``seed`` and ``params`` override
    :data:`DEFAULT_PARAMS`; training is deterministic for a given seed and data.
    """

    def __init__(
        self,
        sentence: SentenceVectors | None = None,
        reference_date: dt.date | None = None,
        seed: int = 0,
        params: Mapping[str, Any] | None = None,
    ):
        self.sentence = sentence
        self.reference_date = reference_date
        self.seed = int(seed)
        self.params = {**DEFAULT_PARAMS, **(params or {})}
        self.feature_names: tuple[str, ...] = BASE_FEATURES + (SENTENCE_FEATURES if sentence is not None else ())
        self.booster: Any = None
        self.report: dict[str, Any] = {}
        self.meta: dict[str, Any] = {}

    # ------------------------------------------------------------------ features
    @property
    def uses_sentence(self) -> bool:
        return "sent_max_sim" in self.feature_names

    def features(self, query: str, candidates: Sequence[Candidate], passages: Sequence[Passage]) -> np.ndarray:
        if self.uses_sentence and self.sentence is None:
            raise ValueError("this model uses sentence features: give it a SentenceVectors")
        return candidate_features(query, candidates, passages,
                                  sentence=self.sentence if self.uses_sentence else None,
                                  reference_date=self.reference_date)

    # ------------------------------------------------------------------ training
    def fit(self, groups: Iterable[Group]) -> "LearnedRanker":
        """Train on groups of (query, candidates, passages, labels). Groups without any
        positive label carry no ranking signal and are skipped (counted in ``report``)."""
        import lightgbm as lgb

        Xs, ys, sizes = [], [], []
        skipped = 0
        t0 = time.perf_counter()
        for query, cands, passages, labels in groups:
            if len(labels) != len(cands):
                raise ValueError("labels and candidates differ in length")
            if not cands or max(labels, default=0) <= 0:
                skipped += 1
                continue
            Xs.append(self.features(query, cands, passages))
            ys.append(np.asarray(labels, dtype=np.int32))
            sizes.append(len(cands))
        if not sizes:
            raise ValueError("no training group has a relevant candidate")
        t_feat = time.perf_counter() - t0
        X, y = np.concatenate(Xs), np.concatenate(ys)
        params = dict(self.params)
        n_est = int(params.pop("n_estimators"))
        # Small data (a handful of evidence cases) cannot fill 20-row leaves.
        params["min_child_samples"] = max(1, min(int(params["min_child_samples"]), len(y) // 10))
        model = lgb.LGBMRanker(n_estimators=n_est, random_state=self.seed, **params)
        max_label = int(y.max())
        if max_label >= 31:
            raise ValueError("relevance grades must be < 31")
        model.fit(X, y, group=sizes, feature_name=list(self.feature_names))
        self.booster = model.booster_
        self.report = {
            "train_queries": len(sizes),
            "skipped_queries_without_positive": skipped,
            "train_rows": int(len(y)),
            "positives": int((y > 0).sum()),
            "feature_seconds": round(t_feat, 2),
            "fit_seconds": round(time.perf_counter() - t0 - t_feat, 2),
        }
        return self

    # ------------------------------------------------------------------ scoring
    def _check(self) -> None:
        if self.booster is None:
            raise RuntimeError("the ranker is not trained or loaded")

    def score(self, query: str, candidates: Sequence[Candidate], passages: Sequence[Passage]) -> list[float]:
        self._check()
        if not candidates:
            return []
        X = self.features(query, candidates, passages)
        return [float(s) for s in self.booster.predict(X, num_threads=1)]

    def rerank(self, query: str, candidates: Sequence[Candidate], passages: Sequence[Passage], top_k: int) -> list[Candidate]:
        """apply_rerank semantics: score desc, ties keep the incoming (fused) order, top_k kept."""
        scores = self.score(query, candidates, passages)
        by_id = {c.passage_id: c for c in candidates}
        return [by_id[pid].model_copy(update={"rerank_score": s, "rerank_rank": r})
                for pid, s, r in apply_rerank(scores, [c.passage_id for c in candidates], top_k)]

    def as_second_stage(self) -> "SecondStage":
        """A ``SecondStage`` for :func:`quarry.core.search.search`."""
        self._check()

        def stage(query: str, candidates: Sequence[Candidate], passages: Sequence[Passage], top_k: int) -> list[Candidate]:
            return self.rerank(query, candidates, passages, top_k)

        stage.name = self.name  # type: ignore[attr-defined]
        stage.ranker = self  # type: ignore[attr-defined]
        return stage

    # ------------------------------------------------------------------ identity, persistence
    def model_text(self) -> str:
        self._check()
        return self.booster.model_to_string(num_iteration=-1)

    @property
    def model_id(self) -> str:
        """sha256 of the saved model file (``model.txt``)."""
        return hashlib.sha256(self.model_text().encode()).hexdigest()

    @property
    def name(self) -> str:
        return f"learned:{self.model_id[:12]}" if self.booster is not None else "learned:untrained"

    def feature_importances(self, kind: str = "gain") -> dict[str, float]:
        """Share of total importance per feature (``gain`` or ``split``), largest first."""
        self._check()
        vals = self.booster.feature_importance(importance_type=kind)
        total = float(sum(vals)) or 1.0
        pairs = sorted(zip(self.feature_names, vals), key=lambda t: (-t[1], t[0]))
        return {n: round(float(v) / total, 4) for n, v in pairs}

    def metadata(self) -> dict[str, Any]:
        return {
            "version": RANKER_VERSION,
            "kind": "learned",
            "feature_names": list(self.feature_names),
            "sentence_features": self.uses_sentence,
            "sentence_embedder": getattr(self.sentence.embedder, "name", None) if self.sentence else None,
            "reference_date": self.reference_date.isoformat() if self.reference_date else None,
            "seed": self.seed,
            "params": self.params,
            "model_sha256": self.model_id,
            "feature_importances": self.feature_importances(),
            "training": self.report,
            **self.meta,
        }

    def save(self, directory: str | Path) -> Path:
        """Write ``model.txt`` (LightGBM text model) and ``ranker.json`` (metadata)."""
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        text = self.model_text()
        (d / "model.txt").write_text(text)
        (d / "ranker.json").write_text(json.dumps(self.metadata(), indent=2, sort_keys=True, default=str))
        return d

    @classmethod
    def load(cls, directory: str | Path, sentence: SentenceVectors | None = None,
             embedder: "Embedder | None" = None) -> "LearnedRanker":
        """Load a saved ranker. A model with sentence features needs ``sentence`` (or an
        ``embedder`` to build one; its name must match the one it was trained with)."""
        import lightgbm as lgb

        d = Path(directory)
        meta = json.loads((d / "ranker.json").read_text())
        if meta.get("version") != RANKER_VERSION:
            raise ValueError(f"ranker version {meta.get('version')!r} is not {RANKER_VERSION!r}")
        text = (d / "model.txt").read_text()
        if meta.get("model_sha256") and hashlib.sha256(text.encode()).hexdigest() != meta["model_sha256"]:
            raise ValueError(f"{d / 'model.txt'} does not match its recorded sha256")
        if meta["sentence_features"] and sentence is None:
            if embedder is None:
                raise ValueError("this ranker uses sentence features: pass sentence= or embedder=")
            sentence = SentenceVectors(embedder)
        if sentence is not None and meta["sentence_features"]:
            have = getattr(sentence.embedder, "name", None)
            if have != meta["sentence_embedder"]:
                raise ValueError(f"ranker was trained with embedder {meta['sentence_embedder']!r}, got {have!r}")
        ref = meta.get("reference_date")
        r = cls(sentence=sentence if meta["sentence_features"] else None,
                reference_date=dt.date.fromisoformat(ref) if ref else None,
                seed=meta.get("seed", 0), params=meta.get("params"))
        r.feature_names = tuple(meta["feature_names"])
        r.booster = lgb.Booster(model_str=text)
        r.report = meta.get("training", {})
        r.meta = {k: v for k, v in meta.items() if k not in r.metadata_keys()}
        return r

    @staticmethod
    def metadata_keys() -> set[str]:
        return {"version", "kind", "feature_names", "sentence_features", "sentence_embedder", "reference_date",
                "seed", "params", "model_sha256", "feature_importances", "training"}


# ----------------------------------------------------------------------------- mining, split, gate


@dataclass
class Mined:
    """One query's first-stage output: fused candidates and their passages."""

    query: str
    candidates: list[Candidate]
    passages: list[Passage]


def mine_candidates(
    index: "TenantIndex",
    principal: "Principal",
    embedder: "Embedder",
    queries: Mapping[str, str],
    settings: "SearchSettings",
    query_vectors: Mapping[str, np.ndarray] | None = None,
) -> dict[str, Mined]:
    """Quarry's own first stage (:func:`quarry.core.search.first_stage`: mask -> lexical
    and dense legs with floors -> RRF) for each query, unfiltered by doc type or date.
    Candidates are therefore exactly those the principal could be served."""
    qids = list(queries)
    if query_vectors is None:
        vecs = embedder.encode([queries[q] for q in qids]) if qids else np.zeros((0, 1), np.float32)
        query_vectors = dict(zip(qids, vecs))
    out: dict[str, Mined] = {}
    for q in qids:
        text = queries[q]
        fs = first_stage(index, principal, SearchRequest(query=text), embedder, settings, query_vectors[q])
        out[q] = Mined(text, list(fs.candidates), [index.passage_at(c.row) for c in fs.candidates])
    return out


def split_queries(qids: Iterable[str], holdout: float, seed: int) -> tuple[list[str], list[str]]:
    """(train, held_out): a seeded shuffle of the sorted ids; at least one held-out query
    when there are two or more and ``holdout`` > 0."""
    if not 0 <= holdout < 1:
        raise ValueError("holdout must be in [0, 1)")
    ids = sorted(set(qids))
    random.Random(seed).shuffle(ids)
    n_hold = int(round(holdout * len(ids)))
    if holdout > 0 and len(ids) >= 2:
        n_hold = max(1, min(n_hold, len(ids) - 1))
    return sorted(ids[n_hold:]), sorted(ids[:n_hold])


def train_and_evaluate(
    mined: Mapping[str, Mined],
    qrels: Mapping[str, Mapping[str, int]],
    *,
    holdout: float = 0.2,
    seed: int = 0,
    margin: float = DEFAULT_MARGIN,
    sentence: SentenceVectors | None = None,
    reference_date: dt.date | None = None,
    params: Mapping[str, Any] | None = None,
) -> tuple[LearnedRanker | None, GateDecision, dict[str, Any]]:
    """Split labelled queries, train on the train part, compare fused vs learned nDCG@10
    on the held-out part and gate. Returns the trained ranker even when the gate says no
    (None only when nothing could be trained)."""
    labelled = [q for q in mined if any(g > 0 for g in qrels.get(q, {}).values())]
    train, held = split_queries(labelled, holdout, seed)
    report: dict[str, Any] = {
        "queries": {"mined": len(mined), "labelled": len(labelled), "train": len(train), "heldout": len(held)},
        "split": {"seed": seed, "holdout": holdout},
    }

    def groups(ids):
        for q in ids:
            m = mined[q]
            yield m.query, m.candidates, m.passages, label_candidates(m.candidates, qrels[q])

    with_pos = sum(1 for q in train if any(label_candidates(mined[q].candidates, qrels[q])))
    report["queries"]["train_with_positive_candidate"] = with_pos
    if not train or not held or with_pos == 0:
        reason = ("no training labels" if not labelled else
                  "too few labelled queries for a train/held-out split" if not (train and held) else
                  "no relevant document among the mined candidates of any training query")
        return None, evaluate_gate(float("nan"), float("nan"), margin, reason=reason, n_queries=len(held)), report

    if sentence is not None:  # embed every needed passage once, in large batches
        t0 = time.perf_counter()
        before = sentence.encoded_units
        sentence.ensure(p for q in (*train, *held) for p in mined[q].passages)
        report["sentence_vectors"] = {"passages": len(sentence), "units_encoded": sentence.encoded_units - before,
                                      "seconds": round(time.perf_counter() - t0, 2)}
    ranker = LearnedRanker(sentence=sentence, reference_date=reference_date, seed=seed, params=params)
    ranker.fit(groups(train))
    report["training"] = ranker.report
    fused, learned, wins, losses = [], [], 0, 0
    t0 = time.perf_counter()
    for q in held:
        m = mined[q]
        f = doc_ndcg(m.candidates, range(len(m.candidates)), qrels[q])
        if m.candidates:
            s = ranker.score(m.query, m.candidates, m.passages)
            order = [i for _, i in sorted(((-v, i) for i, v in enumerate(s)))]  # stable on ties
            l_ = doc_ndcg(m.candidates, order, qrels[q])
        else:
            l_ = f
        fused.append(f)
        learned.append(l_)
        wins += l_ > f + 1e-12
        losses += l_ < f - 1e-12
    fn, ln = float(np.mean(fused)), float(np.mean(learned))
    decision = evaluate_gate(fn, ln, margin, model_id=ranker.model_id, n_queries=len(held),
                             extra={"wins": int(wins), "losses": int(losses), "ties": len(held) - int(wins) - int(losses)})
    report["heldout"] = {"fused_ndcg@10": round(fn, 4), "learned_ndcg@10": round(ln, 4),
                         "delta": round(ln - fn, 4), "wins": int(wins), "losses": int(losses),
                         "eval_seconds": round(time.perf_counter() - t0, 2)}
    report["feature_importances"] = ranker.feature_importances()
    report["model_id"] = ranker.model_id
    ranker.meta["heldout"] = report["heldout"]
    ranker.meta["split"] = report["split"]
    return ranker, decision, report


def train_and_gate(
    index: "TenantIndex",
    principal: "Principal",
    embedder: "Embedder",
    train_queries: Mapping[str, str],
    qrels: Mapping[str, Mapping[str, int]],
    settings: "SearchSettings | None" = None,
    holdout: float = 0.2,
    seed: int = 0,
    margin: float = DEFAULT_MARGIN,
    *,
    sentence_features: bool = False,
    sentence: SentenceVectors | None = None,
    sentence_embedder: "Embedder | None" = None,
    reference_date: dt.date | None = None,
    params: Mapping[str, Any] | None = None,
) -> tuple[LearnedRanker | None, GateDecision, dict[str, Any]]:
    """Mine candidates for ``train_queries`` with the first stage, train on a seeded split
    of the labelled ones, gate on the held-out split. Returns the ranker **only when the
    gate enabled it** (else None: serve the fused order), the decision, and a report.

    For ``quarry eval beir --train-split train``: pass the dataset's *train* queries and
    qrels (never test), then score test queries through
    ``search(..., second_stage=ranker.as_second_stage())`` when a ranker came back.
    Sentence features are off by default (on 2 CPU cores they need tens of minutes for
    SciFact); with ``sentence_features=True`` they use ``sentence`` (a prepared cache), else
    ``sentence_embedder``, else ``embedder`` (the index's dense embedder).
    """
    from quarry.core.search import SearchSettings

    settings = settings or SearchSettings()
    t0 = time.perf_counter()
    queries = {q: t for q, t in train_queries.items() if q in qrels}
    mined = mine_candidates(index, principal, embedder, queries, settings)
    t_mine = time.perf_counter() - t0
    if sentence_features and sentence is None:
        sentence = SentenceVectors(sentence_embedder or embedder)
    if not sentence_features:
        sentence = None
    ranker, decision, report = train_and_evaluate(
        mined, qrels, holdout=holdout, seed=seed, margin=margin, sentence=sentence,
        reference_date=reference_date, params=params,
    )
    report["mine_seconds"] = round(t_mine, 2)
    report["gate"] = decision.to_json()
    return (ranker if decision.enabled else None), decision, report
