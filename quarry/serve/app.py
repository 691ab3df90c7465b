"""The Serve application: ``serve run quarry.serve.app:build_app index_root=...`` or the
config in ``infra/serve/quarry-serve.yaml``."""

from __future__ import annotations

from typing import Any

from ray.serve import Application

from quarry.core.capacity.workload import DEPLOYMENTS

from quarry.serve.deployments.reranker import Reranker
from quarry.serve.deployments.resolver import Resolver
from quarry.serve.deployments.retriever import Retriever
from quarry.serve.http.gateway import Gateway
from quarry.serve.settings import ServeSettings, settings_from_args


def _options(s: ServeSettings, name: str, **defaults: Any) -> dict[str, Any]:
    """The builder's defaults for deployment ``name``, overridden by the planned options
    (``quarry plan``); an autoscaling config replaces a fixed replica count."""
    opts = {**defaults, **s.deployment_options.get(name, {})}
    if opts.get("autoscaling_config"):
        opts.pop("num_replicas", None)
    return opts


def build_app(args: dict[str, Any] | ServeSettings | None = None) -> Application:
    s = settings_from_args(args)
    unknown = sorted(set(s.deployment_options) - set(DEPLOYMENTS))
    if unknown:
        raise ValueError(f"deployment_options for unknown deployment(s) {unknown}; "
                         f"the application has {', '.join(DEPLOYMENTS)}")
    # Serve restarts a replica whose check_health fails or times out (each deployment has one).
    health = {"health_check_period_s": s.health_check_period_s, "health_check_timeout_s": s.health_check_timeout_s}
    reranker = None
    if s.reranker_enabled:
        # max_ongoing_requests must cover a full batch or @serve.batch never fills one.
        reranker = Reranker.options(**_options(
            s, "Reranker", max_ongoing_requests=max(s.max_ongoing_requests, 2 * s.reranker_batch_size),
            ray_actor_options={"num_cpus": s.reranker_num_cpus, "num_gpus": s.reranker_num_gpus}, **health,
        )).bind(s)
    retriever = Retriever.options(**_options(
        s, "Retriever", num_replicas=s.retriever_replicas,
        max_ongoing_requests=max(s.max_ongoing_requests, s.encode_batch_size),  # a full encode batch fits
        ray_actor_options={"num_cpus": s.retriever_num_cpus, "num_gpus": s.retriever_num_gpus}, **health,
    )).bind(s)
    # Resolution is light CPU work over the evidence the Retriever gathered; it calls nothing back.
    resolver = Resolver.options(**_options(
        s, "Resolver", max_ongoing_requests=s.max_ongoing_requests, ray_actor_options={"num_cpus": s.resolver_num_cpus}, **health,
    )).bind(s)
    # The gateway also serves MCP at /mcp (quarry/serve/http/mcp.py) from the same FastAPI app.
    return Gateway.options(**_options(
        s, "Gateway", num_replicas=s.gateway_replicas, max_ongoing_requests=4 * s.max_ongoing_requests,
        ray_actor_options={"num_cpus": s.gateway_num_cpus}, **health,
    )).bind(s, retriever, reranker, resolver)
