"""LearnedRanker: features from the candidate list only, deterministic training, save/load."""

from __future__ import annotations

import datetime as dt
import inspect
import random

import numpy as np
import pytest

from quarry.core.embed.embedders import HashingEmbedder
from quarry.core.rank.features import BASE_FEATURES, FEATURES, MISSING_RANK, SENTENCE_FEATURES, candidate_features
from quarry.core.rank.model import LearnedRanker
from quarry.core.rank.train import Mined, doc_ndcg, label_candidates, split_queries
from quarry.core.rank.sentence_vectors import SentenceVectors
from quarry.core.records import Candidate, Envelope, Passage

pytestmark = pytest.mark.unit

WORDS = ("ledger settlement cutoff refund payout webhook signature retry batch treasury invoice currency "
         "merchant dispute chargeback account balance transfer schedule policy incident").split()


def make_passage(doc_id: str, text: str, title: str = "", tenant: str = "t", heading=(), published=None,
                 effective=None, authority_rank: int = 0) -> Passage:
    env = Envelope(doc_id=doc_id, version="1", tenant=tenant, title=title, acl=("*",),
                   published_at=published, effective_from=effective, authority_rank=authority_rank)
    return Passage(passage_id=f"{doc_id}@1#s.1", anchor="s.1", heading_path=tuple(heading),
                   parent_id=f"{doc_id}@1#s", text=text, chunker_version="test",
                   token_count=len(text.split()), envelope=env)


def make_candidate(p: Passage, fused_rank: int, lex=None, dense=None) -> Candidate:
    return Candidate(passage_id=p.passage_id, doc_id=p.doc_id, row=fused_rank,
                     lexical_rank=None if lex is None else lex[0], lexical_score=None if lex is None else lex[1],
                     dense_rank=None if dense is None else dense[0], dense_score=None if dense is None else dense[1],
                     fused_rank=fused_rank, fused_score=1.0 / (60 + fused_rank))


def synthetic_mined(n_queries: int = 60, n_cands: int = 15, seed: int = 1):
    """Queries whose relevant doc has full term coverage but a random fused position;
    distractors share fewer query words. A ranker using coverage beats the fused order."""
    rng = random.Random(seed)
    mined, qrels = {}, {}
    for qi in range(n_queries):
        qwords = rng.sample(WORDS, 3)
        query = " ".join(qwords)
        rel_pos = rng.randrange(n_cands)
        cands, passages = [], []
        for ci in range(n_cands):
            doc = f"q{qi}-d{ci}"
            if ci == rel_pos:
                words = qwords + rng.sample(WORDS, 4)
            else:
                words = rng.sample([w for w in WORDS if w not in qwords], 5) + [rng.choice(qwords)]
            rng.shuffle(words)
            p = make_passage(doc, " ".join(words) + ".", title=f"doc {ci}")
            lex = (ci + 1, 10.0 - ci * 0.3) if rng.random() < 0.9 else None
            dense = (ci + 1, 0.8 - ci * 0.01) if rng.random() < 0.8 else None
            passages.append(p)
            cands.append(make_candidate(p, ci + 1, lex, dense))
        mined[f"q{qi}"] = Mined(query, cands, passages)
        qrels[f"q{qi}"] = {f"q{qi}-d{rel_pos}": 1}
    return mined, qrels


def groups_of(mined, qrels, ids):
    for q in ids:
        m = mined[q]
        yield m.query, m.candidates, m.passages, label_candidates(m.candidates, qrels[q])


SMALL = {"n_estimators": 40}


def test_feature_function_takes_only_query_candidates_passages():
    params = list(inspect.signature(candidate_features).parameters)
    assert params == ["query", "candidates", "passages", "sentence", "reference_date"]


