"""The run-store protocol and its errors (DESIGN §6 "State"); ``factory.make_run_store``
picks the configured backend.

A run's rules (budget, new evidence, one exit) are read-modify-write decisions that must be
atomic across gateway replicas. They live once, as pure functions in ``quarry.core.agent.runs``
(``decide_*``); a store only makes each decision atomic and durable:

- ``ActorRunStore`` (``runstore_actor``): one named Ray actor, the embedded default for one
  machine. An actor runs one method at a time, so each decision is one call. It is
  restartable and appends every change to a log under ``state_dir``, so a restart (or a
  crash of the actor's process) does not lose runs.
- ``RedisRunStore`` (``redis_store``): Redis or Valkey for clusters. Each decision is one
  optimistic transaction (WATCH the run, apply the rule, MULTI/SET/EXEC, retry on conflict);
  run creation with its quota check is one Lua script. Runs expire by TTL.

Conventions every backend follows:

- A run belongs to one principal key (tenant/subject/groups hash). An unknown id, an
  expired run and another principal's run all raise ``RunNotFound``: callers answer the
  same generic 404 for each, so ids cannot be probed.
- ``create`` enforces per-tenant and per-subject limits on *open* runs (not finished, not
  expired) and raises ``QuotaExceeded`` (HTTP 429) instead of evicting anything. Finished
  runs are kept until their TTL, at most ``runs_kept_per_tenant`` per tenant; past that the
  tenant's own oldest finished runs go first. No tenant's traffic removes another's runs.
- ``StoreUnavailable`` means the backend did not answer in time; callers fail closed.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from quarry.core.agent.runs import AnswerStart, RunView, SearchDecision

__all__ = ["RunStore", "RunNotFound", "QuotaExceeded", "StoreUnavailable"]


class RunNotFound(Exception):
    """Unknown, expired, or another principal's run: indistinguishable on purpose."""


class QuotaExceeded(Exception):
    """``reset_s``: seconds until the scope's first open run closes (TTL or idle timeout)."""

    def __init__(self, scope: str, limit: int, reset_s: float = 60.0):
        super().__init__(f"open-run limit reached for this {scope} ({limit})")
        self.scope, self.limit, self.reset_s = scope, limit, reset_s


class StoreUnavailable(Exception):
    """The store did not answer (restarting, unreachable)."""


@runtime_checkable
class RunStore(Protocol):
    async def create(self, pkey: str, budget: int) -> RunView: ...

    async def get(self, run_id: str, pkey: str) -> RunView: ...

    async def reserve_search(self, run_id: str, pkey: str) -> SearchDecision:
        """Spend a slot before a search (two-step path, with ``record_results``)."""

    async def record_results(self, run_id: str, pkey: str, ids: list[str],
                             rejected_ids: list[str] = ()) -> SearchDecision: ...

    async def apply_search(self, run_id: str, pkey: str, ids: list[str],
                           rejected_ids: list[str] = ()) -> SearchDecision:
        """Reserve and record in one atomic decision after the search ran (one round trip)."""

    async def record_fetch(self, run_id: str, pkey: str, ids: list[str], rejected_ids: list[str] = ()
                           ) -> RunView: ...

    async def begin_answer(self, run_id: str, pkey: str) -> AnswerStart: ...

    async def end_answer(self, run_id: str, pkey: str, outcome: str) -> None: ...

    async def purge(self, tenant: str, doc_id: str | None = None, version: str | None = None) -> int:
        """Remove every id naming the document from the tenant's runs (``doc_id`` None: the
        tenant's runs), from memory and from what the store keeps on disk; the count changed."""

