"""The Serve application: ``serve run quarry.serve.app:build_app index_root=...`` or the
config in ``infra/serve/quarry-serve.yaml``."""

from __future__ import annotations

from typing import Any

from ray.serve import Application

from .deployments import Reranker, Retriever
from .gateway import Gateway
from .settings import ServeSettings, settings_from_args


def build_app(args: dict[str, Any] | ServeSettings | None = None) -> Application:
    s = settings_from_args(args)
    reranker = None
    if s.reranker_enabled:
        # max_ongoing_requests must cover a full batch or @serve.batch never fills one.
        reranker = Reranker.options(
            max_ongoing_requests=max(s.max_ongoing_requests, 2 * s.reranker_batch_size),
            ray_actor_options={"num_cpus": s.reranker_num_cpus, "num_gpus": s.reranker_num_gpus},
        ).bind(s)
    retriever = Retriever.options(
        num_replicas=s.retriever_replicas, max_ongoing_requests=max(s.max_ongoing_requests, s.encode_batch_size),
        ray_actor_options={"num_cpus": 0.5},
    ).bind(s, reranker)
    return Gateway.options(
        num_replicas=s.gateway_replicas, max_ongoing_requests=4 * s.max_ongoing_requests,
        ray_actor_options={"num_cpus": 0.25},
    ).bind(s, retriever)
