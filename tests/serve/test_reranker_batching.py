"""The cross-encoder Reranker deployment batches concurrent requests with @serve.batch:
several queries share one model call, and batched scores equal unbatched ones."""

from __future__ import annotations

import asyncio

import pytest

pytestmark = [pytest.mark.serve, pytest.mark.slow]


def test_concurrent_requests_share_batches(quarry_app, tmp_path_factory):
    from ray import serve

    from quarry.core.rank.cross_encoder import CrossEncoderReranker
    from quarry.core.rank.rerank import RerankInput
    from quarry.eval.bench_crossencoder import build_random_cross_encoder
    from quarry.serve.deployments.reranker import Reranker
    from quarry.serve.settings import AuthSettings, ServeSettings

    model = str(build_random_cross_encoder(tmp_path_factory.mktemp("ce"), layers=1, hidden=32, heads=2,
                                           intermediate=64, initializer_range=0.2))
    settings = ServeSettings(index_root=quarry_app.root, auth=AuthSettings(hs256_secret="x" * 40),
                             reranker_factory="quarry.core.rank.cross_encoder:CrossEncoderReranker",
                             reranker_options={"model": model, "max_length": 64}, reranker_batch_size=8)
    app = Reranker.options(name="BatchProbe", max_ongoing_requests=16,
                           ray_actor_options={"num_cpus": 0}).bind(settings)
    handle = serve.run(app, name="batch-probe", route_prefix=None)
    items = [(f"settlement cutoff question {i}",
              [RerankInput(f"p{i}-{j}", "Runbook", ("EUR",), f"EUR cutoff is {15 + j}:00 for batch {i}")
               for j in range(3)]) for i in range(8)]
    try:
        async def fire():
            return await asyncio.gather(*(handle.score_batch.remote(it) for it in items))

        batched = asyncio.run(fire())
        sizes = handle.recent_batch_sizes.remote().result()
    finally:
        serve.delete("batch-probe")
    assert max(sizes) > 1, sizes  # concurrent requests were scored together
    plain = CrossEncoderReranker(model, max_length=64)
    for (q, cands), got in zip(items, batched):
        assert got == pytest.approx(plain.score(q, cands), abs=1e-4)
