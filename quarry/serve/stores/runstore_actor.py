"""The in-cluster run store: one named, restartable Ray actor with its state checkpointed.

``RunTable`` holds the runs, enforces the quotas and writes the checkpoint; it is plain
Python (tested without Ray). ``RunStoreActor`` wraps one table in an actor, so every
decision is one method call on the one copy of the state. ``ActorRunStore`` is what a
gateway replica holds: it implements the ``RunStore`` protocol over the actor handle.

Durability: every change is appended to a write-ahead log before the call returns and the
log is folded into a snapshot when it grows, so a restarted actor reads back every run
(``quarry.serve.stores.run_checkpoint``: ``runs.log``/``runs.snap`` in a local
``state_dir``, one object per change plus a snapshot object under a URI ``state_dir``, by
default ``<index_root>/_serve/runs`` on a URI root, so an actor re-created on another node
reads the same runs). Locally a process crash loses nothing; a machine crash can lose the
last writes the OS had not written out, which fails closed (a lost run answers the generic
not-found). Each entry carries a sequence number and the snapshot records the last one it
holds, so replaying a log that outlived its snapshot never rolls a run back.

Quotas and eviction are per tenant: runs are kept in one ordered table per tenant, open
runs are counted per tenant and per subject (limits overridable per tenant), and only a
tenant's own oldest finished runs are dropped when it reaches ``kept_per_tenant``. An open
run with no call for ``idle_s`` is closed (removed, freeing its slot; it then answers
not-found, like an expired run). Open runs are also kept per tenant in order of their last
call, so idle ones are found from the front. Call times are not checkpointed: a restarted
table counts idleness from its restart.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections import Counter, OrderedDict
from collections.abc import Callable
from functools import cache
from typing import Any

from quarry.core.agent import runs as rules
from quarry.core.agent.runs import RunState, subject_of, tenant_of

from quarry.serve.stores.run_checkpoint import checkpoint_for
from quarry.serve.stores.runstore import QuotaExceeded, RunNotFound, StoreUnavailable
from quarry.serve.settings import ServeSettings

NOT_FOUND = "not_found"

# name -> decision function over (state, *args); the actor applies exactly these
DECISIONS: dict[str, Callable[..., tuple[RunState | None, Any]]] = {
    "reserve_search": rules.decide_reserve,
    "record_results": rules.decide_record,
    "apply_search": rules.decide_search,
    "record_fetch": rules.decide_fetch,
    "begin_answer": rules.decide_begin_answer,
    "end_answer": rules.decide_end_answer,
    "get": lambda s: (None, rules.view(s)),
}


class RunTable:
    def __init__(self, state_dir: str | None, *, ttl_s: float, open_per_tenant: int, open_per_subject: int,
                 kept_per_tenant: int, idle_s: float = float("inf"),
                 overrides: dict[str, tuple[int, int]] | None = None,
                 clock: Callable[[], float] = time.time, compact_every: int = 2000):
        self.ttl, self.idle, self.clock = ttl_s, idle_s, clock
        self.open_per_tenant, self.open_per_subject, self.kept = open_per_tenant, open_per_subject, kept_per_tenant
        self.overrides = {t: (int(a), int(b)) for t, (a, b) in (overrides or {}).items()}  # tenant -> (open_t, open_s)
        self._tenants: dict[str, OrderedDict[str, tuple[float, RunState]]] = {}
        self._touched: dict[str, OrderedDict[str, float]] = {}  # tenant -> open run_id -> last call, oldest first
        self._where: dict[str, str] = {}  # run_id -> tenant
        self._open_t: Counter[str] = Counter()
        self._open_s: Counter[str] = Counter()
        self._seq = 0
        self._log_lines, self._compact_every = 0, compact_every
        self._ckpt = checkpoint_for(state_dir) if state_dir else None
        if self._ckpt is not None:
            self._load()

    # -- state ----------------------------------------------------------------------------
    def _insert(self, created: float, s: RunState) -> None:
        t = tenant_of(s.principal_key)
        table = self._tenants.setdefault(t, OrderedDict())
        old = table.get(s.run_id)
        if old is not None and not old[1].finished:
            self._count(old[1], -1)
        table[s.run_id] = (created, s)
        self._where[s.run_id] = t
        touched = self._touched.setdefault(t, OrderedDict())
        if not s.finished:
            self._count(s, +1)
            touched[s.run_id] = self.clock()
            touched.move_to_end(s.run_id)
        else:
            touched.pop(s.run_id, None)

    def _remove(self, run_id: str) -> None:
        t = self._where.pop(run_id, None)
        if t is None:
            return
        created, s = self._tenants[t].pop(run_id)
        self._touched.get(t, {}).pop(run_id, None)
        if not s.finished:
            self._count(s, -1)

    def _count(self, s: RunState, d: int) -> None:
        self._open_t[tenant_of(s.principal_key)] += d
        self._open_s[subject_of(s.principal_key)] += d

    def _expire(self, tenant: str) -> None:
        table = self._tenants.get(tenant)
        now = self.clock()
        while table:
            run_id, (created, _) = next(iter(table.items()))
            if now - created <= self.ttl:
                break
            self._remove(run_id)
            self._write({"d": run_id})
        touched = self._touched.get(tenant)
        while touched:
            run_id, last = next(iter(touched.items()))
            if now - last <= self.idle:
                break
            self._remove(run_id)  # idle: closed, its slot freed
            self._write({"d": run_id})

    def limits_for(self, tenant: str) -> tuple[int, int]:
        return self.overrides.get(tenant, (self.open_per_tenant, self.open_per_subject))

    def _reset_s(self, tenant: str, subject: str | None) -> float:
        """Seconds until the first open run of the tenant (or of one subject) closes."""
        now, table = self.clock(), self._tenants.get(tenant, {})
        ends = [min(table[rid][0] + self.ttl, last + self.idle) for rid, last in self._touched.get(tenant, {}).items()
                if subject is None or subject_of(table[rid][1].principal_key) == subject]
        return max(0.0, min(ends) - now) if ends else 0.0

    def _lookup(self, run_id: str, pkey: str) -> tuple[float, RunState] | None:
        t = self._where.get(run_id)
        if t is None:
            return None
        created, s = self._tenants[t][run_id]
        if s.principal_key != pkey:
            return None
        now = self.clock()
        touched = self._touched.get(t, {})
        if now - created > self.ttl or (not s.finished and now - touched.get(run_id, now) > self.idle):
            self._remove(run_id)
            self._write({"d": run_id})
            return None
        if not s.finished:  # a call on the run: its idle clock restarts
            touched[run_id] = now
            touched.move_to_end(run_id)
        return created, s

    # -- operations ---------------------------------------------------------------------------
    def create(self, pkey: str, budget: int) -> dict[str, Any] | tuple[str, str, int]:
        tenant, subject = tenant_of(pkey), subject_of(pkey)
        self._expire(tenant)
        open_t, open_s = self.limits_for(tenant)
        if self._open_t[tenant] >= open_t:
            return ("quota", "tenant", open_t, self._reset_s(tenant, None))
        if self._open_s[subject] >= open_s:
            return ("quota", "subject", open_s, self._reset_s(tenant, subject))
        table = self._tenants.setdefault(tenant, OrderedDict())
        if len(table) >= self.kept:
            # the tenant's own oldest finished run makes room; open runs are never evicted
            victim = next((rid for rid, (_, s) in table.items() if s.finished), None)
            if victim is None:
                return ("quota", "tenant", open_t, self._reset_s(tenant, None))
            self._remove(victim)
            self._write({"d": victim})
        s = RunState(run_id=str(uuid.uuid4()), principal_key=pkey, budget=budget)
        created = self.clock()
        self._insert(created, s)
        self._write({"c": created, "s": s.model_dump(mode="json")})
        return rules.view(s).model_dump()

    def decide(self, op: str, run_id: str, pkey: str, *args: Any) -> Any:
        hit = self._lookup(run_id, pkey)
        if hit is None:
            return NOT_FOUND
        created, s = hit
        new, result = DECISIONS[op](s, *args)
        if new is not None and new != s:
            self._insert(created, new)
            self._write({"c": created, "s": new.model_dump(mode="json")})
        return result

    def purge(self, tenant: str, doc_id: str | None = None, version: str | None = None) -> int:
        """Drop every id naming the document from the tenant's runs (``doc_id`` None: drop the
        tenant's runs), then fold the log into a fresh snapshot, so no earlier line that named
        it stays on disk. Returns the runs changed or dropped."""
        table = self._tenants.get(tenant, OrderedDict())
        changed = 0
        for run_id, (created, s) in list(table.items()):
            if doc_id is None:
                self._remove(run_id)
                changed += 1
                continue
            new = rules.without_document(s, doc_id, version)
            if new != s:
                table[run_id] = (created, new)
                changed += 1
        if self._ckpt is not None:
            self._compact()
        return changed

    def stats(self) -> dict[str, Any]:
        return {"runs": len(self._where), "open_by_tenant": {t: n for t, n in self._open_t.items() if n}}

    # -- checkpoint ------------------------------------------------------------------------------
    def _write(self, entry: dict[str, Any]) -> None:
        if self._ckpt is None:
            return
        self._seq += 1
        self._ckpt.append({"q": self._seq, **entry})  # durable before the caller hears back
        self._log_lines += 1
        if self._log_lines >= self._compact_every and self._log_lines > 2 * len(self._where):
            self._compact()

    def _compact(self) -> None:
        assert self._ckpt is not None
        self._ckpt.compact(self._seq, ({"c": created, "s": s.model_dump(mode="json")}
                                       for table in self._tenants.values() for created, s in table.values()))
        self._log_lines = 0

    def close(self) -> None:
        if self._ckpt is not None:
            self._ckpt.close()

    def _load(self) -> None:
        assert self._ckpt is not None
        snap_seq, runs, entries = self._ckpt.load()
        for e in runs:
            self._insert(e["c"], RunState.model_validate(e["s"]))
        self._seq = snap_seq
        for e in entries:  # only those after the snapshot, in order
            self._seq = e["q"]
            if "d" in e:
                self._remove(e["d"])
            else:
                self._insert(e["c"], RunState.model_validate(e["s"]))
            self._log_lines += 1
        for t in list(self._tenants):
            self._expire(t)


@cache
def _ray_actor():
    import ray

    @ray.remote(num_cpus=0, max_restarts=-1, max_task_retries=0)
    class RunStoreActor:
        """One table, one method at a time. Restarted by Ray when its process dies; the
        restarted instance reads the checkpoint back in ``__init__``."""

        def __init__(self, state_dir: str | None, cfg: dict[str, Any]):
            self.t = RunTable(state_dir, **cfg)

        def create(self, pkey: str, budget: int):
            return self.t.create(pkey, budget)

        def decide(self, op: str, run_id: str, pkey: str, *args):
            return self.t.decide(op, run_id, pkey, *args)

        def purge(self, tenant: str, doc_id: str | None = None, version: str | None = None) -> int:
            return self.t.purge(tenant, doc_id, version)

        def stats(self) -> dict[str, Any]:
            return self.t.stats()

        def pid(self) -> int:
            return os.getpid()

    return RunStoreActor


class ActorRunStore:
    """The ``RunStore`` protocol over the named actor, from inside a gateway replica.

    A call that fails because the actor died or restarts is retried, re-attaching by name
    (``get_if_exists``), until ``timeout_s``: if the actor's owner died with it, the first
    caller re-creates it, and it reads the checkpoint. A call that gets no answer within
    ``timeout_s`` raises ``StoreUnavailable``. A retried decision can at worst spend
    a search slot twice: the budget only ever errs towards fewer searches."""

    def __init__(self, name: str, namespace: str, state_dir: str | None, cfg: dict[str, Any], timeout_s: float):
        self._name, self._ns, self._dir, self._cfg, self._timeout = name, namespace, state_dir, cfg, timeout_s
        self._handle = self._attach()

    @classmethod
    def from_settings(cls, s: ServeSettings) -> "ActorRunStore":
        cfg = {"ttl_s": s.run_ttl_s, "open_per_tenant": s.runs_open_per_tenant,
               "open_per_subject": s.runs_open_per_subject, "kept_per_tenant": s.runs_kept_per_tenant,
               "idle_s": s.run_idle_s, "overrides": {t: s.runs_open_for(t) for t in s.tenant_limits.overrides}}
        return cls(f"{s.store_name_prefix}-runstore", s.ray_namespace, s.run_state_dir, cfg, s.store_timeout_s)

    def _attach(self):
        return _ray_actor().options(name=self._name, namespace=self._ns, get_if_exists=True).remote(self._dir, self._cfg)

    @property
    def handle(self):
        return self._handle

    async def _call(self, method: str, *args: Any) -> Any:
        from ray.exceptions import ActorDiedError, ActorUnavailableError, RayActorError

        deadline = time.monotonic() + self._timeout
        pause = 0.1
        while True:
            try:
                ref = getattr(self._handle, method).remote(*args)
                return await asyncio.wait_for(ref, max(0.1, deadline - time.monotonic()))
            except (ActorDiedError, RayActorError, ActorUnavailableError):
                # Dead or restarting: until the deadline, wait and re-attach by name (the
                # name frees once the old actor is gone; the first caller re-creates it).
                if time.monotonic() + pause >= deadline:
                    raise StoreUnavailable(self._name) from None
                await asyncio.sleep(pause)
                pause = min(1.0, pause * 2)
                self._handle = self._attach()
            except asyncio.TimeoutError:
                raise StoreUnavailable(self._name) from None

    async def purge(self, tenant: str, doc_id: str | None = None, version: str | None = None) -> int:
        return int(await self._call("purge", tenant, doc_id, version))

    async def _decide(self, op: str, run_id: str, pkey: str, *args: Any) -> Any:
        out = await self._call("decide", op, run_id, pkey, *args)
        if isinstance(out, str) and out == NOT_FOUND:
            raise RunNotFound(run_id)
        return out

    async def create(self, pkey: str, budget: int) -> rules.RunView:
        out = await self._call("create", pkey, budget)
        if isinstance(out, tuple):
            raise QuotaExceeded(out[1], out[2], out[3])
        return rules.RunView(**out)

    async def get(self, run_id: str, pkey: str) -> rules.RunView:
        return await self._decide("get", run_id, pkey)

    async def reserve_search(self, run_id: str, pkey: str) -> rules.SearchDecision:
        return await self._decide("reserve_search", run_id, pkey)

    async def record_results(self, run_id: str, pkey: str, ids: list[str],
                             rejected_ids: list[str] = ()) -> rules.SearchDecision:
        return await self._decide("record_results", run_id, pkey, ids, list(rejected_ids))

    async def apply_search(self, run_id: str, pkey: str, ids: list[str],
                           rejected_ids: list[str] = ()) -> rules.SearchDecision:
        return await self._decide("apply_search", run_id, pkey, ids, list(rejected_ids))

    async def record_fetch(self, run_id: str, pkey: str, ids: list[str], rejected_ids: list[str] = ()
                           ) -> rules.RunView:
        return await self._decide("record_fetch", run_id, pkey, ids, list(rejected_ids))

    async def begin_answer(self, run_id: str, pkey: str) -> rules.AnswerStart:
        return await self._decide("begin_answer", run_id, pkey)

    async def end_answer(self, run_id: str, pkey: str, outcome: str) -> None:
        try:
            await self._decide("end_answer", run_id, pkey, outcome)
        except RunNotFound:
            pass  # expired between begin and end: nothing left to finish
