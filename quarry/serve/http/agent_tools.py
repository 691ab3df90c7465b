"""The agent tools (create a run, search, fetch, submit an answer) as one service that
both transports call: the REST routes (``gateway.py``) and the MCP endpoint (``mcp.py``).

Every call is first admitted by the tenant limits (``ratelimit.TenantLimiter``: the
verified principal's request rates and its tenant's concurrency; 429 past them) and counted
in the per-tenant metrics. It applies the run rules through the run store, composes a search with
``quarry.core.search.composer.compose`` over the deployment handles, and records every
call in the trace store. A refused call raises :class:`ToolError`, which carries the HTTP
status and body REST answers with (MCP returns the same body as a tool error). Not-found
and not-permitted share one answer everywhere: ``404 {"detail": "not found"}``.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from quarry.core.agent.citations import ABSTENTION_MESSAGE, check_claims
from quarry.core.agent.runs import groups_hash, principal_key
from quarry.core.lru import LRU
from quarry.core.rank.second_stage import stage_trace
from quarry.core.search.composer import Composed, compose
from quarry.core.search.settings import candidate_width

from quarry.serve.deployments.handles import DeploymentStages, call_retrying
from quarry.serve.http.auth import Identity
from quarry.serve.http.errors import error_details
from quarry.serve.http.metrics import GatewayMetrics
from quarry.serve.http.ratelimit import LimitExceeded, TenantLimiter
from quarry.serve.http.responses import Abstained, Answered, FetchResponse, RunCreated, SearchResponse
from quarry.serve.http.tools import FetchRequest, SearchToolRequest, SubmitAnswerRequest
from quarry.serve.settings import ServeSettings
from quarry.serve.stores.runstore import QuotaExceeded, RunNotFound, RunStore, StoreUnavailable
from quarry.serve.stores.trace_privacy import query_fields
from quarry.serve.stores.tracestore import TraceWriter

NOT_FOUND_BODY = {"detail": "not found"}
KNOWN_RUNS = 65536  # run ids this replica saw created or decided, with their principal key


class ToolError(Exception):
    """A refused tool call: the HTTP status, the JSON body and any headers to answer with."""

    def __init__(self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None):
        super().__init__(status)
        self.status, self.body, self.headers = status, body, headers


def not_found() -> ToolError:
    return ToolError(404, NOT_FOUND_BODY)


def _too_large(field: str, ceiling: int) -> ToolError:
    return ToolError(422, {"detail": [{"loc": ["body", field], "type": "less_than_equal",
                                       "msg": f"{field} may be at most {ceiling}"}]})


class AgentTools:
    """The tool logic behind REST and MCP, one per Gateway replica."""

    def __init__(self, settings: ServeSettings, stages: DeploymentStages, runs: RunStore, traces: TraceWriter,
                 metrics: GatewayMetrics, limiter: TenantLimiter | None = None):
        self.settings, self.stages, self.runs, self.traces, self.metrics = settings, stages, runs, traces, metrics
        self.limiter = limiter or TenantLimiter(settings.tenant_limits, redis_url=settings.redis_url,
                                                prefix=settings.store_name_prefix)
        # run_id -> (principal key, searches_left last seen). A run known here skips the
        # existence check before its search: the one store call after the search decides.
        self._known: LRU[str, tuple[str, int]] = LRU(KNOWN_RUNS)

    # -- recording ---------------------------------------------------------------------
    def _lat(self, stage: str, t0: float) -> float:
        return self.metrics.observe_ms(stage, (time.perf_counter() - t0) * 1000)

    def trace(self, ident: Identity, kind: str, body: dict[str, Any]) -> str:
        """Queue a trace and return its id at once: the write happens off the response path."""
        at = time.time()
        trace_id = self.traces.new_id(at)
        p = ident.principal
        self.traces.append({
            "trace_id": trace_id, "kind": kind, "at": at, "tenant": p.tenant,
            "groups_hash": groups_hash(p.groups),
            "subject_hash": hashlib.sha256(p.subject.encode()).hexdigest()[:16], **body,
        })
        return trace_id

    def _abstain(self, ident: Identity, run_id: str, reason: str, extra: dict[str, Any] | None = None) -> Abstained:
        self.metrics.abstained(reason)
        trace_id = self.trace(ident, "abstention", {"run_id": run_id, "reason": reason, **(extra or {})})
        # The reason code stays in the trace; the caller gets the one generic sentence.
        return Abstained(message=ABSTENTION_MESSAGE, trace_id=trace_id)

    async def _store(self, endpoint: str, coro):
        """One run-store call. Unknown, foreign and expired runs, and a store that does not
        answer, all fail closed with the generic 404."""
        try:
            return await coro
        except (RunNotFound, StoreUnavailable):
            self.metrics.count(endpoint, 404)
            raise not_found() from None

    @asynccontextmanager
    async def _admitted(self, ident: Identity, endpoint: str) -> AsyncIterator[None]:
        """One tool call: admitted by the tenant limits (or 429), then counted and timed
        under the tenant's bounded label with the status it answered."""
        t0, status = time.perf_counter(), 200
        tenant = ident.principal.tenant
        try:
            try:
                async with self.limiter.admit(ident.principal):
                    yield
            except LimitExceeded as e:
                self.metrics.count(endpoint, 429)
                self.metrics.tenant_refused(tenant, endpoint, e.scope, e.kind)
                raise ToolError(429, e.body, {"Retry-After": str(e.retry_after_s)}) from None
        except ToolError as e:
            status = e.status
            raise
        except asyncio.CancelledError:
            status = 499  # the client went away
            raise
        except Exception:
            status = 500
            raise
        finally:
            self.metrics.tenant_call(tenant, endpoint, status, (time.perf_counter() - t0) * 1000)

    # -- the tools ---------------------------------------------------------------------
    async def create_run(self, ident: Identity) -> RunCreated:
        async with self._admitted(ident, "runs"):
            return await self._create_run(ident)

    async def fetch(self, ident: Identity, run_id: str, request: FetchRequest) -> FetchResponse:
        async with self._admitted(ident, "fetch"):
            return await self._fetch(ident, run_id, request)

    async def answer(self, ident: Identity, run_id: str, decision: SubmitAnswerRequest | None,
                     errors: list[dict[str, Any]] | None = None) -> Answered | Abstained:
        """``decision`` is None when the body did not validate (``errors`` says why): that
        still ends the run, as invalid_decision, and answers 422."""
        async with self._admitted(ident, "answer"):
            return await self._answer(ident, run_id, decision, errors)

    async def search(self, ident: Identity, run_id: str, request: SearchToolRequest,
                     timing: dict[str, float] | None = None) -> SearchResponse:
        """Limits, the run's budget, the composed search, the run state (delivered and
        rejected ids) and the trace. ``timing`` collects per-stage milliseconds."""
        async with self._admitted(ident, "search"):
            return await self._search(ident, run_id, request, timing)

    async def _create_run(self, ident: Identity) -> RunCreated:
        pkey = principal_key(ident.principal)
        try:
            view = await self.runs.create(pkey, self.settings.run_budget)
        except QuotaExceeded as e:
            self.metrics.count("runs", 429)
            retry = max(1, math.ceil(e.reset_s))
            raise ToolError(429, {"detail": f"too many open runs for this {e.scope} (limit {e.limit}); finish a "
                                            "run with submit_answer or wait for one to close "
                                            f"(a slot frees in {retry} s)",
                                  "limit": {"scope": e.scope, "kind": "open_runs", "limit": e.limit, "window_s": None,
                                            "reset_at": round(time.time() + retry, 3), "retry_after_s": retry}},
                            {"Retry-After": str(retry)}) from None
        except StoreUnavailable:
            self.metrics.count("runs", 503)
            raise ToolError(503, {"detail": "run store unavailable; retry shortly"}, {"Retry-After": "1"}) from None
        self._known.put(view.run_id, (pkey, view.searches_left))
        self.metrics.count("runs", 200)
        return RunCreated(run_id=view.run_id, budget=view.budget, searches_left=view.searches_left)

    async def _fetch(self, ident: Identity, run_id: str, request: FetchRequest) -> FetchResponse:
        pkey = principal_key(ident.principal)
        await self._store("fetch", self.runs.get(run_id, pkey))
        t0 = time.perf_counter()
        res = await call_retrying(self.stages.retriever, "fetch", ident.principal, request.id)
        self._lat("fetch", t0)
        if res is None:
            self.metrics.count("fetch", 404)
            raise not_found()
        rejected = sorted(res.decision.rejected_ids) if res.decision is not None else []
        await self._store("fetch", self.runs.record_fetch(run_id, pkey, res.ids, rejected))
        self.metrics.count("fetch", 200)
        return FetchResponse.of(res)

    async def _answer(self, ident: Identity, run_id: str, decision: SubmitAnswerRequest | None,
                      errors: list[dict[str, Any]] | None = None) -> Answered | Abstained:
        pkey = principal_key(ident.principal)
        start = await self._store("answer", self.runs.begin_answer(run_id, pkey))
        if not start.allowed:
            self.metrics.count("answer", 409)
            raise ToolError(409, {"detail": "this run has finished; create a new run"})
        if decision is None:
            await self.runs.end_answer(run_id, pkey, "invalid_decision")
            self.metrics.abstained("invalid_decision")
            self.trace(ident, "abstention", {"run_id": run_id, "reason": "invalid_decision"})
            self.metrics.count("answer", 422)
            raise ToolError(422, {"detail": error_details(errors or [], ("body",))})
        retrieved = set(start.retrieved_ids)
        rejected = frozenset(start.rejected_ids)  # what this run's resolution rejected
        if decision.abstention is not None:
            reason = "model_abstained" if retrieved else "no_visible_evidence"
            await self.runs.end_answer(run_id, pkey, reason)
            self.metrics.count("answer", 200)
            return self._abstain(ident, run_id, reason)
        cited = sorted({c.passage_id for c in decision.claims} & retrieved)
        texts = await call_retrying(self.stages.retriever, "texts", ident.principal, cited) if cited else {}
        report = check_claims(decision.claims, retrieved, texts.get, rejected=rejected)
        checks = [c.model_dump(mode="json") | {"failed": list(c.failed_checks)} for c in report.claims]
        if not report.passed:
            reason = report.abstention_reason  # cites_rejected_evidence or citation_check_failed
            await self.runs.end_answer(run_id, pkey, reason)
            self.metrics.count("answer", 200)
            return self._abstain(ident, run_id, reason, extra={"checks": checks})
        await self.runs.end_answer(run_id, pkey, "answered")
        trace_id = self.trace(ident, "answer", {"run_id": run_id, "outcome": "answered", "checks": checks})
        self.metrics.count("answer", 200)
        return Answered(claims=decision.claims, trace_id=trace_id)

    async def _search(self, ident: Identity, run_id: str, request: SearchToolRequest,
                      timing: dict[str, float] | None) -> SearchResponse:
        timing = {} if timing is None else timing
        if request.top_k > self.settings.top_k_ceiling:
            raise _too_large("top_k", self.settings.top_k_ceiling)
        if request.candidates is not None and request.candidates > self.settings.candidate_width_ceiling:
            raise _too_large("candidates", self.settings.candidate_width_ceiling)
        pkey = principal_key(ident.principal)
        t0 = time.perf_counter()
        known = self._known.get(run_id)
        if known is None or known[0] != pkey:
            # not seen on this replica: check it exists for this principal before searching
            await self._store("search", self.runs.get(run_id, pkey))
            timing["check"] = self._lat("run_store", t0)
        composed: Composed | None = None
        if known is None or known[1] > 0:
            composed = await compose(self.stages, ident.principal, request.core(), request.candidates)
            for stage, ms in composed.timings_ms.items():
                timing[stage] = self.metrics.observe_ms(stage, ms)
        res = composed.result if composed is not None else None
        delivered = [e.passage_id for e in res.excerpts] if res is not None else []
        rejected = sorted(res.decision.rejected_ids) if res is not None and res.decision is not None else []
        t0 = time.perf_counter()
        # One atomic decision after the search: budget, new-evidence rule, delivered and
        # rejected ids. A refused search's results are never delivered.
        after = await self._store("search", self.runs.apply_search(run_id, pkey, delivered, rejected))
        timing["decide"] = self._lat("run_store", t0)
        self._known.put(run_id, (pkey, after.view.searches_left))
        if not after.allowed or composed is None:
            self.metrics.count("search", 409)
            # Searching past the budget ends the run: it abstains with budget_exhausted.
            raise ToolError(409, self._abstain(ident, run_id, "budget_exhausted", extra={
                **query_fields(ident.principal.tenant, request.query, self.settings.trace_query_chars),
                "first_refusal": after.newly_finished}).model_dump(mode="json"))
        self.metrics.candidates.observe(len(res.candidates))
        self.metrics.delivered.observe(res.delivered_tokens)
        new_ids = list(after.new_ids)
        trace_id = self.trace(ident, "search", self._search_trace(ident, run_id, request, composed, delivered, after,
                                                                  new_ids, timing))
        self.metrics.count("search", 200)
        return SearchResponse(run_id=run_id, excerpts=res.excerpts, decision=res.decision, stages=res.stages,
                              generation=res.generation, delivered_tokens=res.delivered_tokens,
                              truncated=res.truncated, message=res.message, new_passage_ids=tuple(new_ids),
                              searches_left=after.view.searches_left, trace_id=trace_id)

    def _search_trace(self, ident: Identity, run_id: str, request: SearchToolRequest, composed: Composed,
                      delivered: list[str], after, new_ids: list[str], timing: dict[str, float]) -> dict[str, Any]:
        """A search's trace: ids, ranks, codes and digests, never passage text."""
        res, outcome, resolution = composed.result, composed.outcome, composed.resolution
        decision = res.decision
        final_pos = {pid: i for i, pid in enumerate(delivered, start=1)}
        expanded = {e.passage_id for e in res.excerpts if e.expanded_to}
        width = candidate_width(self.settings.search, request.candidates, request.top_k)
        return {
            "run_id": run_id,
            **query_fields(ident.principal.tenant, request.query, self.settings.trace_query_chars),
            "filters": {"top_k": request.top_k, "doc_type": request.doc_type,
                        "valid_at": request.valid_at and request.valid_at.isoformat(),
                        "candidates": request.candidates},
            "generation": res.generation,
            # which second stage ran (or why none did): kind, gate decision, metrics, model id
            "second_stage": {**stage_trace(outcome.info), "status": outcome.status, "candidate_width": width,
                             **({"error": outcome.error} if outcome.error else {})},
            "candidates": [{**c.model_dump(mode="json"), "expanded": c.passage_id in expanded,
                            "final_position": final_pos.get(c.passage_id), "verdict": decision.verdict(c.passage_id)}
                           for c in res.candidates],
            "stages": [st.model_dump(mode="json") for st in res.stages],
            "delivered": delivered,
            "delivered_tokens": res.delivered_tokens,
            "source_versions": sorted({f"{e.doc_id}@{e.version}" for e in res.excerpts}),
            # the resolution: ids and reason codes; follow-up queries by digest only (derived from passages)
            "decision": decision.model_dump(mode="json"),
            "follow_ups": [{"query_sha256": hashlib.sha256(f.query.encode()).hexdigest()[:16],
                            "found": list(f.found), "generation": f.generation} for f in resolution.follow_ups],
            "new_ids": new_ids,
            "searches_left": after.view.searches_left,
            "truncated": res.truncated,
            "timings_ms": {k: round(v, 3) for k, v in timing.items()},
        }
