"""Run and trace stores: two named Ray actors shared by every gateway replica.

Why a Ray actor and not Redis: a run's rules (budget, new-evidence, one exit) are
read-modify-write decisions that must be atomic across gateway replicas. A Ray actor
executes its methods one at a time, so each decision is a single method call on the one
copy of the state, with no locks, no WATCH/MULTI or Lua scripts, and no extra service to
deploy, secure or reach from the cluster: it lives in the same Ray cluster as the gateway.
The cost is durability: state is in the actor's memory, and it is lost if the actor's node
or owner dies. That fails closed (an unknown run gets the generic not-found answer; the
agent starts a new run), and runs are short-lived agent tasks, so we accept it. A
deployment that needs runs to survive cluster restarts can swap in an external store
behind the same methods.

The actors are named and created with ``get_if_exists=True``, so whichever replica comes
first creates them and the rest attach to the same instance. They are not detached: they
go away with the application instead of leaking across deployments.

Replays cannot help a client: run ids are server-generated random uuids bound to the
principal key, a search slot is reserved *before* the search runs, and nothing a request
carries can lower ``used`` or clear ``exhausted``.
"""

from __future__ import annotations

import time
import uuid
from collections import OrderedDict
from typing import Any

import ray

from quarry.core import runs
from quarry.core.runs import BudgetExhausted, RunState

NOT_FOUND = "not_found"  # unknown run id and a run of another principal are the same answer


@ray.remote(num_cpus=0, max_restarts=0)
class RunStore:
    def __init__(self, capacity: int = 100_000, ttl_s: float = 24 * 3600):
        self._runs: OrderedDict[str, tuple[float, RunState]] = OrderedDict()
        self._capacity, self._ttl = capacity, ttl_s

    def _get(self, run_id: str, pkey: str) -> RunState | None:
        hit = self._runs.get(run_id)
        if hit is None or hit[1].principal_key != pkey or time.time() - hit[0] > self._ttl:
            return None
        return hit[1]

    def _put(self, state: RunState) -> None:
        created = self._runs[state.run_id][0] if state.run_id in self._runs else time.time()
        self._runs[state.run_id] = (created, state)
        while len(self._runs) > self._capacity:
            self._runs.popitem(last=False)  # oldest runs go first

    def create(self, pkey: str, budget: int) -> dict[str, Any]:
        run_id = str(uuid.uuid4())
        state = RunState(run_id=run_id, principal_key=pkey, budget=budget)
        self._put(state)
        return _view(state)

    def get(self, run_id: str, pkey: str) -> dict[str, Any] | str:
        s = self._get(run_id, pkey)
        return NOT_FOUND if s is None else _view(s)

    def reserve_search(self, run_id: str, pkey: str) -> dict[str, Any] | str:
        """Spend one search slot, atomically. A search past the budget finishes the run
        with ``budget_exhausted`` (the agent used a tool it no longer had)."""
        s = self._get(run_id, pkey)
        if s is None:
            return NOT_FOUND
        try:
            s = runs.reserve_search(s)
        except BudgetExhausted:
            first = not s.finished
            if first:
                s = runs.finish(s, "budget_exhausted")
                self._put(s)
            return {**_view(s), "allowed": False, "newly_finished": first}
        self._put(s)
        return {**_view(s), "allowed": True}

    def record_results(self, run_id: str, pkey: str, ids: list[str],
                       rejected_ids: list[str] | None = None) -> dict[str, Any] | str:
        s = self._get(run_id, pkey)
        if s is None:
            return NOT_FOUND
        s, new = runs.record_results(s, ids, rejected_ids=rejected_ids or ())
        self._put(s)
        return {**_view(s), "new_ids": sorted(new)}

    def record_fetch(self, run_id: str, pkey: str, ids: list[str]) -> dict[str, Any] | str:
        s = self._get(run_id, pkey)
        if s is None:
            return NOT_FOUND
        if not s.finished:
            s = runs.record_fetch(s, ids)
            self._put(s)
        return _view(s)

    def begin_answer(self, run_id: str, pkey: str) -> dict[str, Any] | str:
        """Claim the one exit: the first call gets the retrieved ids, later calls get
        ``finished``. Marking it here (not after the checks) makes concurrent submits on
        two replicas unable to both pass."""
        s = self._get(run_id, pkey)
        if s is None:
            return NOT_FOUND
        if s.finished:
            return {**_view(s), "allowed": False}
        self._put(runs.finish(s, "pending"))
        return {**_view(s), "allowed": True, "retrieved_ids": sorted(s.retrieved_ids),
                "rejected_ids": sorted(s.rejected_ids)}

    def end_answer(self, run_id: str, pkey: str, outcome: str) -> None:
        s = self._get(run_id, pkey)
        if s is not None:
            self._put(runs.finish(s, outcome))

    def size(self) -> int:
        return len(self._runs)


def _view(s: RunState) -> dict[str, Any]:
    return {
        "run_id": s.run_id,
        "budget": s.budget,
        "used": s.used,
        "searches_left": s.searches_left,
        "finished": s.finished,
        "outcome": s.outcome,
        "seen": len(s.seen_ids),
    }


@ray.remote(num_cpus=0, max_restarts=0)
class TraceStore:
    """Bounded, protected traces: ids, ranks, scores, reason codes; never passage text."""

    def __init__(self, capacity: int = 10_000):
        self._traces: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._capacity = capacity

    def put(self, trace_id: str, trace: dict[str, Any]) -> None:
        self._traces[trace_id] = trace
        while len(self._traces) > self._capacity:
            self._traces.popitem(last=False)

    def get(self, trace_id: str, tenant: str) -> dict[str, Any] | None:
        t = self._traces.get(trace_id)
        # Operators read their own tenant's traces only; another tenant's id is "not found".
        return t if t is not None and t.get("tenant") == tenant else None

    def size(self) -> int:
        return len(self._traces)


def get_stores(prefix: str, namespace: str, trace_capacity: int):
    """Attach to (or create) the shared stores."""
    rs = RunStore.options(name=f"{prefix}-runstore", namespace=namespace, get_if_exists=True).remote()
    ts = TraceStore.options(name=f"{prefix}-tracestore", namespace=namespace, get_if_exists=True).remote(trace_capacity)
    return rs, ts
