"""Capacity arithmetic: what one retrieval call costs in reranker work, delivered tokens and
token-turns, how many calls and passes a task makes, how many paths are in flight, and the
Ray Serve sizing of each deployment that follows (seed 000 §11.5, DESIGN §6).

Pure functions over plain numbers and frozen records; no ray, pyspark or torch. Each
quantity is evaluated at p50 and at p95 of its inputs (``Dist``), not from averages only.
Evaluating a product at the p95 of every factor is an upper bound on the product's p95 when
the factors are independent; ``Dist.from_samples`` over per-call products (traces) gives the
real one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from quarry.core.errors import UsageError
Quantile = Literal["p50", "p95"]
QUANTILES: tuple[Quantile, ...] = ("p50", "p95")


class Dist(BaseModel):
    """A non-negative quantity at its median and 95th percentile. A bare number means a
    point value (p50 = p95), as in an illustrative profile."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    p50: float = Field(ge=0)
    p95: float = Field(ge=0)

    @model_validator(mode="before")
    @classmethod
    def _scalar(cls, v: Any) -> Any:
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return {"p50": v, "p95": v}
        return v

    @model_validator(mode="after")
    def _ordered(self) -> "Dist":
        if self.p95 < self.p50:
            raise UsageError(f"p95 ({self.p95}) is below p50 ({self.p50}); swap them or re-measure")
        return self

    @classmethod
    def from_samples(cls, samples: Sequence[float]) -> "Dist":
        """Quantiles of measured samples (linear interpolation, numpy's default)."""
        import numpy as np

        if len(samples) == 0:
            raise UsageError("no samples: a distribution needs at least one measurement")
        a = np.asarray(samples, dtype=float)
        return cls(p50=float(np.percentile(a, 50)), p95=float(np.percentile(a, 95)))

    def at(self, q: Quantile) -> float:
        return self.p50 if q == "p50" else self.p95


# --- cost of one retrieval call -------------------------------------------------------------

def reranker_token_units(candidates: float, tokens_per_candidate: float) -> float:
    """Candidate text the reranker inspects, paid once per call: 40 × 220 = 8,800."""
    return candidates * tokens_per_candidate


def delivered_tokens(sections: float, tokens_per_section: float) -> float:
    """Evidence inserted into the agent's context after expansion: 4 × 650 = 2,600."""
    return sections * tokens_per_section


def token_turns(tokens: float, turns: float) -> float:
    """One token presented on one model turn; evidence is paid on every turn it persists."""
    return tokens * turns


def avoided_token_turns(wide_tokens: float, narrow_tokens: float, turns: float) -> float:
    """Main-model context the funnel avoids: 42,000 − 15,600 = 26,400 token-turns."""
    return token_turns(wide_tokens, turns) - token_turns(narrow_tokens, turns)


def reranking_pays(wide_tokens: float, narrow_tokens: float, remaining_turns: float,
                   main_input_price: float, reranker_units: float, reranker_price: float) -> bool:
    """The break-even condition: (wide − narrow) × remaining turns × main-model input price
    > reranker work × reranker price (both prices per the same token unit)."""
    return (wide_tokens - narrow_tokens) * remaining_turns * main_input_price > reranker_units * reranker_price


def break_even_turns(wide_tokens: float, narrow_tokens: float, main_input_price: float,
                     reranker_units: float, reranker_price: float) -> float:
    """Remaining turns above which reranking pays (inf when narrowing saves nothing)."""
    saved_per_turn = (wide_tokens - narrow_tokens) * main_input_price
    return math.inf if saved_per_turn <= 0 else reranker_units * reranker_price / saved_per_turn


# --- calls, passes and latency per task -----------------------------------------------------

def calls_per_task(insufficiency_rate: float, recovery_calls: float) -> float:
    """Expected retrieval calls per task: 1 + (0.30 × 2) = 1.6."""
    _rate(insufficiency_rate, "insufficiency_rate")
    return 1 + insufficiency_rate * recovery_calls


def relative_fall(before: float, after: float) -> float:
    """(1.6 − 1.3) / 1.6 = 18.75% (as a fraction)."""
    if before <= 0:
        raise ValueError(f"relative_fall needs a positive baseline, got {before}")
    return (before - after) / before


