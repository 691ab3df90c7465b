"""The promotion gate: a second stage is served only when it beats the fused order."""

from __future__ import annotations

import hashlib
import math
import random

import numpy as np
import pytest

from quarry.core.index import layout
from quarry.core.index.manifest import manifest_path
from quarry.core.rank.gate import (
    DEFAULT_MARGIN,
    GateDecision,
    evaluate_gate,
    load_second_stage,
    read_decision,
    record_decision,
)
from quarry.core.rank.model import LearnedRanker
from quarry.core.rank.train import TrainSettings, doc_ndcg, label_candidates, split_queries, train_and_evaluate

from helpers.ranker import CASES, build_sample_index

pytestmark = pytest.mark.unit


def _synthetic():
    from test_learned import synthetic_mined  # tests/core is on sys.path under pytest's rootdir-relative import

    return synthetic_mined(60)


@pytest.mark.parametrize("fused,stage,margin,enabled", [
    (0.70, 0.69, 0.005, False),   # loses
    (0.70, 0.70, 0.0, False),     # ties never enable, even with margin 0
    (0.70, 0.703, 0.005, False),  # wins by less than the margin
    (0.70, 0.705, 0.005, True),   # wins by the margin
    (0.70, 0.80, 0.005, True),
    (0.70, 0.7001, 0.0, True),
])
def test_evaluate_gate_rule(fused, stage, margin, enabled):
    d = evaluate_gate(fused, stage, margin, model_id="m", n_queries=10)
    assert isinstance(d, GateDecision) and d.enabled is enabled and d.model_id == "m"
    assert d.metrics["fused"] == fused and d.metrics["stage"] == stage and d.metrics["margin"] == margin
    assert d.reason


def test_evaluate_gate_refuses_bad_inputs():
    assert DEFAULT_MARGIN > 0
    with pytest.raises(ValueError):
        evaluate_gate(0.5, 0.9, -0.01)  # a negative margin could enable a loser
    with pytest.raises(ValueError):
        evaluate_gate(0.5, 0.9, math.nan)
    assert not evaluate_gate(math.nan, 0.9, 0.0).enabled
    assert not evaluate_gate(0.1, 0.9, 0.0, n_queries=0).enabled


def _heldout_ndcg(mined, qrels, held, scorer):
    fused, stage = [], []
    for q in held:
        m = mined[q]
        s = scorer(m)
        fused.append(doc_ndcg(m.candidates, range(len(m.candidates)), qrels[q]))
        stage.append(doc_ndcg(m.candidates, sorted(range(len(s)), key=lambda i: (-s[i], i)), qrels[q]))
    return float(np.mean(fused)), float(np.mean(stage))


def test_a_losing_ranker_is_never_enabled():
    mined, qrels = _synthetic()
    train, held = split_queries(mined, 0.3, 0)
    # 1. A stub stage that reverses the fused order.
    f, s = _heldout_ndcg(mined, qrels, held, lambda m: [float(c.fused_rank) for c in m.candidates])
    assert s < f and not evaluate_gate(f, s, 0.0).enabled
    # 2. A ranker trained on inverted labels learns to bury the relevant document.
    rng = random.Random(0)
    bad = LearnedRanker(params={"n_estimators": 40}).fit(
        (m.query, m.candidates, m.passages, [1 - y for y in label_candidates(m.candidates, qrels[q])])
        for q, m in ((q, mined[q]) for q in train))
    f, s = _heldout_ndcg(mined, qrels, held, lambda m: bad.score(m.query, m.candidates, m.passages))
    d = evaluate_gate(f, s, DEFAULT_MARGIN, model_id=bad.model_id)
    assert s < f and not d.enabled
    # 3. Shuffled labels: no signal; whatever it scores, the gate only passes a real win.
    shuffled = {q: {f"{q}-d{rng.randrange(15)}": 1} for q in qrels}
    r, d, rep = train_and_evaluate(mined, shuffled, TrainSettings(holdout=0.3, params={"n_estimators": 40}))
    h = rep["heldout"]
    assert d.enabled == (h["learned_ndcg@10"] - h["fused_ndcg@10"] >= DEFAULT_MARGIN and h["delta"] > 0)
    # 4. A ranker with real signal passes.
    r, d, rep = train_and_evaluate(mined, qrels, TrainSettings(holdout=0.3, params={"n_estimators": 40}))
    assert d.enabled and d.model_id == r.model_id and rep["heldout"]["delta"] > 0.1


def test_no_labels_means_no_stage():
    mined, _ = _synthetic()
    r, d, rep = train_and_evaluate(mined, {})
    assert r is None and not d.enabled and "no training labels" in d.reason
    r, d, rep = train_and_evaluate(dict(list(mined.items())[:1]), {"q0": {"q0-d0": 1}})
    assert r is None and not d.enabled


# ----------------------------------------------------------------------------- manifest + serving


@pytest.fixture()
def sample_root(tmp_path):
    build_sample_index(tmp_path)
    return tmp_path


def _train_on_sample(root):
    from quarry.core.embed.embedders import HashingEmbedder
    from quarry.core.index.shards import TenantIndex
    from quarry.core.rank.train import mine_candidates
    from quarry.core.records import Principal
    from quarry.core.search.settings import SearchSettings

    index = TenantIndex.load(str(root), "acme")
    principal = Principal(tenant="acme", subject="t", groups=frozenset({"all-staff", "engineering", "support",
                                                                          "finance-admins"}))
    queries = {f"c{i}": q for i, (q, _) in enumerate(CASES)}
    qrels = {f"c{i}": {d: 1 for d in r} for i, (_, r) in enumerate(CASES)}
    mined = mine_candidates(index, principal, HashingEmbedder(dim=64), queries, SearchSettings())
    r, d, rep = train_and_evaluate(mined, qrels, TrainSettings(holdout=0.3))
    return index, principal, r, d


