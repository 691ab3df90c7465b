"""Per-tenant and per-subject request rates and per-tenant concurrency, at the Gateway.

Every agent tool call (REST and MCP alike, through ``AgentTools``) is admitted here after
the token is verified, so limits are keyed by the verified principal only: a caller cannot
pick whose counter it spends. Two checks, in order:

1. **Rate** (the ``limits`` library, moving or fixed window): the subject's counter
   (``tenant/subject``), then the tenant's. A refusal on the subject spends nothing of the
   tenant's.
2. **Concurrency**: a slot among the tenant's ``concurrent_per_tenant``, held for the
   call and released after it.

Storage: the replica's memory by default; Redis when ``redis_url`` is configured, so all
Gateway replicas share the counters (rates through the library's Redis storage, slots as a
sorted set of leases scored by expiry, so a replica that dies holding slots frees them
after ``concurrency_lease_s``). A Redis that does not answer lets the call through (logged):
these limits share capacity fairly, they guard no data; the run store still fails closed.

A refusal raises :class:`LimitExceeded`, whose ``body`` names the limit (scope, kind, limit,
window, reset time) and whose ``retry_after_s`` becomes the ``Retry-After`` header.
"""

from __future__ import annotations

import logging
import math
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from limits import RateLimitItemPerSecond
from limits.aio import storage as lstorage
from limits.aio import strategies

from quarry.core.records import Principal

from quarry.serve.settings import TenantLimits

log = logging.getLogger(__name__)

_ACQUIRE = """
local now, lease, limit = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= limit then return 0 end
redis.call('ZADD', KEYS[1], now + lease, ARGV[4])
redis.call('PEXPIRE', KEYS[1], lease)
return 1
"""


class LimitExceeded(Exception):
    """A call past one of its principal's limits: HTTP 429."""

    def __init__(self, scope: str, kind: str, limit: int, window_s: int | None, reset_at: float, now: float):
        super().__init__(f"{kind} limit of this {scope} reached ({limit})")
        self.scope, self.kind, self.limit, self.window_s, self.reset_at = scope, kind, limit, window_s, reset_at
        self.retry_after_s = max(1, math.ceil(reset_at - now))

    @property
    def body(self) -> dict[str, Any]:
        if self.kind == "rate":
            what = f"{self.limit} requests per {self.window_s} s"
        else:
            what = f"{self.limit} requests in flight"
        return {"detail": f"rate limit exceeded for this {self.scope}: {what}; retry after {self.retry_after_s} s",
                "limit": {"scope": self.scope, "kind": self.kind, "limit": self.limit, "window_s": self.window_s,
                          "reset_at": round(self.reset_at, 3), "retry_after_s": self.retry_after_s}}


class MemorySlots:
    """Concurrency slots in this replica's memory."""

    def __init__(self) -> None:
        self._held: Counter[str] = Counter()

    async def acquire(self, tenant: str, limit: int, now: float) -> str | float:
        """A lease id, or (refused) when to try again: calls are short, so in a second."""
        if self._held[tenant] >= limit:
            return now + 1.0
        self._held[tenant] += 1
        return tenant

    async def release(self, tenant: str, lease: str) -> None:
        self._held[tenant] -= 1
        if self._held[tenant] <= 0:
            del self._held[tenant]


class RedisSlots:
    """Concurrency slots shared by every Gateway replica: one sorted set of leases per
    tenant (``{tenant}`` hash tag), scored by when each lease lapses."""

    def __init__(self, url: str, prefix: str, lease_s: float, timeout_s: float):
        import redis.asyncio as aioredis

        self._r = aioredis.Redis.from_url(url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s)
        self._p, self._lease_ms = prefix, int(lease_s * 1000)
        self._acquire = self._r.register_script(_ACQUIRE)

    def _key(self, tenant: str) -> str:
        return f"{self._p}:{{{tenant}}}:inflight"

    async def acquire(self, tenant: str, limit: int, now: float) -> str | float:
        lease = uuid.uuid4().hex
        ok = await self._acquire(keys=[self._key(tenant)], args=[int(now * 1000), self._lease_ms, limit, lease])
        return lease if int(ok) else now + 1.0  # calls are short: a slot is likely free within a second

    async def release(self, tenant: str, lease: str) -> None:
        await self._r.zrem(self._key(tenant), lease)

    async def aclose(self) -> None:
        await self._r.aclose()


class TenantLimiter:
    """One per Gateway replica (``AgentTools.limiter``)."""

    def __init__(self, cfg: TenantLimits, *, redis_url: str | None = None, prefix: str = "quarry",
                 timeout_s: float = 2.0, clock: Callable[[], float] = time.time):
        self.cfg, self.clock = cfg, clock
        if redis_url:
            store = lstorage.RedisStorage("async+" + redis_url, implementation="redispy", wrap_exceptions=True,
                                          key_prefix=f"{prefix}:limits", socket_timeout=timeout_s,
                                          socket_connect_timeout=timeout_s)
            self.slots: MemorySlots | RedisSlots = RedisSlots(redis_url, f"{prefix}:limits", cfg.concurrency_lease_s,
                                                              timeout_s)
        else:
            store = lstorage.MemoryStorage()
            self.slots = MemorySlots()
        strategy = strategies.MovingWindowRateLimiter if cfg.strategy == "moving-window" \
            else strategies.FixedWindowRateLimiter
        self.rates = strategy(store)

    def _item(self, amount: int) -> RateLimitItemPerSecond:
        return RateLimitItemPerSecond(amount, self.cfg.window_s, namespace="quarry")

    async def check_rate(self, principal: Principal) -> None:
        per_tenant, per_subject = self.cfg.requests(principal.tenant)
        for scope, amount, key in (("subject", per_subject, (principal.tenant, principal.subject)),
                                   ("tenant", per_tenant, (principal.tenant,))):
            item = self._item(amount)
            if not await self.rates.hit(item, scope, *key):
                stats = await self.rates.get_window_stats(item, scope, *key)
                now = self.clock()
                raise LimitExceeded(scope, "rate", amount, self.cfg.window_s, max(stats.reset_time, now), now)

    @asynccontextmanager
    async def admit(self, principal: Principal) -> AsyncIterator[None]:
        """Admit one call of ``principal`` (rate, then a concurrency slot held for the
        call) or raise ``LimitExceeded``."""
        if not self.cfg.enabled:
            yield
            return
        from limits.errors import StorageError
        from redis.exceptions import RedisError

        tenant = principal.tenant
        lease: str | None = None
        try:
            await self.check_rate(principal)
            now = self.clock()
            limit = self.cfg.concurrency(tenant)
            got = await self.slots.acquire(tenant, limit, now)
            if not isinstance(got, str):
                raise LimitExceeded("tenant", "concurrency", limit, None, got, now)
            lease = got
        except (StorageError, RedisError, OSError):
            log.warning("limit store unavailable; admitting the call unlimited", exc_info=True)
        try:
            yield
        finally:
            if lease is not None:
                try:
                    await self.slots.release(tenant, lease)
                except (RedisError, OSError):
                    log.warning("releasing a concurrency slot failed; it lapses with its lease", exc_info=True)
