"""The Reranker deployment's stage choice, in-process (no Ray): the configured
cross-encoder is served when no gate-promoted learned ranker exists, and a recorded
cross-encoder decision that said no switches it off."""

from __future__ import annotations

import asyncio

import pytest

pytestmark = [pytest.mark.slow]


@pytest.fixture(scope="module")
def tiny_ce(tmp_path_factory):
    pytest.importorskip("sentence_transformers")
    from quarry.eval.bench_crossencoder import build_random_cross_encoder

    return str(build_random_cross_encoder(tmp_path_factory.mktemp("ce"), layers=1, hidden=32, heads=2,
                                          intermediate=64))


@pytest.fixture(scope="module")
def index_root(tmp_path_factory):
    from quarry.core.embed.embedders import HashingEmbedder
    from quarry.core.ingest.pipeline import build_corpus
    from quarry.core.ingest.sources import SAMPLE_CORPUS, load_documents

    root = str(tmp_path_factory.mktemp("idx"))
    docs, _ = load_documents(SAMPLE_CORPUS)
    build_corpus([d for d in docs if d.tenant == "globex"], root, HashingEmbedder(dim=64))
    return root


def _reranker(root, **kw):
    from quarry.serve.deployments.reranker import Reranker
    from quarry.serve.settings import AuthSettings, ServeSettings

    s = ServeSettings(index_root=root, auth=AuthSettings(hs256_secret="x" * 40), stage_check_s=0, **kw)
    r = Reranker.func_or_class(s)

    async def unbatched(item):  # @serve.batch needs a replica context; score one query directly
        q, cands = item
        return [float(x) for x in r.cross.score(q, cands)]

    r.score_batch = unbatched
    return r


def _candidates(root):
    from quarry.core.embed.embedders import HashingEmbedder
    from quarry.core.index.shards import TenantIndex
    from quarry.core.rank.train import mine_candidates
    from quarry.core.records import Principal
    from quarry.core.search.settings import SearchSettings

    idx = TenantIndex.load(root, "globex")
    p = Principal(tenant="globex", subject="u", groups=frozenset({"all-staff"}))
    m = mine_candidates(idx, p, HashingEmbedder(dim=64), {"q": "Security add-on SSO price"},
                        SearchSettings(candidate_width=8))["q"]
    return idx.generation, tuple(m.candidates)


def test_cross_encoder_is_served_without_a_promoted_ranker(index_root, tiny_ce):
    r = _reranker(index_root, reranker_factory="quarry.core.rank.cross_encoder:CrossEncoderReranker",
                  reranker_options={"model": tiny_ce, "max_length": 64})
    from quarry.core.search.records import RerankRequest

    gen, cands = _candidates(index_root)
    req = RerankRequest(tenant="globex", generation=gen, query="Security add-on SSO price", candidates=cands, top_k=3)
    out = asyncio.run(r.rerank(req))
    assert out.status == "applied" and out.info.kind == "cross-encoder"
    assert [x.rerank_rank for x in out.ranked] == [1, 2, 3]
    assert {x.passage_id for x in out.ranked} <= {c.passage_id for c in cands}
    # a candidate whose row does not hold that passage (another generation) is refused
    bad = (cands[0].model_copy(update={"passage_id": "globex-nope@1#x"}), *cands[1:])
    with pytest.raises(ValueError, match="does not match row"):
        asyncio.run(r.rerank(req.model_copy(update={"candidates": bad})))

    # the gate recorded a cross-encoder decision that said no: nothing is served
    from quarry.core.rank.gate import evaluate_gate, record_decision

    record_decision(index_root, "globex", gen, evaluate_gate(0.6, 0.55, model_id=None), kind="cross-encoder")
    out = asyncio.run(r.rerank(req))
    assert out.status == "skipped" and out.ranked == () and out.info.enabled is False
    assert "does not beat the margin" in out.info.reason


def test_nothing_configured_is_skipped_with_a_reason(index_root):
    r = _reranker(index_root)
    gen, cands = _candidates(index_root)
    info = asyncio.run(r.describe("globex", gen))
    assert info.enabled is False and info.reason
