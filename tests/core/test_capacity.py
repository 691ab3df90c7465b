"""Capacity arithmetic against the worked numbers of seed 000 §11.5, and the sizing rules."""

from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from quarry.core.capacity import arithmetic as cap
from quarry.core.capacity.arithmetic import AutoscalingPolicy, DeploymentLoad, Dist
from quarry.core.capacity.workload import WorkloadProfile, plan

pytestmark = pytest.mark.unit

SEED = Path(__file__).resolve().parents[2] / "infra" / "profiles" / "seed-11-5.yaml"


def seed_profile(**overrides) -> WorkloadProfile:
    data = yaml.safe_load(SEED.read_text())
    data.update(overrides)
    return WorkloadProfile.model_validate(data)


# --- the functions, one worked number each ---------------------------------------------------

def test_funnel_token_arithmetic_matches_seed():
    units = cap.reranker_token_units(40, 220)
    narrow = cap.delivered_tokens(4, 650)
    wide = cap.delivered_tokens(10, 700)
    assert (units, narrow, wide) == (8_800, 2_600, 7_000)
    assert cap.token_turns(narrow, 6) == 15_600
    assert cap.token_turns(wide, 6) == 42_000
    assert cap.avoided_token_turns(wide, narrow, 6) == 26_400
    assert 18_000 * cap.avoided_token_turns(wide, narrow, 6) == 475_200_000
    assert 18_000 * units == 158_400_000
    # one turn: 7,000 vs 2,600, a reduction of 4,400 against 8,800 reranker token-units
    assert cap.avoided_token_turns(wide, narrow, 1) == 4_400


def test_calls_latency_and_littles_law_match_seed():
    before, after = cap.calls_per_task(0.30, 2), cap.calls_per_task(0.15, 2)
    assert before == pytest.approx(1.6, abs=1e-12) and after == pytest.approx(1.3, abs=1e-12)
    assert cap.relative_fall(before, after) == pytest.approx(0.1875, abs=1e-12)
    pass_ms = cap.pass_latency_ms(70, 210, 1_800)
    assert pass_ms == 2_080
    slow, fast = cap.expected_latency_ms(pass_ms, 0.30), cap.expected_latency_ms(pass_ms, 0.15)
    assert slow == pytest.approx(2_704, abs=1e-9) and fast == pytest.approx(2_392, abs=1e-9)
    assert cap.halving_saving_ms(after, 210) == pytest.approx(136.5, abs=1e-9)
    assert slow - fast == pytest.approx(312, abs=1e-9)
    assert cap.in_flight(25, slow / 1000) == pytest.approx(67.6, abs=1e-9)
    assert cap.in_flight(25, fast / 1000) == pytest.approx(59.8, abs=1e-9)


def test_break_even_condition_flips_with_prices_and_turns():
    # 4,400 fewer tokens per turn at main price 1 against 8,800 units at reranker price 1:
    # the reranker pays only from the third turn on (break-even at exactly 2 turns).
    assert cap.break_even_turns(7_000, 2_600, 1.0, 8_800, 1.0) == pytest.approx(2.0)
    assert not cap.reranking_pays(7_000, 2_600, 1, 1.0, 8_800, 1.0)
    assert not cap.reranking_pays(7_000, 2_600, 2, 1.0, 8_800, 1.0)  # equal is not "pays"
    assert cap.reranking_pays(7_000, 2_600, 3, 1.0, 8_800, 1.0)
    # a cheap main model makes the simple path cheaper even at six turns
    assert not cap.reranking_pays(7_000, 2_600, 6, 0.01, 8_800, 1.0)
    # narrowing that delivers more than the wide path never pays (p95 expansion)
    assert cap.break_even_turns(7_000, 9_000, 1.0, 8_800, 1.0) == float("inf")


def test_rates_outside_unit_interval_are_refused():
    with pytest.raises(ValueError, match="insufficiency_rate"):
        cap.calls_per_task(1.5, 2)
    with pytest.raises(ValueError, match="repeat_rate"):
        cap.expected_latency_ms(100, -0.1)


def test_dist_from_samples_uses_quantiles_not_the_mean():
    samples = [100.0] * 90 + [5_000.0] * 10  # a long tail: scanned PDFs
    d = Dist.from_samples(samples)
    assert d.p50 == 100.0
    assert d.p95 == 5_000.0
    assert sum(samples) / len(samples) == 590.0  # the average hides both
    assert Dist.model_validate(7) == Dist(p50=7, p95=7)
    with pytest.raises(ValidationError, match="below p50"):
        Dist(p50=10, p95=5)
    with pytest.raises(ValueError, match="no samples"):
        Dist.from_samples([])


# --- the seed profile, end to end --------------------------------------------------------------

