"""The FastAPI ingress: routes each request, verifies the caller, and hands the agent
tools to :class:`~quarry.serve.http.agent_tools.AgentTools` (run rules, the composed
search, traces).

Run id travels in the ``X-Quarry-Run`` header (not the body, so tool schemas stay the
agent's inputs only; not the query string, so it stays out of access logs). Not-found and
not-permitted share one response everywhere: ``404 {"detail": "not found"}``. Response
bodies are the models of ``responses.py``, from which the OpenAPI document is generated.
"""

import asyncio
import time

from fastapi import FastAPI, Header, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ValidationError
from ray import serve

from quarry.core.rank.second_stage import stage_trace

from quarry.serve.deployments.handles import DeploymentStages, call_retrying
from quarry.serve.http import admin, edge
from quarry.serve.http.agent_tools import AgentTools, ToolError, not_found
from quarry.serve.http.auth import AuthError, CachedVerifier, Identity, bearer_token, verify_platform_token, verify_token
from quarry.serve.http.metrics import GatewayMetrics
from quarry.serve.http.responses import Health, TenantHealth, ToolDefinitions
from quarry.serve.http.tools import FetchRequest, SearchToolRequest, SubmitAnswerRequest, tool_definitions
from quarry.serve.settings import ServeSettings
from quarry.serve.stores.factory import make_run_store
from quarry.serve.stores.trace_privacy import passage_ids, redact_trace
from quarry.serve.stores.tracestore import TraceWriter, find_trace

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
api.include_router(admin.router)  # /v1/admin/...: platform credential only (quarry/serve/http/admin.py)


@api.exception_handler(ToolError)
async def _refused(_: Request, e: ToolError):
    return JSONResponse(e.body, status_code=e.status, headers=e.headers)


def _body(model: BaseModel, headers: dict[str, str] | None = None) -> JSONResponse:
    """A response model as the JSON body (the wire format: ``model_dump(mode="json")``)."""
    return JSONResponse(model.model_dump(mode="json"), headers=headers)


