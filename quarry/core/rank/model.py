"""The learned second stage's model: LightGBM LambdaRank over
:func:`quarry.core.rank.features.candidate_features`, with its identity (sha256 of the
saved text model), persistence and the ``SecondStage`` adapter serving uses.

lightgbm is imported inside the methods that fit or load a model: it is an optional
dependency, and ``import quarry.core`` stays light.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from quarry.core.rank.features import BASE_FEATURES, SENTENCE_FEATURES, candidate_features
from quarry.core.records import Candidate, Passage
from quarry.core.rank.rerank import apply_rerank
from quarry.core.rank.sentence_vectors import SentenceVectors

if TYPE_CHECKING:  # pragma: no cover
    from quarry.core.embed.embedders import Embedder
    from quarry.core.search.survivors import SecondStage

__all__ = ["RANKER_VERSION", "DEFAULT_PARAMS", "Group", "LearnedRanker"]

RANKER_VERSION = "learned-1"

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
        import lightgbm as lgb  # optional dependency, deferred

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
        """A ``SecondStage`` for :func:`quarry.core.search.in_process.search`."""
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
        import lightgbm as lgb  # optional dependency, deferred

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
