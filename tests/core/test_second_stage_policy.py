"""core.second_stage: which second stage serves a generation, from its recorded gate
decision and the deployment's configuration (known answers per case)."""

from __future__ import annotations

import pytest

from quarry.core.index import layout
from quarry.core.index.manifest import manifest_path
from quarry.core.embed.embedders import HashingEmbedder
from quarry.core.index.shards import TenantIndex
from quarry.core.ingest.pipeline import build_corpus
from quarry.core.records import Candidate
from quarry.core.rank.second_stage import candidate_passages, choose_second_stage, decision_changed, rerank_inputs

pytestmark = pytest.mark.unit

CE = "cross-encoder:tiny"


@pytest.fixture()
def root(tmp_path, sample_docs) -> str:
    r = str(tmp_path / "idx")
    build_corpus([d for d in sample_docs if d.tenant == "globex"], r, HashingEmbedder(32))
    return r


def _record(root: str, second_stage: dict) -> None:
    path = manifest_path(root, "globex", 1)
    layout.write_json(path, {**layout.read_json(path), "second_stage": second_stage})


def test_nothing_recorded(root):
    none = choose_second_stage(root, "globex", 1, cross_encoder=None, learned_enabled=True)
    assert none.kind is None and not none.info.enabled and "no second stage recorded" in none.info.reason
    ce = choose_second_stage(root, "globex", 1, cross_encoder=CE, learned_enabled=True)
    assert (ce.kind, ce.info.enabled, ce.info.name, ce.info.model_id, ce.info.generation) == (
        "cross-encoder", True, CE, CE, 1)


def test_a_recorded_cross_encoder_refusal_wins_over_configuration(root):
    _record(root, {"kind": "cross-encoder", "enabled": False, "reason": "no better than fused",
                   "decided_at": "2026-01-01T00:00:00+00:00", "model_id": CE})
    c = choose_second_stage(root, "globex", 1, cross_encoder=CE, learned_enabled=True)
    assert c.kind is None and not c.info.enabled and c.info.reason == "no better than fused"
    assert c.info.gate["enabled"] is False and c.info.gate["kind"] == "cross-encoder"


def test_a_recorded_cross_encoder_promotion_needs_a_configured_model(root):
    _record(root, {"kind": "cross-encoder", "enabled": True, "reason": "ndcg up", "decided_at": "2026-01-01",
                   "model_id": "sha:abc"})
    on = choose_second_stage(root, "globex", 1, cross_encoder=CE, learned_enabled=False)
    assert (on.kind, on.info.model_id, on.info.reason) == ("cross-encoder", "sha:abc", "ndcg up")
    off = choose_second_stage(root, "globex", 1, cross_encoder=None, learned_enabled=False)
    assert off.kind is None and off.info.reason == "no cross-encoder configured"


def test_learned_rankers_switched_off_or_missing(root):
    _record(root, {"kind": "learned", "enabled": True, "reason": "promoted", "decided_at": "2026-01-01",
                   "model_id": "0" * 64})
    off = choose_second_stage(root, "globex", 1, cross_encoder=None, learned_enabled=False)
    assert off.kind is None and "switched off" in off.info.reason
    # enabled, but the stored model is missing: the next stage serves, the gate record says why
    missing = choose_second_stage(root, "globex", 1, cross_encoder=CE, learned_enabled=True)
    assert missing.kind == "cross-encoder" and missing.ranker is None
    assert missing.info.gate is not None and missing.info.gate["enabled"] is False


def test_decision_changed(root):
    first = choose_second_stage(root, "globex", 1, cross_encoder=CE, learned_enabled=True)
    assert not decision_changed(root, "globex", 1, first.info)
    _record(root, {"kind": "cross-encoder", "enabled": False, "reason": "demoted", "decided_at": "2026-02-01"})
    assert decision_changed(root, "globex", 1, first.info)
    assert not decision_changed(root, "globex", 1,
                                choose_second_stage(root, "globex", 1, cross_encoder=CE, learned_enabled=True).info)


def test_candidate_rows_must_hold_their_passages(root):
    index = TenantIndex.load(root, "globex")
    p0, p1 = index.passage_at(0), index.passage_at(1)
    ok = [Candidate(passage_id=p0.passage_id, doc_id=p0.doc_id, row=0, fused_rank=1, fused_score=1.0)]
    assert [p.passage_id for p in candidate_passages(index, ok)] == [p0.passage_id]
    assert rerank_inputs([p0])[0].text == p0.text and rerank_inputs([p0])[0].title == p0.envelope.title
    wrong = [Candidate(passage_id=p1.passage_id, doc_id=p1.doc_id, row=0, fused_rank=1, fused_score=1.0)]
    with pytest.raises(ValueError, match="does not match row 0"):
        candidate_passages(index, wrong)
