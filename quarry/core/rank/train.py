"""Training the learned second stage, one path for ``quarry train-ranker`` and ``quarry eval
beir --train-split``: mine candidates with Quarry's own first stage, label them, split the
labelled queries (seeded), train on one part, compare fused and learned nDCG@10 on the
held-out part and let the promotion gate (:mod:`quarry.core.rank.gate`) decide.
"""

from __future__ import annotations

import datetime as dt
import random
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from quarry.core.rank.gate import DEFAULT_MARGIN, GateDecision, check_margin, evaluate_gate
from quarry.core.rank.metrics import doc_ranking, ndcg_at_k
from quarry.core.rank.model import LearnedRanker
from quarry.core.records import Candidate, Passage, SearchRequest
from quarry.core.search.retrieval import first_stage
from quarry.core.search.settings import SearchSettings
from quarry.core.rank.sentence_vectors import SentenceVectors

if TYPE_CHECKING:  # pragma: no cover
    from quarry.core.embed.embedders import Embedder
    from quarry.core.index.shards import TenantIndex
    from quarry.core.records import Principal

__all__ = ["TrainSettings", "Mined", "mine_candidates", "label_candidates", "doc_ndcg", "split_queries", "train_and_evaluate",
           "evaluate_heldout", "regate", "train_and_gate"]


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
    docs = doc_ranking([candidates[i].doc_id for i in order])
    grades: dict[str, int] = {}
    for key, g in relevant.items():
        did = key.split("@", 1)[0] if "#" in key else key
        grades[did] = max(grades.get(did, 0), int(g))
    return ndcg_at_k(docs, grades, k)


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
    """Quarry's own first stage (:func:`quarry.core.search.retrieval.first_stage`: mask -> lexical
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


@dataclass(frozen=True)
class TrainSettings:
    """How a ranker is trained and gated: the held-out fraction and the seed of the split
    (also LightGBM's), the gate's nDCG@10 margin, the recency reference date and LightGBM
    parameter overrides (:data:`quarry.core.rank.model.DEFAULT_PARAMS`)."""

    holdout: float = 0.2
    seed: int = 0
    margin: float = DEFAULT_MARGIN
    reference_date: dt.date | None = None
    params: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        if not 0 <= self.holdout < 1:
            raise ValueError(f"holdout must be in [0, 1), got {self.holdout!r}")
        check_margin(self.margin)


def train_and_evaluate(
    mined: Mapping[str, Mined],
    qrels: Mapping[str, Mapping[str, int]],
    train_settings: TrainSettings = TrainSettings(),
    sentence: SentenceVectors | None = None,
) -> tuple[LearnedRanker | None, GateDecision, dict[str, Any]]:
    """Split labelled queries, train on the train part, compare fused vs learned nDCG@10
    on the held-out part and gate. Returns the trained ranker even when the gate says no
    (None only when nothing could be trained)."""
    ts = train_settings
    labelled = [q for q in mined if any(g > 0 for g in qrels.get(q, {}).values())]
    train, held = split_queries(labelled, ts.holdout, ts.seed)
    report: dict[str, Any] = {
        "queries": {"mined": len(mined), "labelled": len(labelled), "train": len(train), "heldout": len(held)},
        "split": {"seed": ts.seed, "holdout": ts.holdout},
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
        return None, evaluate_gate(float("nan"), float("nan"), ts.margin, reason=reason, n_queries=len(held)), report

    if sentence is not None:  # embed every needed passage once, in large batches
        t0 = time.perf_counter()
        before = sentence.encoded_units
        sentence.ensure(p for q in (*train, *held) for p in mined[q].passages)
        report["sentence_vectors"] = {"passages": len(sentence), "units_encoded": sentence.encoded_units - before,
                                      "seconds": round(time.perf_counter() - t0, 2)}
    ranker = LearnedRanker(sentence=sentence, reference_date=ts.reference_date, seed=ts.seed, params=ts.params)
    ranker.fit(groups(train))
    report["training"] = ranker.report
    decision, report["heldout"] = evaluate_heldout(ranker, mined, qrels, held, ts.margin)
    report["feature_importances"] = ranker.feature_importances()
    report["model_id"] = ranker.model_id
    ranker.meta["heldout"] = report["heldout"]
    ranker.meta["split"] = report["split"]
    return ranker, decision, report


def evaluate_heldout(
    ranker: LearnedRanker,
    mined: Mapping[str, Mined],
    qrels: Mapping[str, Mapping[str, int]],
    held: Sequence[str],
    margin: float,
) -> tuple[GateDecision, dict[str, Any]]:
    """Fused vs learned nDCG@10 over the held-out queries ``held`` of ``mined``, and the
    promotion gate's decision on them (:func:`quarry.core.rank.gate.evaluate_gate`)."""
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
    fn = float(np.mean(fused)) if fused else float("nan")
    ln = float(np.mean(learned)) if learned else float("nan")
    decision = evaluate_gate(fn, ln, margin, model_id=ranker.model_id, n_queries=len(held),
                             extra={"wins": int(wins), "losses": int(losses), "ties": len(held) - int(wins) - int(losses)})
    report = {"fused_ndcg@10": round(fn, 4), "learned_ndcg@10": round(ln, 4), "delta": round(ln - fn, 4),
              "wins": int(wins), "losses": int(losses), "eval_seconds": round(time.perf_counter() - t0, 2)}
    return decision, report


def regate(
    index: "TenantIndex",
    ranker: LearnedRanker,
    principal: "Principal",
    embedder: "Embedder",
    queries: Mapping[str, str],
    qrels: Mapping[str, Mapping[str, int]],
    settings: SearchSettings | None = None,
    train_settings: TrainSettings = TrainSettings(),
) -> tuple[GateDecision, dict[str, Any]]:
    """The promotion gate for an already trained ``ranker`` on another generation's data:
    candidates mined from ``index``, the same seeded split of the labelled queries as at
    training, fused vs learned on the held-out part (:func:`evaluate_heldout`). Used when
    a new generation is published and the previous one served a learned ranker."""
    ts = train_settings
    mined = mine_candidates(index, principal, embedder, {q: t for q, t in queries.items() if q in qrels},
                            settings or SearchSettings())
    labelled = [q for q in mined if any(g > 0 for g in qrels.get(q, {}).values())]
    _, held = split_queries(labelled, ts.holdout, ts.seed)
    if not held:
        return evaluate_gate(float("nan"), float("nan"), ts.margin, reason="no held-out queries to re-gate on",
                             n_queries=0), {"queries": {"labelled": len(labelled), "heldout": 0}}
    decision, heldout = evaluate_heldout(ranker, mined, qrels, held, ts.margin)
    return decision, {"queries": {"labelled": len(labelled), "heldout": len(held)}, "heldout": heldout,
                      "split": {"seed": ts.seed, "holdout": ts.holdout}}


def train_and_gate(
    index: "TenantIndex",
    principal: "Principal",
    embedder: "Embedder",
    train_queries: Mapping[str, str],
    qrels: Mapping[str, Mapping[str, int]],
    settings: SearchSettings | None = None,
    train_settings: TrainSettings = TrainSettings(),
    sentence: SentenceVectors | None = None,
) -> tuple[LearnedRanker | None, GateDecision, dict[str, Any]]:
    """Mine candidates for the labelled ``train_queries`` with the first stage as
    ``principal``, train on a seeded split of them and gate on the held-out split
    (:func:`train_and_evaluate`). Returns ``(ranker, decision, report)``: the trained ranker
    even when the gate said no (None only when nothing could be trained), so a caller
    serves it only when ``decision.enabled`` and may still record it.

    For ``quarry eval beir --train-split train``: pass the dataset's *train* queries and
    qrels (never test). Sentence features are used when ``sentence`` (a
    :class:`SentenceVectors`) is given; on 2 CPU cores they need tens of minutes for SciFact.
    """
    t0 = time.perf_counter()
    queries = {q: t for q, t in train_queries.items() if q in qrels}
    mined = mine_candidates(index, principal, embedder, queries, settings or SearchSettings())
    t_mine = time.perf_counter() - t0
    ranker, decision, report = train_and_evaluate(mined, qrels, train_settings, sentence)
    report["mine_seconds"] = round(t_mine, 2)
    report["gate"] = decision.to_json()
    return ranker, decision, report