def test_features_values():
    p1 = make_passage("a", "Webhook deliveries fail with error E-4471 when the signature retry expires.",
                      title="Webhook errors", heading=("Troubleshooting",), published=dt.date(2025, 1, 1),
                      authority_rank=60)
    p2 = make_passage("b", "Refunds are processed within ten days.", title="Refund policy")
    c1 = make_candidate(p1, 1, lex=(1, 8.0), dense=(2, 0.5))
    c2 = make_candidate(p2, 2, lex=None, dense=(1, 0.6))
    X = candidate_features("webhook error E-4471 signature", [c1, c2], [p1, p2], reference_date=dt.date(2025, 1, 11))
    f = dict(zip(BASE_FEATURES, X[0]))
    g = dict(zip(BASE_FEATURES, X[1]))
    assert X.shape == (2, len(BASE_FEATURES))
    assert f["lex_missing"] == 0 and f["lex_rank"] == 1 and f["lex_score"] == 8.0 and f["lex_score_rel"] == 1.0
    assert g["lex_missing"] == 1 and g["lex_rank"] == MISSING_RANK and g["lex_score"] == 0.0
    assert f["dense_score_rel"] == pytest.approx(-0.1) and g["dense_score_rel"] == 0.0
    assert f["ident_query"] == 1 and f["ident_match"] == 1.0 and g["ident_match"] == 0.0
    assert f["coverage"] == 1.0 and g["coverage"] == 0.0
    assert 0 < f["proximity"] <= 1 and g["proximity"] == 0.0
    assert f["title_overlap"] > 0 and g["title_overlap"] == 0.0
    assert f["age_days"] == 10 and f["age_missing"] == 0 and g["age_missing"] == 1
    assert f["authority"] == 60 and f["doc_hits"] == 1


def test_features_reject_misaligned_inputs():
    p1, p2 = make_passage("a", "x y"), make_passage("b", "y z")
    with pytest.raises(ValueError):
        candidate_features("x", [make_candidate(p1, 1)], [p2])
    with pytest.raises(ValueError):
        candidate_features("x", [make_candidate(p1, 1)], [p1, p2])


def test_sentence_vectors_cache_roundtrip(tmp_path):
    emb = HashingEmbedder(dim=32)
    sv = SentenceVectors(emb)
    ps = [make_passage("a", "First sentence about refunds. Second sentence about payouts.", title="T"),
          make_passage("b", "Only one sentence here.")]
    smax, tsim = sv.similarities("payouts", ps)
    assert len(sv) == 2 and sv.encoded_units == 4  # title + 2 sentences; (no title) + 1 sentence
    sv.save(tmp_path / "s.npz")
    sv2 = SentenceVectors(emb)
    assert sv2.load(tmp_path / "s.npz") == 2
    assert sv2.similarities("payouts", ps) == (smax, tsim)
    assert sv2.encoded_units == 0  # served from the cache
    assert SentenceVectors(HashingEmbedder(dim=16)).load(tmp_path / "s.npz") == 0  # other embedder: ignored
    X = candidate_features("payouts", [make_candidate(p, i + 1) for i, p in enumerate(ps)], ps, sentence=sv2)
    assert X.shape == (2, len(FEATURES))
    i_max, i_rel = len(BASE_FEATURES), len(BASE_FEATURES) + 1
    best = int(np.argmax(X[:, i_max]))
    assert X[0, i_max] != X[1, i_max]  # the two passages differ, so the relative feature is informative
    assert X[best, i_rel] == 0.0  # the best candidate is the reference
    assert X[1 - best, i_rel] == pytest.approx(X[1 - best, i_max] - X[best, i_max]) and X[1 - best, i_rel] < 0


def test_training_is_deterministic_and_beats_fused_on_synthetic_data():
    mined, qrels = synthetic_mined()
    train, held = split_queries(mined, 0.25, seed=0)
    a = LearnedRanker(seed=0, params=SMALL).fit(groups_of(mined, qrels, train))
    b = LearnedRanker(seed=0, params=SMALL).fit(groups_of(mined, qrels, train))
    assert a.model_text() == b.model_text() and a.model_id == b.model_id
    m = mined[held[0]]
    assert a.score(m.query, m.candidates, m.passages) == b.score(m.query, m.candidates, m.passages)
    fused = np.mean([doc_ndcg(mined[q].candidates, range(15), qrels[q]) for q in held])
    learned = []
    for q in held:
        s = a.score(mined[q].query, mined[q].candidates, mined[q].passages)
        learned.append(doc_ndcg(mined[q].candidates, sorted(range(15), key=lambda i: -s[i]), qrels[q]))
    assert np.mean(learned) > fused + 0.1
    imp = a.feature_importances()
    assert set(imp) == set(BASE_FEATURES) and abs(sum(imp.values()) - 1) < 0.01
    assert max(imp, key=imp.get) in ("coverage", "proximity", "title_overlap")