def pass_latency_ms(*stage_ms: float) -> float:
    """One successful pass: retrieve + rerank + the judging model turn = 2,080 ms."""
    return float(sum(stage_ms))


def expected_latency_ms(pass_ms: float, repeat_rate: float, repeats: float = 1) -> float:
    """Retrieval-path latency of the expected task: 2,080 + (0.30 × 2,080) = 2,704 ms."""
    _rate(repeat_rate, "repeat_rate")
    return pass_ms + repeat_rate * repeats * pass_ms


def halving_saving_ms(expected_passes: float, stage_ms: float) -> float:
    """What halving one stage saves per task: 1.3 × (210 / 2) = 136.5 ms."""
    return expected_passes * stage_ms / 2


def in_flight(arrival_per_s: float, time_in_system_s: float) -> float:
    """Little's law, L = λW: 25 tasks/s × 2.704 s = 67.6 concurrently active paths."""
    return arrival_per_s * time_in_system_s


def poisson_quantile(mean: float, q: float = 0.95) -> int:
    """Smallest k with P(N <= k) >= q for N ~ Poisson(mean). With Poisson arrivals the
    number of requests in service is Poisson around Little's-law mean (M/G/inf), so this is
    the in-flight count to size for at quantile q, not the mean."""
    if mean < 0 or not 0 < q < 1:
        raise ValueError(f"poisson_quantile needs mean >= 0 and 0 < q < 1, got {mean}, {q}")
    if mean == 0:
        return 0
    k, log_pmf = 0, -mean
    total = math.exp(log_pmf)
    while total < q:
        k += 1
        log_pmf += math.log(mean) - math.log(k)
        total += math.exp(log_pmf)
    return k


def _rate(x: float, name: str) -> None:
    if not 0 <= x <= 1:
        raise UsageError(f"{name} must be a fraction in [0, 1], got {x}")


# --- per-deployment sizing -> Ray Serve options ---------------------------------------------