def test_seed_profile_plan_reproduces_every_worked_number():
    e = plan(seed_profile()).p50
    assert e.reranker_token_units == 8_800
    assert e.delivered_tokens == 2_600
    assert e.narrow_token_turns == 15_600
    assert e.wide_token_turns == 42_000
    assert e.avoided_token_turns == 26_400
    assert e.calls_per_day == 18_000
    assert e.avoided_token_turns_per_day == 475_200_000
    assert e.reranker_token_units_per_day == 158_400_000
    assert (e.one_turn.wide_tokens, e.one_turn.narrow_tokens) == (7_000, 2_600)
    assert (e.one_turn.reduction, e.one_turn.reranker_token_units) == (4_400, 8_800)
    assert (e.calls_per_task, e.calls_per_task_target, e.calls_fall) == (1.6, 1.3, 0.1875)
    assert (e.pass_ms, e.expected_latency_ms, e.expected_latency_target_ms) == (2_080, 2_704, 2_392)
    assert (e.rerank_halving_saving_ms, e.repeat_halving_saving_ms) == (136.5, 312)
    assert (e.active_paths, e.active_paths_target) == (67.6, 59.8)


def test_p95_is_computed_from_p95_inputs():
    prof = seed_profile()
    funnel = prof.funnel.model_copy(update={"section_tokens": Dist(p50=650, p95=2_500),
                                            "remaining_turns": Dist(p50=6, p95=14)})
    lat = prof.latency.model_copy(update={"rerank_ms": Dist(p50=210, p95=600)})
    p = plan(prof.model_copy(update={"funnel": funnel, "latency": lat}))
    assert p.p50.delivered_tokens == 2_600 and p.p95.delivered_tokens == 10_000
    # at p95 the "narrow" funnel delivers more than ten unranked sections: nothing avoided
    assert p.p95.avoided_token_turns == (7_000 - 10_000) * 14
    assert not p.p95.reranking_pays and p.p50.reranking_pays
    assert p.p95.pass_ms == 70 + 600 + 1_800
    assert p.p95.active_paths == pytest.approx(25 * 2_470 * 1.3 / 1000)


def test_poisson_quantile_against_scipy():
    stats = pytest.importorskip("scipy.stats")
    for mean in (0.01, 0.46, 3.15, 6.3, 80, 2_000):
        assert cap.poisson_quantile(mean) == int(stats.poisson.ppf(0.95, mean))
    assert cap.poisson_quantile(0) == 0


# --- sizing -------------------------------------------------------------------------------------

POLICY = AutoscalingPolicy(look_back_period_s=10, upscale_delay_s=10, downscale_delay_s=60, target_utilization=0.8)


def test_sizing_follows_littles_law():
    load = DeploymentLoad(service_ms=Dist(p50=70, p95=140), concurrency_per_replica=1)
    s = cap.size_deployment("Retriever", load, peak_calls_per_s=45, trough_calls_per_s=3.6, policy=POLICY)
    assert s.mean_in_flight == Dist(p50=3.15, p95=6.3)  # 45/s × 70 ms, 45/s × 140 ms
    assert s.in_flight_peak.p50 == 3.15
    assert s.in_flight_peak.p95 == 11                   # Poisson(6.3) 95th percentile
    assert s.target_ongoing_requests == 0.8
    assert s.replicas_peak == Dist(p50=4, p95=14)       # ceil(3.15/0.8), ceil(11/0.8)
    assert (s.min_replicas, s.max_replicas) == (1, 14)  # trough 3.6 × 0.07 = 0.252 in flight
    assert s.max_ongoing_requests == 2
    cfg = s.autoscaling_config()
    assert cfg["upscale_delay_s"] >= cfg["look_back_period_s"] <= cfg["downscale_delay_s"]


def test_batching_deployment_targets_a_full_batch():
    load = DeploymentLoad(service_ms=Dist(p50=210, p95=400), concurrency_per_replica=16, batch_size=16, num_gpus=1)
    s = cap.size_deployment("Reranker", load, peak_calls_per_s=200, trough_calls_per_s=10, policy=POLICY)
    assert s.target_ongoing_requests == 16
    assert s.max_ongoing_requests >= s.batch_size
    assert s.mean_in_flight.p95 == 80                   # 200/s × 0.4 s
    assert s.max_replicas == 6  # ceil(Poisson(80) p95 = 95 / 16)
    assert s.serve_options()["ray_actor_options"] == {"num_cpus": 1.0, "num_gpus": 1.0}


def test_cap_limits_max_replicas_and_says_so():
    load = DeploymentLoad(service_ms=100, concurrency_per_replica=1, max_replicas_cap=3)
    s = cap.size_deployment("Retriever", load, 100, 1, POLICY)
    assert s.capped and s.max_replicas == 3


