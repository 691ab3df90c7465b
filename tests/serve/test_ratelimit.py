"""Tenant limits without Serve: the limiter (memory and a real Redis server shared by two
limiter instances, as two Gateway replicas would share it) and the bounded tenant labels."""

from __future__ import annotations

import asyncio
import importlib.util
import time
from contextlib import AsyncExitStack
from pathlib import Path

import pytest

from quarry.core.records import Principal
from quarry.serve.http.ratelimit import LimitExceeded, TenantLimiter
from quarry.serve.settings import TenantLimits, TenantOverride
from quarry.serve.tenant_labels import OTHER, TenantLabels

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]


def _p(tenant="acme", subject="u1") -> Principal:
    return Principal(tenant=tenant, subject=subject, groups=frozenset({"support"}))


def arun(coro):
    return asyncio.run(coro)


async def _calls(lim: TenantLimiter, p: Principal, n: int) -> list[LimitExceeded | None]:
    out = []
    for _ in range(n):
        try:
            async with lim.admit(p):
                out.append(None)
        except LimitExceeded as e:
            out.append(e)
    return out


@pytest.fixture(scope="module")
def redis_url():
    spec = importlib.util.spec_from_file_location("redis_server", REPO / "scripts" / "redis_server.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    try:
        server = mod.RedisServer()
        url = server.start()
    except FileNotFoundError as e:
        pytest.skip(str(e))
    yield url
    server.stop()


CFG = TenantLimits(window_s=30, requests_per_tenant=6, requests_per_subject=4, concurrent_per_tenant=2,
                   overrides={"big": TenantOverride(requests_per_tenant=50, requests_per_subject=40,
                                                    concurrent_per_tenant=5)})


@pytest.mark.parametrize("strategy", ["moving-window", "fixed-window"])
def test_subject_then_tenant_rate_with_stated_limit_and_retry(strategy):
    async def go():
        lim = TenantLimiter(CFG.model_copy(update={"strategy": strategy}))
        first = await _calls(lim, _p(subject="a"), 5)
        assert first[:4] == [None] * 4
        e = first[4]
        assert e.scope == "subject" and e.kind == "rate" and e.limit == 4 and e.window_s == 30
        assert isinstance(e.retry_after_s, int) and 1 <= e.retry_after_s <= 30
        assert e.body["limit"] == {"scope": "subject", "kind": "rate", "limit": 4, "window_s": 30,
                                   "reset_at": e.body["limit"]["reset_at"], "retry_after_s": e.retry_after_s}
        assert time.time() < e.body["limit"]["reset_at"] <= time.time() + 30.01
        assert "4 requests per 30 s" in e.body["detail"]
        # the refused subject call spent nothing of the tenant's: another subject gets the last 2
        second = await _calls(lim, _p(subject="b"), 3)
        assert second[:2] == [None, None] and second[2].scope == "tenant" and second[2].limit == 6
        # other tenants are untouched, and an override raises one tenant's limits
        assert await _calls(lim, _p("globex"), 4) == [None] * 4
        big = await _calls(lim, _p("big", "svc"), 41)
        assert big[:40] == [None] * 40 and big[40].limit == 40

    arun(go())


def test_concurrency_slots_per_tenant_and_released_after_the_call():
    async def go():
        lim = TenantLimiter(CFG.model_copy(update={"requests_per_tenant": 1000, "requests_per_subject": 1000}))
        async with AsyncExitStack() as stack:
            for i in range(2):
                await stack.enter_async_context(lim.admit(_p(subject=f"s{i}")))
            with pytest.raises(LimitExceeded) as e:
                await stack.enter_async_context(lim.admit(_p(subject="s3")))
            assert e.value.kind == "concurrency" and e.value.scope == "tenant" and e.value.limit == 2
            assert e.value.body["limit"]["window_s"] is None and e.value.retry_after_s == 1
            await stack.enter_async_context(lim.admit(_p("globex")))  # another tenant's slots
        # released: the tenant may run two at once again, even after a call that raised
        with pytest.raises(RuntimeError):
            async with lim.admit(_p()):
                raise RuntimeError("tool failed")
        async with lim.admit(_p()), lim.admit(_p(subject="x")):
            pass

    arun(go())


def test_disabled_limits_admit_everything():
    async def go():
        lim = TenantLimiter(CFG.model_copy(update={"enabled": False}))
        assert await _calls(lim, _p(), 20) == [None] * 20

    arun(go())


@pytest.mark.slow
def test_redis_counters_and_slots_are_shared_by_two_limiters(redis_url):
    async def go():
        prefix = f"rl{time.time_ns()}"
        a = TenantLimiter(CFG, redis_url=redis_url, prefix=prefix)
        b = TenantLimiter(CFG, redis_url=redis_url, prefix=prefix)
        # 4 per subject over both "replicas": 2 on each, then both refuse
        assert await _calls(a, _p(), 2) == [None, None]
        assert await _calls(b, _p(), 2) == [None, None]
        ra, rb = (await _calls(a, _p(), 1))[0], (await _calls(b, _p(), 1))[0]
        assert ra.scope == rb.scope == "subject" and 1 <= ra.retry_after_s <= 30
        # the tenant's 6: two more from another subject, on either replica
        assert (await _calls(b, _p(subject="z"), 3))[2].scope == "tenant"
        assert await _calls(a, _p("globex"), 3) == [None] * 3
        # slots: two in flight over both replicas, the third refused on either
        lim2 = CFG.model_copy(update={"requests_per_tenant": 1000, "requests_per_subject": 1000})
        a2 = TenantLimiter(lim2, redis_url=redis_url, prefix=prefix + "c")
        b2 = TenantLimiter(lim2, redis_url=redis_url, prefix=prefix + "c")
        async with a2.admit(_p("initech")), b2.admit(_p("initech", "u2")):
            for lim in (a2, b2):
                with pytest.raises(LimitExceeded) as e:
                    async with lim.admit(_p("initech", "u3")):
                        pass
                assert e.value.kind == "concurrency"
        async with b2.admit(_p("initech")), a2.admit(_p("initech")):
            pass  # released by both
        # a separate prefix (another deployment) shares nothing
        c = TenantLimiter(CFG, redis_url=redis_url, prefix=prefix + "other")
        assert await _calls(c, _p(), 4) == [None] * 4
        for lim in (a, b, a2, b2, c):
            await lim.slots.aclose()

    arun(go())


def test_redis_down_admits_calls():
    async def go():
        lim = TenantLimiter(CFG, redis_url="redis://127.0.0.1:1/0", prefix="down", timeout_s=0.5)
        assert await _calls(lim, _p(), 8) == [None] * 8  # fair-share limits fail open; runs still fail closed

    arun(go())


# -- bounded tenant labels -----------------------------------------------------------------------

def test_top_tenants_by_traffic_are_named_the_rest_are_other():
    labels = TenantLabels(top_n=3, refresh_every=10)
    for _ in range(50):
        for t, n in (("a", 5), ("b", 4), ("c", 3)):
            for _ in range(n):
                labels.observe(t)
    for i in range(200):
        labels.observe(f"small-{i}")  # a long tail of tenants seen once each
    assert {t: labels.label(t) for t in ("a", "b", "c", "small-7", "small-199")} == {
        "a": "a", "b": "b", "c": "c", "small-7": OTHER, "small-199": OTHER}
    assert len(labels._counts) <= labels.capacity  # counters are bounded too


def test_a_new_heavy_tenant_takes_a_label_and_the_label_set_stays_bounded():
    labels = TenantLabels(top_n=2, refresh_every=8)
    for _ in range(20):
        labels.observe("a")
        labels.observe("b")
    for _ in range(200):  # c becomes the heaviest
        labels.observe("c")
    assert labels.label("c") == "c"
    # churn: waves of new heavy tenants never grow the names used past 2 * top_n
    seen = set()
    for wave in range(30):
        for _ in range(300):
            seen.add(labels.observe(f"wave-{wave}"))
    assert len(labels.emitted) <= 4 and len(seen - {OTHER}) <= 4
    assert labels.observe("wave-29") == OTHER  # the cap is reached: later newcomers stay "other"


def test_gateway_metrics_count_under_bounded_labels():
    from quarry.serve.http.metrics import GatewayMetrics

    m = GatewayMetrics(top_tenants=2)
    labels = [m.tenant_call(f"t{i % 50}", "search", 200, 1.0) for i in range(2000)]
    assert len(set(labels)) <= 2 * 2 + 1 and OTHER in labels


class _Gauge:
    def __init__(self):
        self.values: dict[tuple[str, str], float] = {}

    def set(self, v, tags):
        self.values[(tags["tenant"], tags["stat"])] = v


def test_change_lag_gauge_uses_the_bounded_labels_and_other_is_the_worst_lag(monkeypatch):
    from types import SimpleNamespace

    from quarry.core.lru import LRU
    from quarry.serve.deployments import retriever as mod

    cls = mod.Retriever.func_or_class
    lags = {"big": 1.0, "small-1": 5.0, "small-2": 9.0, "small-3": 2.0}
    monkeypatch.setattr(mod, "lag_summary", lambda state: {"max_s": lags[state], "count": 1})
    fake = SimpleNamespace(_staleness_gauge=_Gauge(), _tenant_labels=TenantLabels(1), _other_lags=LRU(16))
    for _ in range(10):
        fake._tenant_labels.observe("big")
    for t in lags:  # the small tenants each seen once: "other"
        if t != "big":
            fake._tenant_labels.observe(t)
        cls._record_staleness(fake, t, SimpleNamespace(delta=SimpleNamespace(state=t)))
    assert fake._staleness_gauge.values == {("big", "max"): 1.0, (OTHER, "max"): 9.0}
