"""The one composition of a search (DESIGN §4), over a small protocol of stage executors.

:func:`compose` decides the order once:

1. the first stage (mask, lexical and dense legs, RRF), or, when the executor says the
   tenant serves no second stage, the first stage *and* the expansion of its fused top-k
   with the evidence for resolving it in one call (the one-call fast path);
2. the second stage (:meth:`StageExecutor.rerank`), applied as data
   (:func:`quarry.core.search.survivors.apply_second_stage`);
3. the expansion of the survivors with the evidence for resolving them (skipped when
   the one-call retrieval already delivered the fused top-k and no ranker reordered it);
4. resolution, when anything was delivered;
5. :func:`assemble`: the response, each excerpt carrying its verdict.

Where each stage runs is the executor's business, the way Ray's ``LLMServer`` takes its
engine by injection: :class:`quarry.core.search.in_process.InProcessStages` runs them over
a loaded index (``quarry search``, evaluation, the demo's checks, tests), and
``quarry.serve.deployments.handles.DeploymentStages`` runs them through Serve deployment
handles (the Gateway). Both hand each other the frozen records of
``quarry.core.search.records``; nothing here imports serve.
"""

from __future__ import annotations

import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from quarry.core.evidence.graph import EvidenceSet
from quarry.core.records import Principal, SearchRequest, SearchResult
from quarry.core.search.expansion import nothing_expanded
from quarry.core.search.records import (
    Delivery,
    Expansion,
    FirstStage,
    RerankOutcome,
    Resolution,
    Retrieval,
    Survivors,
)
from quarry.core.search.resolution import nothing_resolved
from quarry.core.search.survivors import apply_second_stage

T = TypeVar("T")


class StageExecutor(Protocol):
    """Runs the stages of one search; :func:`compose` decides their order.

    Conventions:

    - Every stage method is a coroutine. An in-process executor never suspends in one
      (it awaits no I/O), so :func:`run_inline` drives the composer without an event loop.
    - "Nothing found" is a record, never an exception: a tenant without an index gets
      :func:`quarry.core.search.retrieval.no_first_stage`, no survivors an empty expansion.
    - A second stage that cannot run is reported in its outcome (``status="failed"``),
      never raised: the fused order is always a valid answer. ``rerank`` returns None when
      the executor has no second stage at all.
    - ``width`` is the request's candidate width (server-capped upstream), None for the
      configured one. ``with_evidence=False`` asks for no resolution evidence.
    """

    def retrieves_in_one_call(self, tenant: str) -> bool:
        """True when no second stage will reorder this tenant's candidates, so the first
        stage and the expansion of its fused top-k can come from one :meth:`retrieve`."""

    async def first_stage(self, principal: Principal, request: SearchRequest, width: int | None) -> FirstStage: ...

    async def retrieve(self, principal: Principal, request: SearchRequest, width: int | None,
                       with_evidence: bool) -> Retrieval:
        """The first stage, the expansion of its fused top-k and their evidence, in one call."""

    async def rerank(self, first: FirstStage, query: str, top_k: int) -> RerankOutcome | None: ...

    async def deliver(self, principal: Principal, request: SearchRequest, first: FirstStage,
                      survivors: tuple[str, ...], with_evidence: bool) -> Delivery:
        """The survivors (ids, delivered order) expanded, with the evidence for resolving them."""

    async def resolve(self, principal: Principal, request: SearchRequest, evidence: EvidenceSet) -> Resolution: ...


@dataclass(frozen=True)
class Composed:
    """One composed search: the result, what the second stage did, the resolution, and
    the milliseconds each executor call took (``retrieve``, ``rerank``, and ``expand`` and
    ``resolve`` when those calls ran), in call order."""

    result: SearchResult
    outcome: RerankOutcome | None
    resolution: Resolution | None
    timings_ms: dict[str, float] = field(default_factory=dict)


class _Clock:
    def __init__(self) -> None:
        self.timings: dict[str, float] = {}

    async def time(self, stage: str, call: Coroutine[Any, Any, T]) -> T:
        t0 = time.perf_counter()
        out = await call
        self.timings[stage] = (time.perf_counter() - t0) * 1000
        return out


async def compose(stages: StageExecutor, principal: Principal, request: SearchRequest, width: int | None = None,
                  *, resolve: bool = True) -> Composed:
    """One search through ``stages``, in the one order (module docstring)."""
    clock = _Clock()
    retrieval: Retrieval | None = None
    if stages.retrieves_in_one_call(principal.tenant):
        retrieval = await clock.time("retrieve", stages.retrieve(principal, request, width, resolve))
        first = retrieval.first
    else:
        first = await clock.time("retrieve", stages.first_stage(principal, request, width))
    outcome = await clock.time("rerank", stages.rerank(first, request.query, request.top_k))
    second = apply_second_stage(first, outcome, request.top_k)
    expanded: Expansion = nothing_expanded()
    resolution = nothing_resolved(request) if resolve else None
    if second.survivors:
        if retrieval is not None and (outcome is None or outcome.status != "applied"):
            delivery = Delivery(expansion=retrieval.expansion, evidence=retrieval.evidence)  # the fused top-k
        else:
            delivery = await clock.time("expand", stages.deliver(principal, request, first, second.survivors,
                                                                 resolve))
        expanded = delivery.expansion
        if resolve and delivery.evidence is not None and delivery.evidence.delivered:
            resolution = await clock.time("resolve", stages.resolve(principal, request, delivery.evidence))
    return Composed(assemble(request, first, second, expanded, resolution), outcome, resolution, clock.timings)


def run_inline(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine that never suspends (the composer over an in-process executor) to
    its result in this thread, without an event loop, so it also works inside one."""
    try:
        coroutine.send(None)
    except StopIteration as done:
        return done.value
    coroutine.close()
    raise RuntimeError("an in-process stage executor suspended: it must not await I/O")


def empty_message(request: SearchRequest) -> str:
    """What was tried and what to change. It never hints at evidence the caller cannot see."""
    filters = []
    if request.doc_type:
        filters.append(f"doc_type ({len(request.doc_type)} types)")  # counted, never echoed
    if request.valid_at:
        filters.append(f"valid_at={request.valid_at.isoformat()}")
    tried = "lexical (exact terms and identifiers) and semantic search over the documents you can access"
    if filters:
        tried += " with filters " + ", ".join(filters)
    advice = ["rephrase with the terms a source document would use", "search for an exact identifier or name"]
    if filters:
        advice.insert(0, "remove or widen the filters")
    return f"No evidence found. Tried {tried}. To change: " + "; ".join(advice) + "."


def assemble(request: SearchRequest, first: FirstStage, second: Survivors, expanded: Expansion,
             resolution: Resolution | None) -> SearchResult:
    """The search result: excerpts in relevance order, each with its verdict; the decision."""
    decision = resolution.decision if resolution is not None else None
    excerpts = expanded.excerpts
    if decision is not None:
        excerpts = tuple(e.model_copy(update={"verdict": decision.verdict(e.passage_id)}) for e in excerpts)
    stages = [*first.stages, second.report, expanded.report] + ([resolution.report] if resolution else [])
    return SearchResult(
        excerpts=excerpts, candidates=second.candidates, stages=tuple(stages), generation=first.generation,
        delivered_tokens=sum(e.token_count for e in excerpts), truncated=expanded.truncated,
        message="" if excerpts else empty_message(request), decision=decision,
    )
