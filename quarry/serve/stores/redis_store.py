"""The Redis (or Valkey) run store for clusters: the ``RunStore`` protocol over ``redis.asyncio``.

Each run decision is one optimistic transaction: WATCH the run's key, read it, apply the
pure rule from ``quarry.core.agent.runs``, then MULTI/SET/EXEC; a concurrent change to the same
run aborts the EXEC and the decision is re-read and re-applied. So the rules are written
once (in Python, shared with the actor store) and stay atomic across any number of
gateway replicas. Creating a run is one Lua script, because its quota check spans keys:

- ``<p>:{tenant}:run:<id>``: the run state (JSON), expiring ``run_ttl_s`` after creation;
- ``<p>:{tenant}:open`` and ``<p>:{tenant}:open:<subject hash>``: sorted sets of the
  tenant's and the subject's open runs, scored by expiry (expired members are trimmed
  before counting);
- ``<p>:{tenant}:all``: every run the tenant holds, for ``runs_kept_per_tenant``: at the
  cap, the tenant's own oldest finished run is deleted; open runs are never evicted.

Every key of a tenant shares the ``{tenant}`` hash tag, so a Redis Cluster keeps them in
one slot and the script stays single-slot.
"""

from __future__ import annotations

import hashlib
import time
import uuid
from collections.abc import Callable
from typing import Any

from quarry.core.agent import runs as rules
from quarry.core.agent.runs import RunState, subject_of, tenant_of

from quarry.serve.stores.runstore import QuotaExceeded, RunNotFound, StoreUnavailable
from quarry.serve.settings import ServeSettings

_CREATE = """
local now, ttl = tonumber(ARGV[1]), tonumber(ARGV[2])
for i = 2, 4 do redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', now) end
if redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[3]) then return 'tenant' end
if redis.call('ZCARD', KEYS[3]) >= tonumber(ARGV[4]) then return 'subject' end
if redis.call('ZCARD', KEYS[4]) >= tonumber(ARGV[5]) then
  local n_open = redis.call('ZCARD', KEYS[2])
  local victim = nil
  for _, id in ipairs(redis.call('ZRANGE', KEYS[4], 0, n_open)) do
    if not redis.call('ZSCORE', KEYS[2], id) then victim = id break end
  end
  if not victim then return 'tenant' end
  redis.call('DEL', ARGV[8] .. victim)
  redis.call('ZREM', KEYS[4], victim)
end
local exp = now + ttl
redis.call('SET', KEYS[1], ARGV[6], 'PX', ttl)
for i = 2, 4 do
  redis.call('ZADD', KEYS[i], exp, ARGV[7])
  redis.call('PEXPIRE', KEYS[i], ttl)
end
return 'ok'
"""

_MAX_CONFLICT_RETRIES = 32