def test_record_and_load_second_stage(sample_root):
    from quarry.core.embed.embedders import HashingEmbedder
    from quarry.core.records import SearchRequest
    from quarry.core.search.in_process import search

    root = str(sample_root)
    index, principal, ranker, _ = _train_on_sample(sample_root)
    assert read_decision(root, "acme").enabled is False  # nothing recorded yet
    assert load_second_stage(root, "acme")[0] is None

    # A disabled decision is recorded with the model identity but never served.
    no = evaluate_gate(0.8, 0.7, 0.005, model_id=ranker.model_id, n_queries=6)
    rec = record_decision(root, "acme", index.generation, no, ranker)
    assert rec.enabled is False and rec.model_id == ranker.model_id
    stage, dec = load_second_stage(root, "acme")
    assert stage is None and dec.enabled is False and dec.model_id == ranker.model_id

    # An enabled one is served, and search uses it.
    yes = evaluate_gate(0.7, 0.8, 0.005, model_id=ranker.model_id, n_queries=6)
    record_decision(root, "acme", index.generation, yes, ranker)
    for m in (layout.read_json(manifest_path(root, "acme", index.generation)),
              layout.read_json(layout.join(root, "acme", "manifest.json"))):
        assert m["second_stage"]["enabled"] is True and m["second_stage"]["model_id"] == ranker.model_id
        assert m["second_stage"]["metrics"]["delta"] == pytest.approx(0.1)
    model = sample_root / "acme" / f"gen-{index.generation}" / "ranker" / "model.txt"
    assert hashlib.sha256(model.read_bytes()).hexdigest() == ranker.model_id
    stage, dec = load_second_stage(root, "acme")
    assert stage is not None and dec.enabled is True
    res = search(index, principal, SearchRequest(query="webhook error E-4471", top_k=3),
                        HashingEmbedder(dim=64), second_stage=stage)
    rr = next(s for s in res.stages if s.name == "rerank")
    assert rr.kept == 3 and "skipped" not in rr.note
    ranked = sorted((c for c in res.candidates if c.rerank_rank), key=lambda c: c.rerank_rank)
    assert [c.rerank_rank for c in ranked] == [1, 2, 3]
    assert [e.passage_id for e in res.excerpts] == [c.passage_id for c in ranked]

    # A tampered model is refused: the fused order stands.
    model.write_text(model.read_text() + "\n")
    stage, dec = load_second_stage(root, "acme")
    assert stage is None and "does not match" in dec.reason

    # An enabled decision without a model is refused at record time.
    with pytest.raises(ValueError):
        record_decision(root, "acme", index.generation, yes, None)


def test_second_stage_sees_only_the_principals_candidates(sample_root, monkeypatch):
    """The stage gets only candidates that passed the principal's filter, and scoring reads
    nothing from the index."""
    from quarry.core.embed.embedders import HashingEmbedder
    from quarry.core.index.shards import TenantIndex
    from quarry.core.records import Principal, SearchRequest
    from quarry.core.search.in_process import search

    index, _, ranker, _ = _train_on_sample(sample_root)
    inner = ranker.as_second_stage()
    seen = []

    def spy(query, cands, passages, top_k):
        seen.append(list(passages))

        def boom(*a, **k):
            raise AssertionError("the second stage touched the index")

        with monkeypatch.context() as m:
            for name in ("passage_at", "passage", "document", "parent", "masks", "row_of"):
                m.setattr(TenantIndex, name, boom)
            return inner(query, cands, passages, top_k)

    narrow = Principal(tenant="acme", subject="u", groups=frozenset({"engineering"}))
    for q in ("treasury account details", "settlement cutoff", "rotate API keys"):
        search(index, narrow, SearchRequest(query=q, top_k=4), HashingEmbedder(dim=64), second_stage=spy)
    assert seen and all(p.tenant == "acme" and narrow.can_read(p.tenant, p.envelope.acl) for ps in seen for p in ps)
    assert all(p.doc_id != "treasury-accounts" for ps in seen for p in ps)  # finance-admins only


def test_train_and_gate_without_labels_keeps_fused_order(sample_root):
    from quarry.core.embed.embedders import HashingEmbedder
    from quarry.core.index.shards import TenantIndex
    from quarry.core.rank.train import train_and_gate
    from quarry.core.records import Principal

    index = TenantIndex.load(str(sample_root), "acme")
    p = Principal(tenant="acme", subject="t", groups=frozenset({"all-staff"}))
    r, d, rep = train_and_gate(index, p, HashingEmbedder(dim=64), {"q1": "refund window"}, {})
    assert r is None and not d.enabled and rep["queries"]["labelled"] == 0
    # Labels present but an impossible margin: trained and evaluated, returned (so a job can
    # record it) but not enabled.
    queries = {f"c{i}": q for i, (q, _) in enumerate(CASES)}
    qrels = {f"c{i}": {x: 1 for x in rel} for i, (_, rel) in enumerate(CASES)}
    r, d, rep = train_and_gate(index, p, HashingEmbedder(dim=64), queries, qrels,
                               train_settings=TrainSettings(margin=0.9))
    assert r is not None and not d.enabled and d.model_id == r.model_id and rep["gate"]["enabled"] is False
