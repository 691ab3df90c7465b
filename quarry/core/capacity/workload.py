"""Workload profiles (``infra/profiles/*.yaml``) and the capacity plan computed from one.

A profile holds what the arithmetic in ``quarry.core.capacity.arithmetic`` needs: arrival rates, calls
per task, the funnel's widths and token sizes, persistence turns, recovery rates, stage
latencies and each deployment's measured service time, each as p50/p95. ``provenance``
says, per field, whether a number was measured (and where, on which machine) or assumed.
``plan(profile)`` evaluates everything at p50 and at p95 and sizes every deployment.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from quarry.core.errors import UsageError
from quarry.core.capacity import arithmetic as cap
from quarry.core.capacity.arithmetic import QUANTILES, AutoscalingPolicy, DeploymentLoad, DeploymentSizing, Dist

DEPLOYMENTS = ("Gateway", "Retriever", "Reranker", "Resolver")  # the Serve application's deployment names


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Funnel(_Frozen):
    candidates: Dist                 # fused candidates the second stage inspects
    tokens_per_candidate: Dist       # query + title + chunk + metadata, per candidate
    survivors: Dist                  # kept by the second stage (top_k)
    section_tokens: Dist             # one survivor after parent expansion
    wide_sections: Dist              # the alternative: unranked sections carried instead
    wide_section_tokens: Dist
    remaining_turns: Dist            # model turns the delivered evidence persists
    # Measured delivered tokens per call (traces) replace survivors × section_tokens.
    delivered_tokens: Dist | None = None


class Recovery(_Frozen):
    insufficiency_rate: float = Field(ge=0, le=1)   # first calls judged insufficient
    recovery_calls: float = Field(ge=0)             # further calls such a task makes
    repeat_rate: float = Field(ge=0, le=1)          # tasks that need another full pass
    repeat_passes: float = Field(default=1, ge=0)   # passes each such task repeats
    target_insufficiency_rate: float = Field(ge=0, le=1)  # the what-if: a better first call
    target_repeat_rate: float = Field(ge=0, le=1)


class Latency(_Frozen):
    retrieve_ms: Dist    # first stage (filter, legs, fuse)
    rerank_ms: Dist      # second stage
    judge_turn_ms: Dist  # the agent's model turn that judges the evidence and continues


class Prices(_Frozen):
    """Per million tokens (main model input) and per million token-units (reranker)."""

    main_input_per_mtok: float = Field(gt=0)
    reranker_per_mtok: float = Field(ge=0)


class Cluster(_Frozen):
    """Worker shape for the KubeRay manifest: the plan's replica demand is packed onto
    workers of this size (the Ray autoscaler adds and removes them between the bounds)."""

    image: str = "registry.example.com/quarry/quarry-serve:0.1.0"  # FROM rayproject/ray:2.60.0-py311 + quarry-rag[serve]
    ray_version: str = "2.60.0"
    head_cpus: float = Field(default=2, gt=0)
    head_memory: str = "8Gi"
    cpu_worker_cpus: float = Field(default=8, gt=0)
    cpu_worker_memory: str = "32Gi"
    gpu_worker_cpus: float = Field(default=8, gt=0)
    gpu_worker_gpus: int = Field(default=1, ge=1)
    gpu_worker_memory: str = "64Gi"


class WorkloadProfile(_Frozen):
    name: str
    description: str = ""
    measured_on: str | None = None        # the machine measured numbers come from
    tasks_per_day: float = Field(ge=0)
    peak_tasks_per_s: float = Field(gt=0)
    trough_tasks_per_s: float = Field(ge=0)
    calls_per_task: float = Field(ge=1)   # observed mean retrieval calls per task
    funnel: Funnel
    recovery: Recovery
    latency: Latency
    prices: Prices
    autoscaling: AutoscalingPolicy = AutoscalingPolicy()
    deployments: dict[str, DeploymentLoad]
    cluster: Cluster = Cluster()
    app_args: dict[str, Any] = Field(default_factory=dict)  # non-sizing Serve application args
    provenance: dict[str, str] = Field(default_factory=dict)  # field -> "measured: ..." / "assumed: ..."

    @field_validator("deployments")
    @classmethod
    def _known(cls, v: dict[str, DeploymentLoad]) -> dict[str, DeploymentLoad]:
        unknown = sorted(set(v) - set(DEPLOYMENTS))
        if unknown:
            raise UsageError(f"unknown deployment(s) {unknown}; the application has {list(DEPLOYMENTS)}")
        if not {"Gateway", "Retriever"} <= set(v):
            raise UsageError("deployments must size at least Gateway and Retriever")
        return v

    @field_validator("app_args")
    @classmethod
    def _no_counts(cls, v: dict[str, Any]) -> dict[str, Any]:
        picked = sorted(k for k in v if k.endswith("_replicas"))
        if picked:
            raise UsageError(f"app_args may not fix replica counts ({picked}): the plan computes them")
        return v

    @model_validator(mode="after")
    def _rates_and_provenance(self) -> "WorkloadProfile":
        if self.trough_tasks_per_s > self.peak_tasks_per_s:
            raise UsageError("trough_tasks_per_s exceeds peak_tasks_per_s")
        tops = set(type(self).model_fields)
        bad = sorted(k for k in self.provenance if k.split(".")[0] not in tops)
        if bad:
            raise UsageError(f"provenance names unknown fields {bad}")
        return self


class OneTurn(_Frozen):
    """The answer comes straight after retrieval: evidence persists one turn."""

    wide_tokens: float
    narrow_tokens: float
    reduction: float
    reranker_token_units: float
    reranking_pays: bool


class Economics(_Frozen):
    """Every figure of seed §11.5 at one quantile."""

    reranker_token_units: float
    delivered_tokens: float
    narrow_token_turns: float
    wide_tokens: float
    wide_token_turns: float
    avoided_token_turns: float
    calls_per_day: float
    avoided_token_turns_per_day: float
    reranker_token_units_per_day: float
    reranking_pays: bool
    break_even_turns: float
    one_turn: OneTurn
    calls_per_task: float
    calls_per_task_target: float
    calls_fall: float
    pass_ms: float
    expected_latency_ms: float
    expected_latency_target_ms: float
    rerank_halving_saving_ms: float
    repeat_halving_saving_ms: float
    active_paths: float
    active_paths_target: float
    peak_calls_per_s: float


class CapacityPlan(_Frozen):
    profile: str
    measured_on: str | None
    p50: Economics
    p95: Economics
    deployments: tuple[DeploymentSizing, ...]

    def deployment(self, name: str) -> DeploymentSizing:
        for d in self.deployments:
            if d.name == name:
                return d
        raise KeyError(f"no deployment {name!r} in plan; have {[d.name for d in self.deployments]}")


def _r(x: float) -> float:
    """Decimal inputs give the decimal answers the seed prints (0.3 × 2,080 is 624, not
    623.9999…): figures are rounded to 1e-6."""
    return x if x in (float("inf"), float("-inf")) else round(x, 6)


def economics(p: WorkloadProfile, q: cap.Quantile) -> Economics:
    f, rec, lat, pr = p.funnel, p.recovery, p.latency, p.prices
    units = cap.reranker_token_units(f.candidates.at(q), f.tokens_per_candidate.at(q))
    narrow = (f.delivered_tokens.at(q) if f.delivered_tokens is not None
              else cap.delivered_tokens(f.survivors.at(q), f.section_tokens.at(q)))
    wide = cap.delivered_tokens(f.wide_sections.at(q), f.wide_section_tokens.at(q))
    turns = f.remaining_turns.at(q)
    avoided = cap.avoided_token_turns(wide, narrow, turns)
    main, rr = pr.main_input_per_mtok, pr.reranker_per_mtok
    calls_day = p.tasks_per_day * p.calls_per_task
    cpt = cap.calls_per_task(rec.insufficiency_rate, rec.recovery_calls)
    cpt_target = cap.calls_per_task(rec.target_insufficiency_rate, rec.recovery_calls)
    pass_ms = cap.pass_latency_ms(lat.retrieve_ms.at(q), lat.rerank_ms.at(q), lat.judge_turn_ms.at(q))
    exp_ms = cap.expected_latency_ms(pass_ms, rec.repeat_rate, rec.repeat_passes)
    exp_target = cap.expected_latency_ms(pass_ms, rec.target_repeat_rate, rec.repeat_passes)
    exp_half = cap.expected_latency_ms(pass_ms, rec.repeat_rate / 2, rec.repeat_passes)
    return Economics(
        reranker_token_units=_r(units), delivered_tokens=_r(narrow),
        narrow_token_turns=_r(cap.token_turns(narrow, turns)), wide_tokens=_r(wide),
        wide_token_turns=_r(cap.token_turns(wide, turns)), avoided_token_turns=_r(avoided),
        calls_per_day=_r(calls_day), avoided_token_turns_per_day=_r(calls_day * avoided),
        reranker_token_units_per_day=_r(calls_day * units),
        reranking_pays=cap.reranking_pays(wide, narrow, turns, main, units, rr),
        break_even_turns=_r(cap.break_even_turns(wide, narrow, main, units, rr)),
        one_turn=OneTurn(wide_tokens=_r(cap.token_turns(wide, 1)), narrow_tokens=_r(cap.token_turns(narrow, 1)),
                         reduction=_r(cap.avoided_token_turns(wide, narrow, 1)), reranker_token_units=_r(units),
                         reranking_pays=cap.reranking_pays(wide, narrow, 1, main, units, rr)),
        calls_per_task=_r(cpt), calls_per_task_target=_r(cpt_target),
        calls_fall=_r(cap.relative_fall(cpt, cpt_target)),
        pass_ms=_r(pass_ms), expected_latency_ms=_r(exp_ms), expected_latency_target_ms=_r(exp_target),
        # The seed's "1.3 expected passes": a pass per retrieval call of the improved task.
        rerank_halving_saving_ms=_r(cap.halving_saving_ms(cpt_target, lat.rerank_ms.at(q))),
        repeat_halving_saving_ms=_r(exp_ms - exp_half),
        active_paths=_r(cap.in_flight(p.peak_tasks_per_s, exp_ms / 1000)),
        active_paths_target=_r(cap.in_flight(p.peak_tasks_per_s, exp_target / 1000)),
        peak_calls_per_s=_r(p.peak_tasks_per_s * p.calls_per_task),
    )


def plan(p: WorkloadProfile) -> CapacityPlan:
    peak = p.peak_tasks_per_s * p.calls_per_task
    trough = p.trough_tasks_per_s * p.calls_per_task
    sized = tuple(cap.size_deployment(name, p.deployments[name], peak, trough, p.autoscaling)
                  for name in DEPLOYMENTS if name in p.deployments)
    return CapacityPlan(profile=p.name, measured_on=p.measured_on,
                        **{q: economics(p, q) for q in QUANTILES}, deployments=sized)


def load_profile(path: str | Path) -> WorkloadProfile:
    """A workload profile YAML, validated; every problem is a one-line :class:`UsageError`."""
    import yaml  # deferred: the capacity arithmetic itself imports no YAML parser (tests/core/test_capacity.py)

    try:
        data = yaml.safe_load(Path(path).read_text())
    except OSError as e:
        raise UsageError(f"cannot read profile {path}: {e.strerror}") from e
    except yaml.YAMLError as e:
        raise UsageError(f"{path} is not valid YAML: {e}") from e
    if not isinstance(data, dict):
        raise UsageError(f"{path}: expected a mapping of profile fields (see infra/profiles/seed-11-5.yaml)")
    try:
        return WorkloadProfile.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(x) for x in err["loc"]) or "profile"
        raise UsageError(f"{path}: {where}: {err['msg']} ({e.error_count()} problem(s) in all)") from e