def test_save_load_roundtrip(tmp_path):
    mined, qrels = synthetic_mined(30)
    r = LearnedRanker(seed=3, params=SMALL, reference_date=dt.date(2026, 1, 1)).fit(groups_of(mined, qrels, list(mined)))
    r.save(tmp_path / "ranker")
    assert {p.name for p in (tmp_path / "ranker").iterdir()} == {"model.txt", "ranker.json"}
    r2 = LearnedRanker.load(tmp_path / "ranker")
    assert r2.model_id == r.model_id and r2.feature_names == r.feature_names
    assert r2.reference_date == dt.date(2026, 1, 1) and r2.seed == 3
    for q in list(mined)[:5]:
        m = mined[q]
        assert r2.score(m.query, m.candidates, m.passages) == r.score(m.query, m.candidates, m.passages)
    (tmp_path / "ranker" / "model.txt").write_text(r.model_text().replace("tree", "tree ", 1))
    with pytest.raises(ValueError, match="sha256"):
        LearnedRanker.load(tmp_path / "ranker")


def test_sentence_model_needs_its_embedder(tmp_path):
    mined, qrels = synthetic_mined(20)
    sv = SentenceVectors(HashingEmbedder(dim=32))
    r = LearnedRanker(sentence=sv, params=SMALL).fit(groups_of(mined, qrels, list(mined)))
    assert r.feature_names == BASE_FEATURES + SENTENCE_FEATURES
    r.save(tmp_path / "r")
    with pytest.raises(ValueError, match="sentence"):
        LearnedRanker.load(tmp_path / "r")
    with pytest.raises(ValueError, match="trained with embedder"):
        LearnedRanker.load(tmp_path / "r", embedder=HashingEmbedder(dim=16))
    r2 = LearnedRanker.load(tmp_path / "r", embedder=HashingEmbedder(dim=32))
    m = mined["q0"]
    assert r2.score(m.query, m.candidates, m.passages) == r.score(m.query, m.candidates, m.passages)


def test_second_stage_orders_like_apply_rerank_and_ties_keep_fused_order():
    mined, qrels = synthetic_mined(30)
    r = LearnedRanker(params=SMALL).fit(groups_of(mined, qrels, list(mined)))
    stage = r.as_second_stage()
    m = mined["q1"]
    out = stage(m.query, m.candidates, m.passages, 5)
    assert [c.rerank_rank for c in out] == [1, 2, 3, 4, 5]
    scores = r.score(m.query, m.candidates, m.passages)
    assert [c.rerank_score for c in out] == sorted(scores, reverse=True)[:5]
    assert all(c.fused_rank == next(x.fused_rank for x in m.candidates if x.passage_id == c.passage_id) for c in out)

    class Flat:  # a booster that scores everything equally: the fused order must stand
        def predict(self, X, num_threads=1):
            return np.zeros(len(X))

        def model_to_string(self, num_iteration=-1):
            return "flat"

    r.booster = Flat()
    out = r.as_second_stage()(m.query, m.candidates, m.passages, 50)
    assert [c.passage_id for c in out] == [c.passage_id for c in m.candidates]


def test_fit_needs_a_positive():
    mined, qrels = synthetic_mined(5)
    with pytest.raises(ValueError, match="no training group"):
        LearnedRanker().fit((m.query, m.candidates, m.passages, [0] * len(m.candidates)) for m in mined.values())


def test_split_is_seeded_and_disjoint():
    ids = [f"q{i}" for i in range(50)]
    a, b = split_queries(ids, 0.2, 7), split_queries(list(reversed(ids)), 0.2, 7)
    assert a == b and len(a[1]) == 10 and not set(a[0]) & set(a[1])
    assert split_queries(ids, 0.2, 8) != a
    assert split_queries(["x", "y"], 0.2, 0)[1] and split_queries(["x"], 0.2, 0) == (["x"], [])


def test_labels_and_doc_ndcg():
    ps = [make_passage(d, "t") for d in ("a", "b", "c")]
    cands = [make_candidate(p, i + 1) for i, p in enumerate(ps)]
    assert label_candidates(cands, {"b": 2}) == [0, 2, 0]
    assert label_candidates(cands, {"c@1#s.1": 1}) == [0, 0, 1]
    assert doc_ndcg(cands, [1, 0, 2], {"b": 1}) == 1.0
    assert doc_ndcg(cands, [0, 1, 2], {"c@1#s.1": 1}) == pytest.approx(0.5)


def test_sentence_cache_is_bounded():
    sv = SentenceVectors(HashingEmbedder(dim=16), max_passages=1)
    ps = [make_passage("a", "Refunds take ten days."), make_passage("b", "Payouts arrive on Fridays.")]
    smax, _ = sv.similarities("payouts", ps)
    assert len(sv) == 1 and len(smax) == 2 and smax[1] > smax[0]