class AutoscalingPolicy(BaseModel):
    """How eagerly replicas follow load. Delays shorter than the look-back window would act
    on a window that does not yet reflect the previous decision, so they are refused."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    look_back_period_s: float = Field(default=30.0, gt=0)
    upscale_delay_s: float = Field(default=30.0, ge=0)
    downscale_delay_s: float = Field(default=600.0, ge=0)
    # Fraction of a replica's measured concurrency the autoscaler aims for: the rest absorbs
    # bursts while it reacts.
    target_utilization: float = Field(default=0.8, gt=0, le=1)

    @model_validator(mode="after")
    def _delays(self) -> "AutoscalingPolicy":
        for name in ("upscale_delay_s", "downscale_delay_s"):
            if getattr(self, name) < self.look_back_period_s:
                raise UsageError(f"{name} ({getattr(self, name)}) is shorter than look_back_period_s "
                                 f"({self.look_back_period_s}); raise it to at least the look-back window")
        return self


class DeploymentLoad(BaseModel):
    """One deployment's measured behaviour: ``service_ms`` is the time a request spends in a
    replica while ``concurrency_per_replica`` requests share it (for a batching deployment,
    a full batch of ``batch_size``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    service_ms: Dist
    concurrency_per_replica: float = Field(gt=0)
    visits_per_call: float = Field(default=1.0, ge=0)  # requests this deployment gets per search
    batch_size: int | None = Field(default=None, ge=1)
    num_cpus: float = Field(default=1.0, ge=0)
    num_gpus: float = Field(default=0.0, ge=0)
    max_replicas_cap: int | None = Field(default=None, ge=1)  # what the cluster can hold

    @model_validator(mode="after")
    def _batch(self) -> "DeploymentLoad":
        if self.batch_size is not None and self.concurrency_per_replica < self.batch_size:
            raise UsageError(f"concurrency_per_replica ({self.concurrency_per_replica}) is below batch_size "
                             f"({self.batch_size}): a batch could never fill; measure at a full batch")
        return self


class DeploymentSizing(BaseModel):
    """Replicas and Ray Serve options for one deployment, with the figures they came from."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    peak_requests_per_s: float
    mean_in_flight: Dist          # λ_peak × service time at p50/p95 (Little's law)
    in_flight_peak: Dist          # p50: the mean; p95: Poisson 95th percentile at p95 service
    replicas_peak: Dist           # in_flight_peak / target_ongoing_requests, rounded up
    min_replicas: int
    max_replicas: int
    capped: bool                  # max_replicas was limited by max_replicas_cap
    target_ongoing_requests: float
    max_ongoing_requests: int
    batch_size: int | None
    look_back_period_s: float
    upscale_delay_s: float
    downscale_delay_s: float
    num_cpus: float
    num_gpus: float

    def autoscaling_config(self) -> dict[str, Any]:
        return {
            "min_replicas": self.min_replicas,
            "initial_replicas": self.min_replicas,
            "max_replicas": self.max_replicas,
            "target_ongoing_requests": self.target_ongoing_requests,
            "look_back_period_s": self.look_back_period_s,
            "upscale_delay_s": self.upscale_delay_s,
            "downscale_delay_s": self.downscale_delay_s,
        }

    def serve_options(self) -> dict[str, Any]:
        """This deployment's entry in a Serve config's ``deployments`` list."""
        return {
            "name": self.name,
            "max_ongoing_requests": self.max_ongoing_requests,
            "autoscaling_config": self.autoscaling_config(),
            "ray_actor_options": {"num_cpus": self.num_cpus, "num_gpus": self.num_gpus},
        }


def size_deployment(name: str, load: DeploymentLoad, peak_calls_per_s: float, trough_calls_per_s: float,
                    policy: AutoscalingPolicy) -> DeploymentSizing:
    """Replicas from Little's law: in-flight requests at peak over the per-replica target.

    - ``target_ongoing_requests``: measured concurrency × target utilisation; a batching
      deployment targets one full batch instead (a lower target would never fill one).
    - ``max_ongoing_requests``: twice the target, so a replica at target still takes a
      burst while the autoscaler reacts; never below the batch size.
    - ``max_replicas`` covers peak at p95 service time; ``min_replicas`` the trough at p50.
    """
    if trough_calls_per_s > peak_calls_per_s:
        raise UsageError(f"trough rate {trough_calls_per_s}/s exceeds peak rate {peak_calls_per_s}/s")
    lam = peak_calls_per_s * load.visits_per_call
    mean_in_flight = Dist(p50=round(in_flight(lam, load.service_ms.p50 / 1000), 6),
                          p95=round(in_flight(lam, load.service_ms.p95 / 1000), 6))
    # p50: Little's-law mean at median service time; p95: the Poisson 95th percentile of
    # the in-flight count at p95 service time (bursts, not the average, fill replicas).
    flight = Dist(p50=mean_in_flight.p50, p95=max(mean_in_flight.p95, poisson_quantile(mean_in_flight.p95)))
    target = float(load.batch_size) if load.batch_size else load.concurrency_per_replica * policy.target_utilization
    need = Dist(p50=_ceil(flight.p50 / target), p95=_ceil(flight.p95 / target))
    trough = in_flight(trough_calls_per_s * load.visits_per_call, load.service_ms.p50 / 1000)
    lo = max(1, _ceil(trough / target))
    hi = max(lo, int(need.p95))
    capped = load.max_replicas_cap is not None and hi > load.max_replicas_cap
    if capped:
        hi = max(lo, load.max_replicas_cap)
    return DeploymentSizing(
        name=name, peak_requests_per_s=lam, mean_in_flight=mean_in_flight, in_flight_peak=flight, replicas_peak=need,
        min_replicas=lo, max_replicas=hi, capped=capped, target_ongoing_requests=round(target, 6),
        max_ongoing_requests=max(_ceil(2 * target), load.batch_size or 1), batch_size=load.batch_size,
        look_back_period_s=policy.look_back_period_s, upscale_delay_s=policy.upscale_delay_s,
        downscale_delay_s=policy.downscale_delay_s, num_cpus=load.num_cpus, num_gpus=load.num_gpus,
    )


def _ceil(x: float) -> int:
    # 3.0000000001 from float noise is 3 replicas, not 4.
    return math.ceil(round(x, 6))