def test_bad_policies_and_loads_are_refused():
    with pytest.raises(ValidationError, match="downscale_delay_s .* shorter than look_back_period_s"):
        AutoscalingPolicy(look_back_period_s=30, upscale_delay_s=30, downscale_delay_s=5)
    with pytest.raises(ValidationError, match="batch could never fill"):
        DeploymentLoad(service_ms=10, concurrency_per_replica=4, batch_size=16)
    with pytest.raises(ValueError, match="trough"):
        cap.size_deployment("Retriever", DeploymentLoad(service_ms=10, concurrency_per_replica=1), 1, 2, POLICY)


def test_profile_refuses_hand_picked_replicas_and_unknown_names():
    with pytest.raises(ValidationError, match="may not fix replica counts"):
        seed_profile(app_args={"retriever_replicas": 3})
    with pytest.raises(ValidationError, match="unknown deployment"):
        data = yaml.safe_load(SEED.read_text())
        data["deployments"]["Embedder"] = {"service_ms": 5, "concurrency_per_replica": 1}
        WorkloadProfile.model_validate(data)
    with pytest.raises(ValidationError, match="provenance names unknown"):
        seed_profile(provenance={"colour": "assumed"})


def test_seed_plan_sizes_every_deployment_with_autoscaling():
    p = plan(seed_profile())
    assert [d.name for d in p.deployments] == ["Gateway", "Retriever", "Reranker"]
    r = p.deployment("Retriever")
    assert r.peak_requests_per_s == 45  # 25 tasks/s × 1.8 calls
    assert r.mean_in_flight.p50 == 3.15  # 45/s × 70 ms
    assert r.max_replicas == 8           # ceil(Poisson(3.15) p95 = 6 / 0.8)
    assert p.deployment("Reranker").num_gpus == 1


def test_capacity_modules_import_no_heavy_frameworks():
    import subprocess
    import sys

    code = ("import sys, quarry.core.capacity.arithmetic, quarry.core.capacity.workload\n"
            "print(','.join(m for m in ('ray', 'pyspark', 'torch', 'yaml') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


# --------------------------------------------------------------------------- tenants and memory


def test_tenant_memory_hot_tenants_and_replicas():
    from quarry.core.capacity.tenant_memory import TenantLoad, plan_tenant_memory, retriever_replicas

    gib, mib = 2**30, 2**20
    m = plan_tenant_memory(TenantLoad(tenants=10_000, working_set=200, index_bytes_per_tenant=20 * mib,
                                      replica_memory_bytes=16 * gib, replica_base_bytes=1.5 * gib, headroom=0.8))
    # (16 GiB x 0.8 - 1.5 GiB) / 20 MiB = 11.3 GiB / 20 MiB = 578.56 -> 578
    assert m.tenants_hot_per_replica == 578
    assert m.working_set_fits_each_replica and m.replicas_if_partitioned == 1 and m.lru_tenants == 200
    assert m.replica_memory_for_working_set == pytest.approx((1.5 * gib + 200 * 20 * mib) / 0.8, abs=0.1)
    assert m.all_tenants_bytes == 10_000 * 20 * mib
    big = plan_tenant_memory(TenantLoad(tenants=10_000, working_set=2_000, index_bytes_per_tenant=20 * mib,
                                        replica_memory_bytes=16 * gib))
    assert not big.working_set_fits_each_replica and big.replicas_if_partitioned == 4  # ceil(2000 / 578)
    assert big.lru_tenants == 578
    assert retriever_replicas(3, big) == 4 and retriever_replicas(7, big) == 7


def test_tenant_memory_edges():
    from quarry.core.capacity.tenant_memory import (
        TenantLoad, parse_bytes, plan_tenant_memory, quantile, tenants_hot_per_replica)
    from quarry.core.errors import UsageError

    assert parse_bytes("16GiB") == 16 * 2**30 and parse_bytes("40MB") == 40e6 and parse_bytes("512") == 512
    with pytest.raises(UsageError):
        parse_bytes("lots")
    assert tenants_hot_per_replica(1 * 2**30, 2 * 2**30, 2**20) == 0  # base alone exceeds the replica
    tiny = plan_tenant_memory(TenantLoad(tenants=5, working_set=5, index_bytes_per_tenant=2**30,
                                         replica_memory_bytes=2**30))
    assert tiny.tenants_hot_per_replica == 0 and tiny.replicas_if_partitioned == 0 and not tiny.working_set_fits_each_replica
    with pytest.raises(UsageError):
        plan_tenant_memory(TenantLoad(tenants=5, working_set=6, index_bytes_per_tenant=1, replica_memory_bytes=2**30))
    assert quantile([5, 1, 3, 2, 4], 0.95) == 5 and quantile([5, 1, 3, 2, 4], 0.5) == 3
