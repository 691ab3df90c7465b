"""The Gateway's Prometheus metrics (through Ray's metrics agent), named.

Per-tenant series carry a bounded ``tenant`` label (``quarry.serve.tenant_labels``): the
replica's top tenants by traffic by name, every other tenant as ``"other"``. Ray exports
each metric with a ``ray_`` prefix (a counter also with ``_total``); ``infra/grafana/``
queries them so."""

from __future__ import annotations

from ray.util.metrics import Counter, Histogram

from quarry.serve.tenant_labels import TenantLabels

LATENCY_MS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000]

# every metric the Gateway defines (the Retriever adds quarry_change_lag_seconds and
# quarry_query_vector_cache); tests/serve/test_dashboard.py checks the dashboard against these
REQUESTS, STAGE_LATENCY = "quarry_requests", "quarry_stage_latency_ms"
TENANT_REQUESTS, TENANT_LATENCY = "quarry_tenant_requests", "quarry_tenant_latency_ms"
TENANT_ERRORS, TENANT_LIMITED = "quarry_tenant_errors", "quarry_tenant_limited"


class GatewayMetrics:
    def __init__(self, top_tenants: int = 20) -> None:
        self.tenant_labels = TenantLabels(top_tenants)
        self.requests = Counter(REQUESTS, "HTTP requests", tag_keys=("endpoint", "status"))
        self.latency = Histogram(STAGE_LATENCY, "Latency per stage (ms)", boundaries=LATENCY_MS,
                                 tag_keys=("stage",))
        self.candidates = Histogram("quarry_candidates", "Fused candidates per search",
                                    boundaries=[1, 5, 10, 20, 50, 100, 200])
        self.delivered = Histogram("quarry_delivered_tokens", "Delivered tokens per search",
                                   boundaries=[50, 100, 200, 500, 1000, 1500, 2000, 4000])
        self.abstentions = Counter("quarry_abstentions", "Abstentions by reason code", tag_keys=("reason",))
        self.tenant_requests = Counter(TENANT_REQUESTS, "Tool calls per tenant label (top N by traffic, else other)",
                                       tag_keys=("tenant", "endpoint", "status"))
        self.tenant_latency = Histogram(TENANT_LATENCY, "Tool call latency per tenant label (ms)",
                                        boundaries=LATENCY_MS, tag_keys=("tenant", "endpoint"))
        self.tenant_errors = Counter(TENANT_ERRORS, "Tool calls that failed on the server (5xx) per tenant label",
                                     tag_keys=("tenant", "endpoint"))
        self.tenant_limited = Counter(TENANT_LIMITED, "Tool calls refused by a tenant limit (429) per tenant label",
                                      tag_keys=("tenant", "endpoint", "scope", "kind"))

    def count(self, endpoint: str, status: int) -> None:
        self.requests.inc(tags={"endpoint": endpoint, "status": str(status)})

    def observe_ms(self, stage: str, ms: float) -> float:
        self.latency.observe(ms, tags={"stage": stage})
        return ms

    def abstained(self, reason: str) -> None:
        self.abstentions.inc(tags={"reason": reason})

    def tenant_call(self, tenant: str, endpoint: str, status: int, ms: float) -> str:
        """One finished tool call of ``tenant``; returns the label it was counted under."""
        label = self.tenant_labels.observe(tenant)
        self.tenant_requests.inc(tags={"tenant": label, "endpoint": endpoint, "status": str(status)})
        self.tenant_latency.observe(ms, tags={"tenant": label, "endpoint": endpoint})
        if status >= 500:
            self.tenant_errors.inc(tags={"tenant": label, "endpoint": endpoint})
        return label

    def tenant_refused(self, tenant: str, endpoint: str, scope: str, kind: str) -> None:
        label = self.tenant_labels.label(tenant)
        self.tenant_limited.inc(tags={"tenant": label, "endpoint": endpoint, "scope": scope, "kind": kind})
