"""The MCP endpoint (``/mcp``): the agent tools over the MCP Streamable HTTP transport.

Mounted in the same FastAPI app as the REST API (one Serve application, one port). The
three tools (``search``, ``fetch``, ``submit_answer``) have exactly the names,
descriptions, input schemas and ceilings of ``GET /v1/tools`` (``tools.tool_definitions``)
and call the same :class:`~quarry.serve.http.agent_tools.AgentTools` as the REST routes, so
permissions, run rules, traces and responses are the REST ones.

Authentication is the SDK's token-verifier hook (``BearerAuthBackend`` +
``RequireAuthMiddleware``) around the same verifier (and its cache) as REST; the principal comes
only from the bearer token. Protected-resource metadata (RFC 9728) is served at
``/.well-known/oauth-protected-resource/mcp``.

**One MCP session is one run.** Gateway replicas share nothing but the run store, and
Serve may send consecutive requests of one session to different replicas, so the SDK runs
stateless (no in-memory session) and this module issues the session id itself: answering
``initialize`` it creates a run for the token's principal and returns its id as the
``Mcp-Session-Id``, which the client sends on every later request. Any replica can then
serve the session, under the run's budget and new-evidence rules, and the run is bound to
the principal like a REST run (a different token gets the generic not-found). A client
may instead send ``X-Quarry-Run`` with a run from ``POST /v1/runs``; a new session starts a
new run. The sessionless 2026-07-28 protocol era is refused with the standard
unsupported-version error naming the handshake versions, so SDK clients in ``auto`` mode
fall back to a session.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import mcp_types as types
from mcp.server.auth.middleware.auth_context import AuthContextMiddleware
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser, BearerAuthBackend, RequireAuthMiddleware
from mcp.server.auth.provider import AccessToken
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.auth import ProtectedResourceMetadata
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from pydantic import AnyHttpUrl, ValidationError
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import Receive, Scope, Send

from quarry.serve.http.agent_tools import AgentTools, ToolError
from quarry.serve.http.auth import AuthError, CachedVerifier, Identity
from quarry.serve.http.tools import FetchRequest, SearchToolRequest, SubmitAnswerRequest, tool_definitions
from quarry.serve.settings import ServeSettings

SESSION_HEADER = "mcp-session-id"
RUN_HEADER = "x-quarry-run"
_MAX_BODY = 1 << 20  # an MCP message larger than this is refused before parsing


class QuarryAccessToken(AccessToken):
    """The SDK's access token, carrying the verified Quarry identity to the tools."""

    identity: Identity


class JWTTokenVerifier:
    """The SDK ``TokenVerifier`` hook over the gateway's own verification (and its cache)."""

    def __init__(self, verifier: CachedVerifier):
        self.verifier = verifier

    async def verify_token(self, token: str) -> AccessToken | None:
        try:
            ident = self.verifier.verify(token)
        except AuthError:
            return None
        return QuarryAccessToken(token=token, client_id=ident.principal.subject, scopes=sorted(ident.scopes),
                                 subject=ident.principal.subject, claims={"iss": self.verifier.settings.issuer},
                                 identity=ident)


class _ASGI(Response):
    """A FastAPI return value that hands the raw request to an ASGI app."""

    def __init__(self, app):
        self.app, self.background = app, None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.app(scope, receive, send)


