"""The FastAPI ingress: verifies the caller, enforces run rules, composes deployments.

Run id travels in the ``X-Quarry-Run`` header (not the body, so tool schemas stay the
agent's inputs only; not the query string, so it stays out of access logs). Not-found and
not-permitted share one response everywhere: ``404 {"detail": "not found"}``.
"""


import asyncio
import hashlib
import logging
import time
from typing import Any

from fastapi import FastAPI, Header, Request, Response
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from ray import serve

from quarry.core.agent.citations import ABSTENTION_MESSAGE, check_claims
from quarry.core.lru import LRU
from quarry.core.records import Principal, SearchResult
from quarry.core.agent.runs import groups_hash, principal_key
from quarry.core.rank.second_stage import stage_trace
from quarry.core.search.stages import apply_second_stage, assemble, candidate_width, nothing_expanded, nothing_resolved
from quarry.core.search.records import (
    Delivery,
    ExpandRequest,
    Expansion,
    FirstStage,
    RerankOutcome,
    RerankRequest,
    Resolution,
    ResolveRequest,
    Retrieval,
    StageInfo,
)

from quarry.serve.http import edge
from quarry.serve.http.auth import AuthError, Identity, bearer_token, verify_platform_token, verify_token
from quarry.serve.deployments import call_retrying, search_settings
from quarry.serve.http.errors import error_details
from quarry.serve.stores.runstore import QuotaExceeded, RunNotFound, StoreUnavailable, make_run_store
from quarry.serve.settings import ServeSettings
from quarry.serve.stores.tracestore import TraceWriter, find_trace
from quarry.serve.http.tools import FetchRequest, SearchToolRequest, SubmitAnswerRequest, tool_definitions
from quarry.serve.stores.trace_privacy import passage_ids, query_fields, redact_trace

log = logging.getLogger("quarry.serve")

NOT_FOUND_BODY = {"detail": "not found"}
RUN_HEADER = "X-Quarry-Run"

api = FastAPI(
    title="Quarry",
    version="0.1.0",
    description=(
        "Evidence retrieval for agents. Authenticate with `Authorization: Bearer <JWT>`; create a run with "
        f"`POST /v1/runs` and send its id as `{RUN_HEADER}` on search, fetch and answer."
    ),
)
edge.install(api)  # size limits, the validation handler, the corrected spec: before serve.ingress freezes api


class _Reject(Exception):
    def __init__(self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None):
        self.status, self.body, self.headers = status, body, headers


@api.exception_handler(_Reject)
async def _reject(_: Request, e: _Reject):
    return JSONResponse(e.body, status_code=e.status, headers=e.headers)


def _not_found() -> _Reject:
    return _Reject(404, NOT_FOUND_BODY)


def _metrics():
    from ray.util.metrics import Counter, Histogram

    ms = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000]
    return {
        "requests": Counter("quarry_requests", "HTTP requests", tag_keys=("endpoint", "status")),
        "latency": Histogram("quarry_stage_latency_ms", "Latency per stage (ms)", boundaries=ms, tag_keys=("stage",)),
        "candidates": Histogram("quarry_candidates", "Fused candidates per search",
                                boundaries=[1, 5, 10, 20, 50, 100, 200]),
        "delivered": Histogram("quarry_delivered_tokens", "Delivered tokens per search",
                               boundaries=[50, 100, 200, 500, 1000, 1500, 2000, 4000]),
        "abstentions": Counter("quarry_abstentions", "Abstentions by reason code", tag_keys=("reason",)),
    }


# Module-level helpers the Gateway uses sit above it: @serve.deployment pickles the class
# where it is defined, so names defined below it would be missing in the replica.
def search_response(res: SearchResult) -> dict[str, Any]:
    """The agent-facing body of a search: excerpts (each with its verdict), the decision
    record next to them, stages and counts. The trace-only parts (candidates) stay out."""
    return {
        "excerpts": [e.model_dump(mode="json") for e in res.excerpts],
        # {"valid_at", "governing"/"supporting": [{passage_id, reason, validity}], "rejected": [{passage_id,
        #  reason, by, detail}], "unresolved": [{passage_ids, reason}], "related": [{passage_id, outdated,
        #  detail}]}: the same record quarry search --json prints
        "decision": None if res.decision is None else res.decision.model_dump(mode="json"),
        "stages": [st.model_dump(mode="json") for st in res.stages],
        "generation": res.generation,
        "delivered_tokens": res.delivered_tokens,
        "truncated": res.truncated,
        "message": res.message,
    }