class RedisRunStore:
    def __init__(self, url: str, *, prefix: str, ttl_s: int, open_per_tenant: int, open_per_subject: int,
                 kept_per_tenant: int, timeout_s: float = 10.0):
        import redis.asyncio as aioredis

        self._r = aioredis.Redis.from_url(url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s)
        self._p, self._ttl_ms = prefix, int(ttl_s * 1000)
        self._limits = (open_per_tenant, open_per_subject, kept_per_tenant)
        self._create = self._r.register_script(_CREATE)

    @classmethod
    def from_settings(cls, s: ServeSettings) -> "RedisRunStore":
        return cls(s.redis_url or "", prefix=s.store_name_prefix, ttl_s=s.run_ttl_s,
                   open_per_tenant=s.runs_open_per_tenant, open_per_subject=s.runs_open_per_subject,
                   kept_per_tenant=s.runs_kept_per_tenant, timeout_s=s.store_timeout_s)

    # -- keys ------------------------------------------------------------------------------
    def _base(self, pkey: str) -> str:
        return f"{self._p}:{{{tenant_of(pkey)}}}"

    def _keys(self, pkey: str, run_id: str) -> tuple[str, str, str, str]:
        b = self._base(pkey)
        subj = hashlib.sha256(subject_of(pkey).encode()).hexdigest()[:16]
        return f"{b}:run:{run_id}", f"{b}:open", f"{b}:open:{subj}", f"{b}:all"

    async def _guard(self, coro):
        from redis.exceptions import ConnectionError as RConnError
        from redis.exceptions import TimeoutError as RTimeout

        try:
            return await coro
        except (RConnError, RTimeout, OSError):
            raise StoreUnavailable("redis") from None

    # -- protocol --------------------------------------------------------------------------
    async def create(self, pkey: str, budget: int) -> rules.RunView:
        s = RunState(run_id=str(uuid.uuid4()), principal_key=pkey, budget=budget)
        keys = self._keys(pkey, s.run_id)
        lim_t, lim_s, kept = self._limits
        out = await self._guard(self._create(keys=list(keys), args=[
            int(time.time() * 1000), self._ttl_ms, lim_t, lim_s, kept, s.model_dump_json(), s.run_id,
            f"{self._base(pkey)}:run:"]))
        out = out.decode() if isinstance(out, bytes) else out
        if out != "ok":
            raise QuotaExceeded(out, lim_t if out == "tenant" else lim_s)
        return rules.view(s)

    async def _decide(self, run_id: str, pkey: str, fn: Callable[..., tuple[RunState | None, Any]], *args: Any):
        from redis.exceptions import WatchError

        if not isinstance(run_id, str) or not run_id or len(run_id) > 100:
            raise RunNotFound(run_id)
        key, open_t, open_s, _ = self._keys(pkey, run_id)
        async with self._r.pipeline(transaction=True) as pipe:
            for _ in range(_MAX_CONFLICT_RETRIES):
                try:
                    await self._guard(pipe.watch(key))
                    raw = await self._guard(pipe.get(key))
                    if raw is None:
                        raise RunNotFound(run_id)
                    state = RunState.model_validate_json(raw)
                    if state.principal_key != pkey:
                        raise RunNotFound(run_id)
                    new, result = fn(state, *args)
                    if new is None or new == state:
                        await pipe.unwatch()
                        return result
                    pipe.multi()
                    pipe.set(key, new.model_dump_json(), keepttl=True)
                    if new.finished and not state.finished:
                        pipe.zrem(open_t, run_id)
                        pipe.zrem(open_s, run_id)
                    await self._guard(pipe.execute())
                    return result
                except WatchError:
                    continue  # another replica changed this run first: re-read and re-decide
        raise StoreUnavailable("redis: too many conflicting writes on one run")

    async def get(self, run_id: str, pkey: str) -> rules.RunView:
        return await self._decide(run_id, pkey, lambda s: (None, rules.view(s)))

    async def reserve_search(self, run_id: str, pkey: str) -> rules.SearchDecision:
        return await self._decide(run_id, pkey, rules.decide_reserve)

    async def record_results(self, run_id: str, pkey: str, ids: list[str],
                             rejected_ids: list[str] = ()) -> rules.SearchDecision:
        return await self._decide(run_id, pkey, rules.decide_record, ids, list(rejected_ids))

    async def apply_search(self, run_id: str, pkey: str, ids: list[str],
                           rejected_ids: list[str] = ()) -> rules.SearchDecision:
        return await self._decide(run_id, pkey, rules.decide_search, ids, list(rejected_ids))

    async def record_fetch(self, run_id: str, pkey: str, ids: list[str], rejected_ids: list[str] = ()
                           ) -> rules.RunView:
        return await self._decide(run_id, pkey, rules.decide_fetch, ids, list(rejected_ids))

    async def begin_answer(self, run_id: str, pkey: str) -> rules.AnswerStart:
        return await self._decide(run_id, pkey, rules.decide_begin_answer)

    async def end_answer(self, run_id: str, pkey: str, outcome: str) -> None:
        try:
            await self._decide(run_id, pkey, rules.decide_end_answer, outcome)
        except RunNotFound:
            pass

    async def aclose(self) -> None:
        await self._r.aclose()