class MCPEndpoint:
    def __init__(self, settings: ServeSettings, agent_tools: AgentTools, verifier: CachedVerifier):
        self.settings, self.agent_tools = settings, agent_tools
        self.tools = [types.Tool(name=t["name"], description=t["description"], input_schema=t["input_schema"])
                      for t in tool_definitions(settings.top_k_ceiling, settings.candidate_width_ceiling)["anthropic"]]
        self.server = Server("quarry", version="0.1.0", instructions=(
            "Evidence search over your organisation's documents. One session is one task: a search budget "
            "(searches_left), fetch to read around a hit, then submit_answer once."),
            on_list_tools=self._list_tools, on_call_tool=self._call_tool)
        # Bearer tokens are not ambient credentials, so DNS rebinding cannot borrow them;
        # Host checks would only break clients behind the Serve proxy or an ingress.
        self.manager = StreamableHTTPSessionManager(
            app=self.server, json_response=True, stateless=True,
            security_settings=TransportSecuritySettings(enable_dns_rebinding_protection=False))
        inner = RequireAuthMiddleware(_Sessions(self, StreamableHTTPASGIApp(self.manager)), [], None)
        self.app = AuthenticationMiddleware(AuthContextMiddleware(inner), backend=BearerAuthBackend(JWTTokenVerifier(verifier)))
        self._running: asyncio.Event | None = None

    async def _ensure_running(self) -> None:
        # The SDK's session manager needs its task group entered once per replica; Serve
        # does not run a mounted app's lifespan, so a background task holds it open.
        if self._running is None:
            self._running = asyncio.Event()
            started = asyncio.Event()

            async def hold():
                async with self.manager.run():
                    started.set()
                    await asyncio.Event().wait()

            self._task = asyncio.get_running_loop().create_task(hold())
            await started.wait()
            self._running.set()
        await self._running.wait()

    async def response(self, request: Request) -> Response:
        await self._ensure_running()
        return _ASGI(self.app)

    def resource_url(self, request: Request) -> str:
        return self.settings.mcp_resource_url or str(request.base_url).rstrip("/") + "/mcp"

    def resource_metadata(self, request: Request) -> Response:
        servers = self.settings.mcp_authorization_servers or [str(request.base_url).rstrip("/")]
        meta = ProtectedResourceMetadata(resource=AnyHttpUrl(self.resource_url(request)),
                                         authorization_servers=[AnyHttpUrl(u) for u in servers],
                                         scopes_supported=None, resource_name="Quarry evidence search")
        return JSONResponse(meta.model_dump(mode="json", exclude_none=True),
                            headers={"Cache-Control": "public, max-age=3600"})

    # -- MCP handlers ------------------------------------------------------------------
    async def _list_tools(self, ctx, params) -> types.ListToolsResult:
        return types.ListToolsResult(tools=self.tools)

    async def _call_tool(self, ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
        request: Request = ctx.request
        user = request.scope.get("user")
        if not isinstance(user, AuthenticatedUser) or not isinstance(user.access_token, QuarryAccessToken):
            return _error(401, {"detail": "unauthorized"})
        ident = user.access_token.identity
        run_id = request.headers.get(RUN_HEADER) or request.headers.get(SESSION_HEADER) or ""
        args = params.arguments or {}
        try:
            if params.name == "search":
                body = await self.agent_tools.search(ident, run_id, SearchToolRequest.model_validate(args))
            elif params.name == "fetch":
                body = await self.agent_tools.fetch(ident, run_id, FetchRequest.model_validate(args))
            elif params.name == "submit_answer":
                try:
                    decision, errors = SubmitAnswerRequest.model_validate(args), None
                except ValidationError as e:
                    decision, errors = None, e.errors(include_url=False, include_input=False)
                body = await self.agent_tools.answer(ident, run_id, decision, errors)
            else:
                return _error(404, {"detail": f"unknown tool {params.name[:40]!r}; tools: search, fetch, submit_answer"})
        except ValidationError as e:
            return _error(422, {"detail": [{"loc": list(x.get("loc", ())), "type": x.get("type"), "msg": x.get("msg")}
                                           for x in e.errors(include_url=False, include_input=False)]})
        except ToolError as e:
            return _error(e.status, e.body)
        data = body.model_dump(mode="json")
        return types.CallToolResult(content=[types.TextContent(text=json.dumps(data))], structured_content=data)


def _error(status: int, body: dict[str, Any]) -> types.CallToolResult:
    body = {"status_code": status, **body}
    return types.CallToolResult(content=[types.TextContent(text=json.dumps(body))], structured_content=body,
                                is_error=True)


class _Sessions:
    """ASGI wrapper: issues run ids as MCP session ids on ``initialize`` and refuses the
    sessionless protocol era (see the module docstring)."""

    def __init__(self, endpoint: MCPEndpoint, app):
        self.endpoint, self.app = endpoint, app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        version = headers.get("mcp-protocol-version")
        if scope.get("method") != "POST":
            if scope.get("method") == "DELETE":  # the client ends its session; the run expires by TTL
                await Response(status_code=200)(scope, receive, send)
                return
            await self.app(scope, receive, send)
            return
        body, more = b"", True
        while more:
            msg = await receive()
            body += msg.get("body", b"")
            more = msg.get("more_body", False)
            if len(body) > _MAX_BODY:
                await JSONResponse({"detail": "message too large"}, status_code=413)(scope, receive, send)
                return
        try:
            message = json.loads(body or b"null")
        except (ValueError, UnicodeDecodeError):
            message = None
        method = message.get("method") if isinstance(message, dict) else None
        if version is not None and version not in HANDSHAKE_PROTOCOL_VERSIONS:
            await JSONResponse({"jsonrpc": "2.0", "id": message.get("id") if isinstance(message, dict) else None,
                                "error": {"code": types.UNSUPPORTED_PROTOCOL_VERSION,
                                          "message": "this server speaks the session (handshake) protocol versions",
                                          "data": {"supported": list(HANDSHAKE_PROTOCOL_VERSIONS),
                                                   "requested": version}}}, status_code=400)(scope, receive, send)
            return
        sent = False

        async def replay() -> dict[str, Any]:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        if method != "initialize":
            await self.app(scope, replay, send)
            return
        ident = scope["user"].access_token.identity
        try:
            run = await self.endpoint.agent_tools.create_run(ident)
        except ToolError as e:
            await JSONResponse(e.body, status_code=e.status, headers=e.headers)(scope, receive, send)
            return
        session = run.run_id.encode()

        async def send_with_session(msg: dict[str, Any]) -> None:
            if msg["type"] == "http.response.start":
                msg = {**msg, "headers": [*msg.get("headers", []), (SESSION_HEADER.encode(), session)]}
            await send(msg)

        await self.app(scope, replay, send_with_session)
