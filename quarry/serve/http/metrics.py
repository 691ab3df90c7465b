"""The Gateway's Prometheus metrics (through Ray's metrics agent), named."""

from __future__ import annotations

from ray.util.metrics import Counter, Histogram

LATENCY_MS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000]


class GatewayMetrics:
    def __init__(self) -> None:
        self.requests = Counter("quarry_requests", "HTTP requests", tag_keys=("endpoint", "status"))
        self.latency = Histogram("quarry_stage_latency_ms", "Latency per stage (ms)", boundaries=LATENCY_MS,
                                 tag_keys=("stage",))
        self.candidates = Histogram("quarry_candidates", "Fused candidates per search",
                                    boundaries=[1, 5, 10, 20, 50, 100, 200])
        self.delivered = Histogram("quarry_delivered_tokens", "Delivered tokens per search",
                                   boundaries=[50, 100, 200, 500, 1000, 1500, 2000, 4000])
        self.abstentions = Counter("quarry_abstentions", "Abstentions by reason code", tag_keys=("reason",))

    def count(self, endpoint: str, status: int) -> None:
        self.requests.inc(tags={"endpoint": endpoint, "status": str(status)})

    def observe_ms(self, stage: str, ms: float) -> float:
        self.latency.observe(ms, tags={"stage": stage})
        return ms

    def abstained(self, reason: str) -> None:
        self.abstentions.inc(tags={"reason": reason})
