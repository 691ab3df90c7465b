"""The FastAPI ingress: verifies the caller, enforces run rules, composes deployments.

Run id travels in the ``X-Quarry-Run`` header (not the body, so tool schemas stay the
agent's inputs only; not the query string, so it stays out of access logs). Not-found and
not-permitted share one response everywhere: ``404 {"detail": "not found"}``.
"""


import hashlib
import time
import uuid
from typing import Any

from fastapi import FastAPI, Header, Request, Response
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from ray import serve

from quarry.core.citations import ABSTENTION_MESSAGE, check_claims
from quarry.core.runs import groups_hash, principal_key

from . import edge
from .auth import AuthError, Identity, bearer_token, verify_platform_token, verify_token
from .errors import error_details
from .runstore import NOT_FOUND, get_stores
from .settings import ServeSettings
from .tools import FetchRequest, SearchToolRequest, SubmitAnswerRequest, tool_definitions
from .trace_privacy import passage_ids, query_fields, redact_trace

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


@serve.deployment(name="Gateway")
@serve.ingress(api)
class Gateway:
    def __init__(self, settings: ServeSettings, retriever):
        self.s = settings
        edge.configure(settings)
        self.retriever = retriever
        self.runs, self.traces = get_stores(settings.store_name_prefix, settings.ray_namespace, settings.trace_capacity)
        self.m = _metrics()

    # -- helpers -----------------------------------------------------------------------
    def _identity(self, authorization: str | None) -> Identity:
        try:
            return verify_token(bearer_token(authorization), self.s.auth)
        except AuthError:
            # One body for every failure: expired, forged and malformed look the same.
            raise _Reject(401, {"detail": "unauthorized"}, {"WWW-Authenticate": "Bearer"}) from None

    def _count(self, endpoint: str, status: int) -> None:
        self.m["requests"].inc(tags={"endpoint": endpoint, "status": str(status)})

    def _lat(self, stage: str, t0: float) -> float:
        ms = (time.perf_counter() - t0) * 1000
        self.m["latency"].observe(ms, tags={"stage": stage})
        return ms

    async def _trace(self, ident: Identity, kind: str, body: dict[str, Any]) -> str:
        trace_id = uuid.uuid4().hex
        p = ident.principal
        await self.traces.put.remote(trace_id, {
            "trace_id": trace_id, "kind": kind, "at": time.time(), "tenant": p.tenant,
            "groups_hash": groups_hash(p.groups),
            "subject_hash": hashlib.sha256(p.subject.encode()).hexdigest()[:16], **body,
        })
        return trace_id

    async def _abstain(self, ident: Identity, run_id: str, reason: str, status: int = 200,
                       extra: dict[str, Any] | None = None) -> JSONResponse:
        self.m["abstentions"].inc(tags={"reason": reason})
        trace_id = await self._trace(ident, "abstention", {"run_id": run_id, "reason": reason, **(extra or {})})
        # The reason code stays in the trace; the caller gets the one generic sentence.
        return JSONResponse({"status": "abstained", "message": ABSTENTION_MESSAGE, "searches_left": 0,
                             "trace_id": trace_id}, status_code=status)

    # -- endpoints ---------------------------------------------------------------------
    @api.get("/healthz", tags=["ops"])
    async def healthz(self, authorization: str | None = Header(default=None)) -> dict[str, Any]:
        """Liveness for probes: ``{"status": "ok"}``. With an operator token, also the
        operator's tenant as loaded by a Retriever replica (live generation, the second
        stage served and its gate decision); only a platform credential (its own key and
        audience, which no tenant token can carry) sees every loaded tenant. Tenant names
        are never listed to anonymous callers."""
        try:
            token = bearer_token(authorization)
        except AuthError:
            return {"status": "ok"}
        if verify_platform_token(token, self.s.auth):
            return {"status": "ok", "tenants": await self.retriever.status.remote(None)}
        try:
            ident = verify_token(token, self.s.auth)
        except AuthError:
            return {"status": "ok"}
        if not ident.is_operator:
            return {"status": "ok"}
        loaded = await self.retriever.status.remote([ident.principal.tenant])
        return {"status": "ok", "tenants": loaded}

    @api.get("/v1/tools", tags=["agent"])
    async def tools(self) -> dict[str, Any]:
        """Tool definitions for OpenAI function calling and Anthropic tool use, with this
        server's ceilings (top_k, candidates) in the search schema."""
        return tool_definitions(self.s.top_k_ceiling, self.s.candidate_width_ceiling)

    @api.post("/v1/runs", tags=["agent"])
    async def create_run(self, authorization: str | None = Header(default=None)) -> dict[str, Any]:
        ident = self._identity(authorization)
        view = await self.runs.create.remote(principal_key(ident.principal), self.s.run_budget)
        self._count("runs", 200)
        return {"run_id": view["run_id"], "budget": view["budget"], "searches_left": view["searches_left"]}

    @api.post("/v1/search", tags=["agent"])
    async def search(self, request: SearchToolRequest, response: Response,
                     authorization: str | None = Header(default=None),
                     x_quarry_run: str = Header(alias=RUN_HEADER)):
        t_start = time.perf_counter()
        timing: dict[str, float] = {}  # per-stage ms, returned as a Server-Timing header (no content)
        ident = self._identity(authorization)
        timing["auth"] = self._lat("auth", t_start)
        if request.top_k > self.s.top_k_ceiling:
            raise _Reject(422, {"detail": [{"loc": ["body", "top_k"], "type": "less_than_equal",
                                            "msg": f"top_k may be at most {self.s.top_k_ceiling}"}]})
        if request.candidates is not None and request.candidates > self.s.candidate_width_ceiling:
            raise _Reject(422, {"detail": [{"loc": ["body", "candidates"], "type": "less_than_equal",
                                            "msg": f"candidates may be at most {self.s.candidate_width_ceiling}"}]})
        pkey = principal_key(ident.principal)
        t0 = time.perf_counter()
        slot = await self.runs.reserve_search.remote(x_quarry_run, pkey)
        timing["reserve"] = self._lat("run_store", t0)
        if slot == NOT_FOUND:
            self._count("search", 404)
            raise _not_found()
        if not slot["allowed"]:
            self._count("search", 409)
            # Searching past the budget ends the run: it abstains with budget_exhausted.
            return await self._abstain(ident, x_quarry_run, "budget_exhausted", status=409,
                                       extra={**query_fields(ident.principal.tenant, request.query,
                                                             self.s.trace_query_chars),
                                              "first_refusal": slot.get("newly_finished")})
        t0 = time.perf_counter()
        res = await self.retriever.search.remote(ident.principal, request.core(), request.candidates)
        timing["retrieve"] = self._lat("retrieve", t0)
        timing.update({f"retriever-{k}": v for k, v in res.get("timings_ms", {}).items()})
        for stage, ms in res.get("timings_ms", {}).items():
            self.m["latency"].observe(ms, tags={"stage": f"retriever_{stage}"})
        delivered = [e["passage_id"] for e in res["excerpts"]]
        t0 = time.perf_counter()
        after = await self.runs.record_results.remote(x_quarry_run, pkey, delivered)
        timing["record"] = self._lat("run_store", t0)
        if after == NOT_FOUND:
            raise _not_found()
        self.m["candidates"].observe(len(res["candidates"]))
        self.m["delivered"].observe(res["delivered_tokens"])
        final_pos = {pid: i for i, pid in enumerate(delivered, start=1)}
        expanded = {e["passage_id"] for e in res["excerpts"] if e.get("expanded_to")}
        t0 = time.perf_counter()
        trace_id = await self._trace(ident, "search", {
            "run_id": x_quarry_run,
            **query_fields(ident.principal.tenant, request.query, self.s.trace_query_chars),
            "filters": {"top_k": request.top_k, "doc_type": request.doc_type,
                        "valid_at": request.valid_at and request.valid_at.isoformat(),
                        "candidates": request.candidates},
            "generation": res["generation"],
            # which second stage ran (or why none did): kind, gate decision, metrics, model id
            "second_stage": res.get("second_stage"),
            "candidates": [{**c, "expanded": c["passage_id"] in expanded,
                            "final_position": final_pos.get(c["passage_id"])} for c in res["candidates"]],
            "stages": res["stages"],
            "delivered": delivered,
            "source_versions": sorted({f"{e['doc_id']}@{e['version']}" for e in res["excerpts"]}),
            "new_ids": after["new_ids"],
            "searches_left": after["searches_left"],
            "truncated": res["truncated"],
        })
        timing["trace"] = (time.perf_counter() - t0) * 1000
        timing["total"] = self._lat("total_search", t_start)
        response.headers["Server-Timing"] = ", ".join(f"{k};dur={v:.2f}" for k, v in timing.items())
        self._count("search", 200)
        return {
            "run_id": x_quarry_run,
            "excerpts": res["excerpts"],
            "stages": res["stages"],
            "generation": res["generation"],
            "delivered_tokens": res["delivered_tokens"],
            "truncated": res["truncated"],
            "message": res["message"],
            "new_passage_ids": after["new_ids"],
            "searches_left": after["searches_left"],
            "trace_id": trace_id,
        }

    @api.post("/v1/fetch", tags=["agent"])
    async def fetch(self, request: FetchRequest, authorization: str | None = Header(default=None),
                    x_quarry_run: str = Header(alias=RUN_HEADER)):
        ident = self._identity(authorization)
        pkey = principal_key(ident.principal)
        if await self.runs.get.remote(x_quarry_run, pkey) == NOT_FOUND:
            self._count("fetch", 404)
            raise _not_found()
        t0 = time.perf_counter()
        res = await self.retriever.fetch.remote(ident.principal, request.id)
        self._lat("fetch", t0)
        if res is None:
            self._count("fetch", 404)
            raise _not_found()
        ids = [p["passage_id"] for p in res.get("passages", [])] or [res["section"]["parent_id"]]
        await self.runs.record_fetch.remote(x_quarry_run, pkey, ids)
        self._count("fetch", 200)
        return res

    @api.post("/v1/answer", tags=["agent"], openapi_extra={"requestBody": {
        "required": True, "content": {"application/json": {"schema": SubmitAnswerRequest.model_json_schema()}}}})
    async def answer(self, http: Request, authorization: str | None = Header(default=None),
                     x_quarry_run: str = Header(alias=RUN_HEADER)):
        ident = self._identity(authorization)
        pkey = principal_key(ident.principal)
        # Parsed here, not by FastAPI, so a malformed decision can end the run as
        # invalid_decision (seed 003: an invalid decision abstains) while still answering 422.
        try:
            decision = SubmitAnswerRequest.model_validate_json(await http.body())
            errors = None
        except ValidationError as e:
            decision, errors = None, e.errors(include_url=False, include_input=False)
        start = await self.runs.begin_answer.remote(x_quarry_run, pkey)
        if start == NOT_FOUND:
            self._count("answer", 404)
            raise _not_found()
        if not start["allowed"]:
            self._count("answer", 409)
            raise _Reject(409, {"detail": "this run has finished; create a new run"})
        if decision is None:
            await self.runs.end_answer.remote(x_quarry_run, pkey, "invalid_decision")
            self.m["abstentions"].inc(tags={"reason": "invalid_decision"})
            await self._trace(ident, "abstention", {"run_id": x_quarry_run, "reason": "invalid_decision"})
            self._count("answer", 422)
            return JSONResponse({"detail": error_details(errors or [], ("body",))}, status_code=422)
        retrieved = set(start["retrieved_ids"])
        if decision.abstention is not None:
            reason = "model_abstained" if retrieved else "no_visible_evidence"
            await self.runs.end_answer.remote(x_quarry_run, pkey, reason)
            self._count("answer", 200)
            return await self._abstain(ident, x_quarry_run, reason)
        cited = sorted({c.passage_id for c in decision.claims} & retrieved)
        texts = await self.retriever.texts.remote(ident.principal, cited) if cited else {}
        report = check_claims(decision.claims, retrieved, texts.get)
        checks = [c.model_dump(mode="json") | {"failed": list(c.failed_checks)} for c in report.claims]
        if not report.passed:
            await self.runs.end_answer.remote(x_quarry_run, pkey, "citation_check_failed")
            self._count("answer", 200)
            return await self._abstain(ident, x_quarry_run, "citation_check_failed", extra={"checks": checks})
        await self.runs.end_answer.remote(x_quarry_run, pkey, "answered")
        trace_id = await self._trace(ident, "answer", {"run_id": x_quarry_run, "outcome": "answered", "checks": checks})
        self._count("answer", 200)
        return {"status": "answered", "claims": [c.model_dump() for c in decision.claims], "trace_id": trace_id}

    @api.get("/v1/trace/{trace_id}", tags=["ops"])
    async def trace(self, trace_id: str, authorization: str | None = Header(default=None)):
        ident = self._identity(authorization)
        if not ident.is_operator:
            raise _not_found()  # same as a missing trace: the endpoint does not admit it exists
        t = await self.traces.get.remote(trace_id, ident.principal.tenant)
        if t is None:
            raise _not_found()
        # The operator sees only ids its own groups may read (trace_privacy).
        named = sorted(passage_ids(t))
        visible = await self.retriever.texts.remote(ident.principal, named) if named else {}
        return redact_trace(t, set(visible))