async def _awaited(response):
    """A deployment response as a coroutine, so ``asyncio.wait_for`` can bound it."""
    return await response


_IDENTITY_CACHE = 4096  # verified tokens kept per replica (until their exp)
_KNOWN_RUNS = 65536  # run ids this replica saw created or decided, with their principal key


@serve.deployment(name="Gateway")
@serve.ingress(api)
class Gateway:
    """Verifies the caller, applies the run rules, and composes the search path from
    deployment handles in the order of ``quarry.core.search.stages.search``: Retriever (first
    stage) -> Reranker (second stage) -> Retriever (expansion) -> Resolver -> response
    (first stage and expansion in one Retriever call when no second stage runs).
    The per-tool logic (``_search_impl``, ...) is separate from the FastAPI handlers so
    other transports can call it."""

    def __init__(self, settings: ServeSettings, retriever, reranker=None, resolver=None):
        self.s = settings
        edge.configure(settings)
        self.retriever, self.reranker, self.resolver = retriever, reranker, resolver
        self.search_settings = search_settings(settings)
        self._stage_infos: LRU[tuple[str, int], tuple[float, StageInfo]] = LRU(2 * settings.lru_tenants)
        self._last_gen: LRU[str, int] = LRU(2 * settings.lru_tenants)  # tenant -> generation its last search ran on
        self.runs = make_run_store(settings)
        self.traces = TraceWriter(settings.trace_root, retention_h=settings.trace_retention_h,
                                  per_tenant_hour=settings.traces_per_tenant_hour, flush_ms=settings.trace_flush_ms)
        self.m = _metrics()
        self._identities: LRU[str, tuple[Identity, float]] = LRU(_IDENTITY_CACHE)
        # run_id -> (principal key, searches_left last seen). A run known here skips the
        # existence check before its search: the one store call after the search decides.
        self._known: LRU[str, tuple[str, int]] = LRU(_KNOWN_RUNS)
        self.mcp = None
        if settings.mcp_enabled:
            from quarry.serve.http.mcp import MCPEndpoint  # defers the MCP SDK until the endpoint is switched on

            self.mcp = MCPEndpoint(self)

    def __del__(self):
        # Serve calls this on graceful replica shutdown: buffered traces reach disk.
        traces = getattr(self, "traces", None)
        if traces is not None:
            traces.close()

    async def check_health(self) -> None:
        """Serve's replica health check: a dead trace writer thread makes this replica
        unhealthy, so Serve replaces it instead of letting it drop traces."""
        if not self.traces._thread.is_alive():
            raise RuntimeError("trace writer stopped")

    # -- helpers -----------------------------------------------------------------------
    def _identity(self, authorization: str | None) -> Identity:
        try:
            return self.verify(bearer_token(authorization))
        except AuthError:
            # One body for every failure: expired, forged and malformed look the same.
            raise _Reject(401, {"detail": "unauthorized"}, {"WWW-Authenticate": "Bearer"}) from None

    def verify(self, token: str) -> Identity:
        """Verify a bearer token, remembering a verified one until its ``exp`` (signature
        checks are the largest fixed cost of a request; a cached entry is only ever a token
        that passed every check, and it leaves the cache when it expires)."""
        now = time.time()
        hit = self._identities.get(token)
        if hit is not None and now < hit[1]:
            return hit[0]
        ident = verify_token(token, self.s.auth)
        import jwt

        exp = float(jwt.decode(token, options={"verify_signature": False})["exp"])
        self._identities.put(token, (ident, exp + self.s.auth.leeway_s))
        return ident

    def _remember(self, run_id: str, pkey: str, searches_left: int) -> None:
        self._known.put(run_id, (pkey, searches_left))

    def _count(self, endpoint: str, status: int) -> None:
        self.m["requests"].inc(tags={"endpoint": endpoint, "status": str(status)})

    def _lat(self, stage: str, t0: float) -> float:
        ms = (time.perf_counter() - t0) * 1000
        self.m["latency"].observe(ms, tags={"stage": stage})
        return ms

    def _trace(self, ident: Identity, kind: str, body: dict[str, Any]) -> str:
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

    def _abstain(self, ident: Identity, run_id: str, reason: str,
                 extra: dict[str, Any] | None = None) -> dict[str, Any]:
        self.m["abstentions"].inc(tags={"reason": reason})
        trace_id = self._trace(ident, "abstention", {"run_id": run_id, "reason": reason, **(extra or {})})
        # The reason code stays in the trace; the caller gets the one generic sentence.
        return {"status": "abstained", "message": ABSTENTION_MESSAGE, "searches_left": 0, "trace_id": trace_id}

    async def _retriever(self, method: str, *args: Any) -> Any:
        """A Retriever call, retried once when its replica died under it (read-only)."""
        return await call_retrying(self.retriever, method, *args)

    async def _store(self, endpoint: str, coro):
        """One run-store call. Unknown, foreign and expired runs, and a store that does not
        answer, all fail closed with the generic 404."""
        try:
            return await coro
        except (RunNotFound, StoreUnavailable):
            self._count(endpoint, 404)
            raise _not_found() from None

    # -- per-tool logic (REST handlers and MCP tools call these) ------------------------
    async def _create_run_impl(self, ident: Identity) -> dict[str, Any]:
        pkey = principal_key(ident.principal)
        try:
            view = await self.runs.create(pkey, self.s.run_budget)
        except QuotaExceeded as e:
            self._count("runs", 429)
            raise _Reject(429, {"detail": f"too many open runs for this {e.scope} (limit {e.limit}); finish a run "
                                          "with submit_answer or wait for one to expire"},
                          {"Retry-After": "60"}) from None
        except StoreUnavailable:
            self._count("runs", 503)
            raise _Reject(503, {"detail": "run store unavailable; retry shortly"}, {"Retry-After": "1"}) from None
        self._remember(view.run_id, pkey, view.searches_left)
        self._count("runs", 200)
        return {"run_id": view.run_id, "budget": view.budget, "searches_left": view.searches_left}

    async def _fetch_impl(self, ident: Identity, run_id: str, request: FetchRequest) -> dict[str, Any]:
        pkey = principal_key(ident.principal)
        await self._store("fetch", self.runs.get(run_id, pkey))
        t0 = time.perf_counter()
        res = await self._retriever("fetch", ident.principal, request.id)
        self._lat("fetch", t0)
        if res is None:
            self._count("fetch", 404)
            raise _not_found()
        rejected = sorted(res.decision.rejected_ids) if res.decision is not None else []
        await self._store("fetch", self.runs.record_fetch(run_id, pkey, res.ids, rejected))
        self._count("fetch", 200)
        return res.to_json()

    async def _answer_impl(self, ident: Identity, run_id: str, decision: SubmitAnswerRequest | None,
                           errors: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        """``decision`` is None when the body did not validate (``errors`` says why): that
        still ends the run, as invalid_decision (seed 003), and answers 422."""
        pkey = principal_key(ident.principal)
        start = await self._store("answer", self.runs.begin_answer(run_id, pkey))
        if not start.allowed:
            self._count("answer", 409)
            raise _Reject(409, {"detail": "this run has finished; create a new run"})
        if decision is None:
            await self.runs.end_answer(run_id, pkey, "invalid_decision")
            self.m["abstentions"].inc(tags={"reason": "invalid_decision"})
            self._trace(ident, "abstention", {"run_id": run_id, "reason": "invalid_decision"})
            self._count("answer", 422)
            raise _Reject(422, {"detail": error_details(errors or [], ("body",))})
        retrieved = set(start.retrieved_ids)
        rejected = frozenset(start.rejected_ids)  # what this run's resolution rejected
        if decision.abstention is not None:
            reason = "model_abstained" if retrieved else "no_visible_evidence"
            await self.runs.end_answer(run_id, pkey, reason)
            self._count("answer", 200)
            return self._abstain(ident, run_id, reason)
        cited = sorted({c.passage_id for c in decision.claims} & retrieved)
        texts = await self._retriever("texts", ident.principal, cited) if cited else {}
        report = check_claims(decision.claims, retrieved, texts.get, rejected=rejected)
        checks = [c.model_dump(mode="json") | {"failed": list(c.failed_checks)} for c in report.claims]
        if not report.passed:
            reason = report.abstention_reason  # cites_rejected_evidence or citation_check_failed
            await self.runs.end_answer(run_id, pkey, reason)
            self._count("answer", 200)
            return self._abstain(ident, run_id, reason, extra={"checks": checks})
        await self.runs.end_answer(run_id, pkey, "answered")
        trace_id = self._trace(ident, "answer", {"run_id": run_id, "outcome": "answered", "checks": checks})
        self._count("answer", 200)
        return {"status": "answered", "claims": [c.model_dump() for c in decision.claims], "trace_id": trace_id}

    # -- endpoints ---------------------------------------------------------------------
    @api.get("/healthz", tags=["ops"])
    async def healthz(self, authorization: str | None = Header(default=None)) -> dict[str, Any]:
        """Liveness for probes: ``{"status": "ok"}``. With an operator token, also the
        operator's tenant as loaded by a Retriever replica (live generation, the second
        stage served and its gate decision); only a platform credential (its own key and
        audience, which no tenant token can carry) sees every published tenant. Tenant names
        are never listed to anonymous callers."""
        try:
            token = bearer_token(authorization)
        except AuthError:
            return {"status": "ok"}
        if verify_platform_token(token, self.s.auth):
            tenants = None  # the platform view: every published tenant
        else:
            try:
                ident = verify_token(token, self.s.auth)
            except AuthError:
                return {"status": "ok"}
            if not ident.is_operator:
                return {"status": "ok"}
            tenants = [ident.principal.tenant]
        status = await self.retriever.status.remote(tenants)
        # the second stage only for tenants this replica serves: listing every published
        # tenant must not make the Reranker choose (and cache) a stage for each of them
        return {"status": "ok", "tenants": {t: {**v, "second_stage": stage_trace(
            await self._stage_info(t, v["generation"])) if v["loaded"] else None} for t, v in status.items()}}

    @api.get("/v1/tools", tags=["agent"])
    async def tools(self) -> dict[str, Any]:
        """Tool definitions for OpenAI function calling and Anthropic tool use, with this
        server's ceilings (top_k, candidates) in the search schema."""
        return tool_definitions(self.s.top_k_ceiling, self.s.candidate_width_ceiling)

    @api.post("/v1/runs", tags=["agent"])
    async def create_run(self, authorization: str | None = Header(default=None)) -> dict[str, Any]:
        return await self._create_run_impl(self._identity(authorization))

    # -- the search path: a composition of deployment handles -------------------------
    async def _stage_info(self, tenant: str, generation: int) -> StageInfo:
        """What the Reranker serves for this generation, cached ``stage_check_s``, so a
        search skips the Reranker hop entirely when no stage is enabled."""
        if self.reranker is None:
            return StageInfo(generation=generation,
                             reason="second stage off in this deployment (reranker_enabled: false)")
        key = (tenant, generation)
        hit = self._stage_infos.get(key)
        if hit is not None and time.monotonic() - hit[0] < self.s.stage_check_s:
            return hit[1]
        try:
            info = await asyncio.wait_for(_awaited(self.reranker.describe.remote(tenant, generation)),
                                          self.s.reranker_timeout_s)
        except Exception as e:  # noqa: BLE001 - the fused order is always a valid answer
            log.warning("Reranker.describe(%s, %s) failed: %s", tenant, generation, e)
            return StageInfo(generation=generation, unavailable=True,
                             reason=f"second stage unavailable ({type(e).__name__})")
        self._stage_infos.put(key, (time.monotonic(), info))
        return info

    async def _second_stage(self, first: FirstStage, query: str, top_k: int) -> RerankOutcome:
        info = await self._stage_info(first.tenant, first.generation)
        if not info.enabled or not first.candidates:
            return RerankOutcome(status="skipped", info=info)
        req = RerankRequest(tenant=first.tenant, generation=first.generation, query=query,
                            candidates=first.candidates, top_k=top_k)
        try:
            return await asyncio.wait_for(_awaited(self.reranker.rerank.remote(req)), self.s.reranker_timeout_s)
        except Exception as e:  # noqa: BLE001 - degrade to the fused order, say so
            log.warning("rerank for %s gen %s failed: %s", first.tenant, first.generation, e)
            return RerankOutcome(status="failed", info=info, error=type(e).__name__)

    def _serves_no_stage(self, tenant: str) -> bool:
        """True when this deployment has no Reranker, or the cached stage info for the
        tenant's last seen generation says no second stage runs: the search then asks the
        Retriever for the first stage and the expansion in one call."""
        if self.reranker is None:
            return True
        gen = self._last_gen.get(tenant)
        hit = self._stage_infos.get((tenant, gen)) if gen is not None else None
        return hit is not None and time.monotonic() - hit[0] < self.s.stage_check_s and not hit[1].enabled

    async def _compose(self, principal: Principal, request: SearchToolRequest, timing: dict[str, float]
                       ) -> tuple[SearchResult, RerankOutcome, Resolution]:
        """Retriever -> Reranker -> Retriever (expand) -> Resolver, each returning a typed record.
        When the tenant serves no second stage, one Retriever call does the first stage and
        the expansion; a new generation that serves one is reranked and expanded as usual."""
        core = request.core()
        t0 = time.perf_counter()
        pre: Retrieval | None = None
        if self._serves_no_stage(principal.tenant):
            pre = await self._retriever("retrieve", principal, core, request.candidates)
            first = pre.first
        else:
            first = await self._retriever("first_stage", principal, core, request.candidates)
        self._last_gen.put(principal.tenant, first.generation)
        timing["retrieve"] = self._lat("retrieve", t0)
        t0 = time.perf_counter()
        outcome = await self._second_stage(first, core.query, core.top_k)
        timing["rerank"] = self._lat("rerank", t0)
        second = apply_second_stage(first, outcome, core.top_k)
        if second.survivors:
            if pre is not None and outcome.status != "applied":  # the fused top-k survived: already expanded
                delivered = Delivery(expansion=pre.expansion, evidence=pre.evidence)
            else:
                t0 = time.perf_counter()
                delivered = await self._retriever("expand", ExpandRequest(
                    principal=principal, request=core, generation=first.generation, passage_ids=second.survivors))
                timing["expand"] = self._lat("expand", t0)
            expanded = delivered.expansion
            if delivered.evidence is not None and delivered.evidence.delivered:
                t0 = time.perf_counter()
                resolution = await call_retrying(self.resolver, "resolve", ResolveRequest(
                    principal=principal, request=core, evidence=delivered.evidence))
                timing["resolve"] = self._lat("resolve", t0)
            else:
                resolution = nothing_resolved(core)
        else:
            expanded, resolution = nothing_expanded(), nothing_resolved(core)
        return assemble(core, first, second, expanded, resolution), outcome, resolution

    async def _search_impl(self, ident: Identity, run_id: str, request: SearchToolRequest,
                           timing: dict[str, float] | None = None) -> dict[str, Any] | JSONResponse:
        """The search tool: limits, the run's budget, the composed search path, the run
        state (delivered and rejected ids) and the trace. ``timing`` collects per-stage ms."""
        timing = {} if timing is None else timing
        if request.top_k > self.s.top_k_ceiling:
            raise _Reject(422, {"detail": [{"loc": ["body", "top_k"], "type": "less_than_equal",
                                            "msg": f"top_k may be at most {self.s.top_k_ceiling}"}]})
        if request.candidates is not None and request.candidates > self.s.candidate_width_ceiling:
            raise _Reject(422, {"detail": [{"loc": ["body", "candidates"], "type": "less_than_equal",
                                            "msg": f"candidates may be at most {self.s.candidate_width_ceiling}"}]})
        pkey = principal_key(ident.principal)
        t0 = time.perf_counter()
        known = self._known.get(run_id)
        if known is None or known[0] != pkey:
            # not seen on this replica: check it exists for this principal before searching
            await self._store("search", self.runs.get(run_id, pkey))
            timing["check"] = self._lat("run_store", t0)
        res = outcome = resolution = None
        if known is None or known[1] > 0:
            res, outcome, resolution = await self._compose(ident.principal, request, timing)
        delivered = [e.passage_id for e in res.excerpts] if res is not None else []
        rejected = sorted(res.decision.rejected_ids) if res is not None and res.decision is not None else []
        t0 = time.perf_counter()
        # One atomic decision after the search: budget, new-evidence rule, delivered and
        # rejected ids. A refused search's results are never delivered.
        after = await self._store("search", self.runs.apply_search(run_id, pkey, delivered, rejected))
        timing["decide"] = self._lat("run_store", t0)
        self._remember(run_id, pkey, after.view.searches_left)
        if not after.allowed or res is None:
            self._count("search", 409)
            # Searching past the budget ends the run: it abstains with budget_exhausted.
            raise _Reject(409, self._abstain(ident, run_id, "budget_exhausted", extra={
                **query_fields(ident.principal.tenant, request.query, self.s.trace_query_chars),
                "first_refusal": after.newly_finished}))
        decision = res.decision
        self.m["candidates"].observe(len(res.candidates))
        self.m["delivered"].observe(res.delivered_tokens)
        final_pos = {pid: i for i, pid in enumerate(delivered, start=1)}
        expanded = {e.passage_id for e in res.excerpts if e.expanded_to}
        width = candidate_width(self.search_settings, request.candidates, request.top_k)
        new_ids = list(after.new_ids)
        trace_id = self._trace(ident, "search", {
            "run_id": run_id,
            **query_fields(ident.principal.tenant, request.query, self.s.trace_query_chars),
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
        })
        self._count("search", 200)
        return {"run_id": run_id, **search_response(res), "new_passage_ids": new_ids,
                "searches_left": after.view.searches_left, "trace_id": trace_id}

    @api.post("/v1/search", tags=["agent"])
    async def search(self, request: SearchToolRequest, response: Response,
                     authorization: str | None = Header(default=None),
                     x_quarry_run: str = Header(alias=RUN_HEADER)):
        t_start = time.perf_counter()
        timing: dict[str, float] = {}  # per-stage ms, returned as a Server-Timing header (no content)
        ident = self._identity(authorization)
        timing["auth"] = self._lat("auth", t_start)
        body = await self._search_impl(ident, x_quarry_run, request, timing)
        timing["total"] = self._lat("total_search", t_start)
        response.headers["Server-Timing"] = ", ".join(f"{k};dur={v:.2f}" for k, v in timing.items())
        return body

    @api.post("/v1/fetch", tags=["agent"])
    async def fetch(self, request: FetchRequest, authorization: str | None = Header(default=None),
                    x_quarry_run: str = Header(alias=RUN_HEADER)):
        return await self._fetch_impl(self._identity(authorization), x_quarry_run, request)

    @api.post("/v1/answer", tags=["agent"], openapi_extra={"requestBody": {
        "required": True, "content": {"application/json": {"schema": SubmitAnswerRequest.model_json_schema()}}}})
    async def answer(self, http: Request, authorization: str | None = Header(default=None),
                     x_quarry_run: str = Header(alias=RUN_HEADER)):
        ident = self._identity(authorization)
        # Parsed here, not by FastAPI, so a malformed decision can end the run as
        # invalid_decision (seed 003: an invalid decision abstains) while still answering 422.
        try:
            decision = SubmitAnswerRequest.model_validate_json(await http.body())
            errors = None
        except ValidationError as e:
            decision, errors = None, e.errors(include_url=False, include_input=False)
        return await self._answer_impl(ident, x_quarry_run, decision, errors)

    @api.get("/v1/trace/{trace_id}", tags=["ops"])
    async def trace(self, trace_id: str, authorization: str | None = Header(default=None)):
        ident = self._identity(authorization)
        if not ident.is_operator:
            raise _not_found()  # same as a missing trace: the endpoint does not admit it exists
        # A trace written by another replica reaches disk within trace_flush_ms.
        wait = 3 * self.s.trace_flush_ms / 1000
        t = await asyncio.to_thread(find_trace, self.s.trace_root, ident.principal.tenant, trace_id, wait)
        if t is None:
            raise _not_found()
        # The operator sees only ids its own groups may read (trace_privacy).
        named = sorted(passage_ids(t))
        visible = await self._retriever("texts", ident.principal, named) if named else {}
        return redact_trace(t, set(visible))

    @api.api_route("/mcp", methods=["GET", "POST", "DELETE"], include_in_schema=False)
    async def mcp_endpoint(self, request: Request):
        """The MCP Streamable HTTP endpoint (``serve/http/mcp.py``): the same three tools."""
        if self.mcp is None:
            raise _not_found()
        return await self.mcp.response(request)

    @api.get("/.well-known/oauth-protected-resource/mcp", include_in_schema=False)
    async def mcp_resource_metadata(self, request: Request):
        """RFC 9728 protected-resource metadata for the MCP endpoint."""
        if self.mcp is None:
            raise _not_found()
        return self.mcp.resource_metadata(request)