@serve.deployment(name="Gateway")
@serve.ingress(api)
class Gateway:
    """Routes, verifies the caller and records; the search path is composed over the
    deployment handles by ``quarry.core.search.composer.compose``
    (``quarry/serve/deployments/handles.py``), the tools are ``AgentTools`` (``agent_tools``)."""

    def __init__(self, settings: ServeSettings, retriever, reranker=None, resolver=None):
        self.settings = settings
        edge.configure(settings)
        self.stages = DeploymentStages(settings, retriever, reranker, resolver)
        self.traces = TraceWriter(settings.trace_root, retention_h=settings.trace_retention_h,
                                  per_tenant_hour=settings.traces_per_tenant_hour, flush_ms=settings.trace_flush_ms)
        self.metrics = GatewayMetrics(settings.tenant_limits.metrics_top_tenants)
        runs = make_run_store(settings)
        edge.configure(settings, runs)  # the admin purge reaches the run store through this slot
        self.agent_tools = AgentTools(settings, self.stages, runs, self.traces, self.metrics)
        self.verifier = CachedVerifier(settings.auth)
        self.mcp = None
        if settings.mcp_enabled:
            from quarry.serve.http.mcp import MCPEndpoint  # defers the MCP SDK until the endpoint is switched on

            self.mcp = MCPEndpoint(settings, self.agent_tools, self.verifier)

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

    def _identity(self, authorization: str | None) -> Identity:
        try:
            return self.verifier.verify(bearer_token(authorization))
        except AuthError:
            # One body for every failure: expired, forged and malformed look the same.
            raise ToolError(401, {"detail": "unauthorized"}, {"WWW-Authenticate": "Bearer"}) from None

    # -- routes ------------------------------------------------------------------------
    @api.get("/healthz", tags=["ops"])
    async def healthz(self, authorization: str | None = Header(default=None)):
        """Liveness for probes: ``{"status": "ok"}``. With an operator token, also the
        operator's tenant as loaded by a Retriever replica (live generation, the second
        stage served and its gate decision); only a platform credential (its own key and
        audience, which no tenant token can carry) sees every published tenant. Tenant names
        are never listed to anonymous callers."""
        try:
            token = bearer_token(authorization)
        except AuthError:
            return _body(Health())
        if verify_platform_token(token, self.settings.auth):
            tenants = None  # the platform view: every published tenant
        else:
            try:
                ident = verify_token(token, self.settings.auth)
            except AuthError:
                return _body(Health())
            if not ident.is_operator:
                return _body(Health())
            tenants = [ident.principal.tenant]
        status = await self.stages.retriever.status.remote(tenants)
        # the second stage only for tenants this replica serves: listing every published
        # tenant must not make the Reranker choose (and cache) a stage for each of them
        return _body(Health(tenants={t: TenantHealth(**dict(v), second_stage=stage_trace(
            await self.stages.stage_info(t, v.generation)) if v.loaded else None) for t, v in status.items()}))

    @api.get("/v1/tools", tags=["agent"])
    async def tools(self):
        """Tool definitions for OpenAI function calling and Anthropic tool use, with this
        server's ceilings (top_k, candidates) in the search schema."""
        return _body(ToolDefinitions(**tool_definitions(self.settings.top_k_ceiling,
                                                        self.settings.candidate_width_ceiling)))

    @api.post("/v1/runs", tags=["agent"])
    async def create_run(self, authorization: str | None = Header(default=None)):
        return _body(await self.agent_tools.create_run(self._identity(authorization)))

    @api.post("/v1/search", tags=["agent"])
    async def search(self, request: SearchToolRequest, authorization: str | None = Header(default=None),
                     x_quarry_run: str = Header(alias=RUN_HEADER)):
        t_start = time.perf_counter()
        timing: dict[str, float] = {}  # per-stage ms, returned as a Server-Timing header (no content)
        ident = self._identity(authorization)
        timing["auth"] = self.metrics.observe_ms("auth", (time.perf_counter() - t_start) * 1000)
        body = await self.agent_tools.search(ident, x_quarry_run, request, timing)
        timing["total"] = self.metrics.observe_ms("total_search", (time.perf_counter() - t_start) * 1000)
        return _body(body, {"Server-Timing": ", ".join(f"{k};dur={v:.2f}" for k, v in timing.items())})

    @api.post("/v1/fetch", tags=["agent"])
    async def fetch(self, request: FetchRequest, authorization: str | None = Header(default=None),
                    x_quarry_run: str = Header(alias=RUN_HEADER)):
        return _body(await self.agent_tools.fetch(self._identity(authorization), x_quarry_run, request))

    @api.post("/v1/answer", tags=["agent"], openapi_extra={"requestBody": {
        "required": True, "content": {"application/json": {"schema": SubmitAnswerRequest.model_json_schema()}}}})
    async def answer(self, http: Request, authorization: str | None = Header(default=None),
                     x_quarry_run: str = Header(alias=RUN_HEADER)):
        ident = self._identity(authorization)
        # Parsed here, not by FastAPI, so a malformed decision can end the run as
        # invalid_decision (an invalid decision abstains) while still answering 422.
        try:
            decision = SubmitAnswerRequest.model_validate_json(await http.body())
            errors = None
        except ValidationError as e:
            decision, errors = None, e.errors(include_url=False, include_input=False)
        return _body(await self.agent_tools.answer(ident, x_quarry_run, decision, errors))

    @api.get("/v1/trace/{trace_id}", tags=["ops"])
    async def trace(self, trace_id: str, authorization: str | None = Header(default=None)):
        ident = self._identity(authorization)
        if not ident.is_operator:
            raise not_found()  # same as a missing trace: the endpoint does not admit it exists
        # A trace written by another replica reaches disk within trace_flush_ms.
        wait = 3 * self.settings.trace_flush_ms / 1000
        t = await asyncio.to_thread(find_trace, self.settings.trace_root, ident.principal.tenant, trace_id, wait)
        if t is None:
            raise not_found()
        # The operator sees only ids its own groups may read (trace_privacy).
        named = sorted(passage_ids(t))
        visible = await call_retrying(self.stages.retriever, "texts", ident.principal, named) if named else {}
        return JSONResponse(redact_trace(t, set(visible)))  # the stored record as written (responses.TraceView)

    @api.api_route("/mcp", methods=["GET", "POST", "DELETE"], include_in_schema=False)
    async def mcp_endpoint(self, request: Request):
        """The MCP Streamable HTTP endpoint (``quarry/serve/http/mcp.py``): the same three tools."""
        if self.mcp is None:
            raise not_found()
        return await self.mcp.response(request)

    @api.get("/.well-known/oauth-protected-resource/mcp", include_in_schema=False)
    async def mcp_resource_metadata(self, request: Request):
        """RFC 9728 protected-resource metadata for the MCP endpoint."""
        if self.mcp is None:
            raise not_found()
        return self.mcp.resource_metadata(request)
