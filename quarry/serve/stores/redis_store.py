"""The Redis (or Valkey) run store for clusters: the ``RunStore`` protocol over ``redis.asyncio``.

Each run decision is one optimistic transaction: WATCH the run's key, read it, apply the
pure rule from ``quarry.core.agent.runs``, then MULTI/SET/EXEC; a concurrent change to the same
run aborts the EXEC and the decision is re-read and re-applied. So the rules are written
once (in Python, shared with the actor store) and stay atomic across any number of
gateway replicas. Creating a run is one Lua script, because its quota check spans keys:

- ``<p>:{tenant}:run:<id>``: the run state (JSON), expiring ``run_ttl_s`` after creation;
- ``<p>:{tenant}:open`` and ``<p>:{tenant}:open:<subject hash>``: sorted sets of the
  tenant's and the subject's open runs, scored by when each closes: the earlier of its TTL
  and ``run_idle_s`` after its last call (every call on the run moves it). Members past
  their score are trimmed before counting; a run whose key still exists but which is no
  longer open without being finished was closed idle, and answers not-found (its key is
  deleted then). The lowest score of a full set is the reset time a 429 states;
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
local now, ttl, idle = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[9])
for i = 2, 4 do redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', now) end
local function first(k) return redis.call('ZRANGE', k, 0, 0, 'WITHSCORES')[2] or tostring(now) end
if redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[3]) then return {'tenant', first(KEYS[2])} end
if redis.call('ZCARD', KEYS[3]) >= tonumber(ARGV[4]) then return {'subject', first(KEYS[3])} end
if redis.call('ZCARD', KEYS[4]) >= tonumber(ARGV[5]) then
  local n_open = redis.call('ZCARD', KEYS[2])
  local victim = nil
  for _, id in ipairs(redis.call('ZRANGE', KEYS[4], 0, n_open)) do
    if not redis.call('ZSCORE', KEYS[2], id) then victim = id break end
  end
  if not victim then return {'tenant', first(KEYS[2])} end
  redis.call('DEL', ARGV[8] .. victim)
  redis.call('ZREM', KEYS[4], victim)
end
local exp = now + ttl
redis.call('SET', KEYS[1], ARGV[6], 'PX', ttl)
for i = 2, 4 do
  redis.call('ZADD', KEYS[i], (i < 4) and math.min(exp, now + idle) or exp, ARGV[7])
  redis.call('PEXPIRE', KEYS[i], ttl)
end
return {'ok', '0'}
"""

_MAX_CONFLICT_RETRIES = 32


class RedisRunStore:
    def __init__(self, url: str, *, prefix: str, ttl_s: int, open_per_tenant: int, open_per_subject: int,
                 kept_per_tenant: int, idle_s: float | None = None,
                 overrides: dict[str, tuple[int, int]] | None = None, timeout_s: float = 10.0):
        import redis.asyncio as aioredis

        self._r = aioredis.Redis.from_url(url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s)
        self._p, self._ttl_ms = prefix, int(ttl_s * 1000)
        self._idle_ms = int(idle_s * 1000) if idle_s is not None else self._ttl_ms
        self._limits = (open_per_tenant, open_per_subject, kept_per_tenant)
        self._overrides = dict(overrides or {})  # tenant -> (open per tenant, open per subject)
        self._create = self._r.register_script(_CREATE)

    @classmethod
    def from_settings(cls, s: ServeSettings) -> "RedisRunStore":
        return cls(s.redis_url or "", prefix=s.store_name_prefix, ttl_s=s.run_ttl_s,
                   open_per_tenant=s.runs_open_per_tenant, open_per_subject=s.runs_open_per_subject,
                   kept_per_tenant=s.runs_kept_per_tenant, idle_s=s.run_idle_s,
                   overrides={t: s.runs_open_for(t) for t in s.tenant_limits.overrides}, timeout_s=s.store_timeout_s)

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
        lim_t, lim_s = self._overrides.get(tenant_of(pkey), (lim_t, lim_s))
        now_ms = int(time.time() * 1000)
        out, first = await self._guard(self._create(keys=list(keys), args=[
            now_ms, self._ttl_ms, lim_t, lim_s, kept, s.model_dump_json(), s.run_id,
            f"{self._base(pkey)}:run:", self._idle_ms]))
        out = out.decode() if isinstance(out, bytes) else out
        if out != "ok":
            reset_s = max(0.0, (float(first) - now_ms) / 1000)
            raise QuotaExceeded(out, lim_t if out == "tenant" else lim_s, reset_s)
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
                    now_ms = int(time.time() * 1000)
                    if not state.finished:
                        closes = await self._guard(pipe.zscore(open_t, run_id))
                        if closes is None or closes < now_ms:  # closed idle (or trimmed as such)
                            pipe.multi()
                            pipe.delete(key)
                            pipe.zrem(open_t, run_id)
                            pipe.zrem(open_s, run_id)
                            await self._guard(pipe.execute())
                            raise RunNotFound(run_id)
                        left_ms = await self._guard(pipe.pttl(key))
                    new, result = fn(state, *args)
                    if state.finished and (new is None or new == state):
                        await pipe.unwatch()
                        return result
                    pipe.multi()
                    if new is not None and new != state:
                        pipe.set(key, new.model_dump_json(), keepttl=True)
                    if new is not None and new.finished and not state.finished:
                        pipe.zrem(open_t, run_id)
                        pipe.zrem(open_s, run_id)
                    elif not state.finished:  # a call on an open run: its idle clock restarts
                        closes = now_ms + min(max(left_ms, 0), self._idle_ms)
                        pipe.zadd(open_t, {run_id: closes}, xx=True)
                        pipe.zadd(open_s, {run_id: closes}, xx=True)
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

    async def purge(self, tenant: str, doc_id: str | None = None, version: str | None = None) -> int:
        """Rewrite each of the tenant's runs without the document's ids (its TTL kept), or
        delete every key of the tenant (``doc_id`` None). Redis keeps no other copy."""
        base = f"{self._p}:{{{tenant}}}"
        changed = 0
        if doc_id is None:
            keys = [k async for k in self._r.scan_iter(match=f"{base}:*")]
            changed = sum(1 for k in keys if b":run:" in (k if isinstance(k, bytes) else k.encode()))
            if keys:
                await self._guard(self._r.delete(*keys))
            return changed
        async for key in self._r.scan_iter(match=f"{base}:run:*"):
            raw = await self._guard(self._r.get(key))
            if raw is None:
                continue
            state = RunState.model_validate_json(raw)
            new = rules.without_document(state, doc_id, version)
            if new != state:
                await self._guard(self._r.set(key, new.model_dump_json(), keepttl=True, xx=True))
                changed += 1
        return changed

    async def aclose(self) -> None:
        await self._r.aclose()
