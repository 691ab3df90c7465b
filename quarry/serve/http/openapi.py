"""The OpenAPI document, made to say exactly what the gateway accepts and returns.

FastAPI's generated spec documents only 200 and 422, takes request schemas from pydantic's
lax models (``top_k ≤ 50`` where the server allows 10; a ``$defs`` ref on ``/v1/answer``
that does not resolve) and lists ``Authorization`` as an optional header. Here the spec is
regenerated from the routes and then corrected:

- request bodies are the tool schemas agents get from ``/v1/tools`` (refs inlined, this
  server's ceilings), and ``/v1/answer`` states "claims XOR abstention" as a ``oneOf``;
- authentication is a bearer security scheme, not a header parameter;
- every status an operation can return is listed with its body schema, including those
  produced before routing (400, 413, 415, 431 from ``limits``) and 429 (tenant limits, run quotas);
- every response body's schema is generated from its model in ``responses.py`` (inlined,
  so each schema stands alone); extra fields are allowed so new response fields do not
  break clients.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel

from quarry.serve.http.responses import (
    Abstained,
    AdminJob,
    AdminTenants,
    Answered,
    ChangesAppended,
    Detail,
    FetchResponse,
    Health,
    Limited,
    RolledBack,
    RunCreated,
    SearchResponse,
    ToolDefinitions,
    TraceView,
    ValidationErrors,
)
from quarry.serve.http.tools import tool_definitions
from quarry.serve.settings import ServeSettings


def _inline(node: Any, defs: dict[str, Any]) -> Any:
    """``node`` with every ``#/$defs/...`` reference replaced by its definition, and
    ``additionalProperties: false`` dropped (clients must accept new fields)."""
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            return _inline(defs[ref.rsplit("/", 1)[-1]], defs)
        return {k: _inline(v, defs) for k, v in node.items()
                if not (k == "additionalProperties" and v is False)}
    if isinstance(node, list):
        return [_inline(v, defs) for v in node]
    return node


def schema_of(model: type[BaseModel]) -> dict[str, Any]:
    """A response model's JSON schema as serialised (``mode="serialization"``), standing alone."""
    schema = model.model_json_schema(mode="serialization")
    return _inline(schema, schema.pop("$defs", {}))

_WHY = {
    "400": "Malformed request: invalid JSON, JSON nested too deeply, or a malformed Content-Length.",
    "401": "Missing, expired or invalid bearer token (one body for every cause).",
    "404": "Not found, or not permitted: the two are indistinguishable.",
    "405": "Method not allowed on this path.",
    "413": "Request body above the server's limit.",
    "415": "Request body is not JSON.",
    "422": "The body does not match the schema; the error names where and why, never the input.",
    "429": "A tenant limit (requests per window, calls in flight) or, creating a run, the open-run quota of "
           "this tenant or subject; the body names the limit, Retry-After says when to retry.",
    "431": "Request headers above the server's limit.",
    "501": "Not available in this installation.",
}
_EDGE = ("400", "405", "413", "415", "431")  # answered by limits/routing before the handler


def _resp(schema: dict[str, Any], why: str) -> dict[str, Any]:
    return {"description": why, "content": {"application/json": {"schema": schema}}}


def _errors(*codes: str) -> dict[str, Any]:
    models = {"422": ValidationErrors, "429": Limited}
    return {c: _resp(schema_of(models.get(c, Detail)), _WHY[c]) for c in (*_EDGE, *codes)}


def _body(schema: dict[str, Any]) -> dict[str, Any]:
    return {"required": True, "content": {"application/json": {"schema": schema}}}


def answer_schema(tool_schema: dict[str, Any]) -> dict[str, Any]:
    """The submit_answer tool schema plus "exactly one of claims or abstention". Function-
    calling APIs refuse a top-level oneOf, so only the spec carries it; the tool says it in
    words and the server enforces it."""
    s = copy.deepcopy(tool_schema)
    s["oneOf"] = [{"required": ["claims"], "not": {"required": ["abstention"]}},
                  {"required": ["abstention"], "not": {"required": ["claims"]}}]
    return s


def operations(top_k_ceiling: int | None, candidates_ceiling: int | None) -> dict[tuple[str, str], dict[str, Any]]:
    """Per (path, method): requestBody, responses and security, the corrections applied."""
    tools = {t["name"]: t["input_schema"] for t in tool_definitions(top_k_ceiling, candidates_ceiling)["anthropic"]}
    bearer = [{"bearer": []}]
    return {
        **admin_operations(),
        ("/healthz", "get"): {"security": [{}, {"bearer": []}],
                              "responses": {"200": _resp(schema_of(Health), "Liveness; details only for operators."),
                                            **_errors()}},
        ("/v1/tools", "get"): {"responses": {"200": _resp(schema_of(ToolDefinitions), "Tool definitions."), **_errors()}},
        ("/v1/runs", "post"): {"security": bearer,
                               "responses": {"200": _resp(schema_of(RunCreated), "A new run."), **_errors("401", "429")}},
        ("/v1/search", "post"): {"security": bearer, "requestBody": _body(tools["search"]), "responses": {
            "200": _resp(schema_of(SearchResponse), "Cited excerpts."),
            "409": _resp(schema_of(Abstained), "The run's search budget is spent; the run ends as an abstention."),
            **_errors("401", "404", "422", "429")}},
        ("/v1/fetch", "post"): {"security": bearer, "requestBody": _body(tools["fetch"]), "responses": {
            "200": _resp(schema_of(FetchResponse), "The passage, section or document."),
            **_errors("401", "404", "422", "429")}},
        ("/v1/answer", "post"): {"security": bearer, "requestBody": _body(answer_schema(tools["submit_answer"])),
                                 "responses": {
            "200": _resp({"oneOf": [schema_of(Answered), schema_of(Abstained)]}, "Answered with checked claims, or abstained."),
            "409": _resp(schema_of(Detail), "This run has already finished."),
            **_errors("401", "404", "422", "429")}},
        ("/v1/trace/{trace_id}", "get"): {"security": bearer, "responses": {
            "200": _resp(schema_of(TraceView), "The trace, filtered by the operator's groups."), **_errors("401", "404")}},
    }


def _documents_schema() -> dict[str, Any]:
    """POST .../documents: one SourceDocument or a list of them (the handler validates)."""
    from quarry.core.records import SourceDocument

    raw = SourceDocument.model_json_schema()
    doc = _inline(raw, raw.pop("$defs", {}))
    return {"anyOf": [doc, {"type": "array", "items": doc}]}


def admin_operations() -> dict[tuple[str, str], dict[str, Any]]:
    """The admin API (``admin.py``): platform credential only; a tenant token gets 404."""
    bearer = [{"bearer": []}]
    t = "/v1/admin/tenants/{tenant}"
    job = _resp(schema_of(AdminJob), "The job, started (it runs in the background).")
    appended = _resp(schema_of(ChangesAppended), "The change records appended to the tenant's change folder.")
    return {
        ("/v1/admin/tenants", "get"): {"security": bearer, "responses": {
            "200": _resp(schema_of(AdminTenants), "Every published tenant."), **_errors("401", "404")}},
        (f"{t}/rollback", "post"): {"security": bearer, "responses": {
            "200": _resp(schema_of(RolledBack), "CURRENT now names the requested generation."),
            "409": _resp(schema_of(Detail), "The generation is the live one, missing, or was never completed."),
            **_errors("401", "404", "422")}},
        (f"{t}/compaction", "post"): {"security": bearer, "responses": {"202": job, **_errors("401", "404", "422")}},
        (f"{t}/reconciliation", "post"): {"security": bearer, "responses": {
            "202": job, "409": _resp(schema_of(Detail), "No reconcile source is configured."),
            **_errors("401", "404", "422")}},
        ("/v1/admin/jobs/{job_id}", "get"): {"security": bearer, "responses": {
            "200": _resp(schema_of(AdminJob), "The job's status and, once finished, its outcome."),
            **_errors("401", "404", "422")}},
        (t, "delete"): {"security": bearer, "responses": {"202": job, **_errors("401", "404", "422")}},
        (f"{t}/purge", "post"): {"security": bearer, "responses": {"202": job, **_errors("401", "404", "422")}},
        (f"{t}/documents", "post"): {"security": bearer, "requestBody": _body(_documents_schema()),
                                     "responses": {"200": appended, **_errors("401", "404", "422")}},
        (f"{t}/documents/{{doc_id}}", "delete"): {"security": bearer, "responses": {
            "200": appended, **_errors("401", "404", "422")}},
        (f"{t}/acl", "post"): {"security": bearer, "responses": {"200": appended, **_errors("401", "404", "422")}},
    }


def build_spec(api: FastAPI, settings: ServeSettings | None) -> dict[str, Any]:
    spec = get_openapi(title=api.title, version=api.version, description=api.description, routes=api.routes)
    top_k = settings.top_k_ceiling if settings else None
    cands = settings.candidate_width_ceiling if settings else None
    for (path, method), fix in operations(top_k, cands).items():
        op = spec.get("paths", {}).get(path, {}).get(method)
        if op is None:
            continue
        # The principal comes from the bearer scheme, not from a documented header.
        op["parameters"] = [p for p in op.get("parameters", []) if p.get("name", "").lower() != "authorization"]
        if not op["parameters"]:
            op.pop("parameters")
        op.update(copy.deepcopy(fix))
    spec.setdefault("components", {})["securitySchemes"] = {
        "bearer": {"type": "http", "scheme": "bearer", "bearerFormat": "JWT"}}
    _drop_unreferenced(spec)
    return spec


def _refs(node: Any) -> set[str]:
    if isinstance(node, dict):
        own = {node["$ref"].rsplit("/", 1)[-1]} if isinstance(node.get("$ref"), str) else set()
        return own.union(*(_refs(v) for v in node.values()))
    if isinstance(node, list):
        return set().union(*(_refs(v) for v in node))
    return set()


def _drop_unreferenced(spec: dict[str, Any]) -> None:
    """Keep only component schemas still referenced (routes others add may use them)."""
    schemas = spec.get("components", {}).get("schemas")
    if not schemas:
        return
    keep, todo = set(), _refs(spec.get("paths", {}))
    while todo:
        name = todo.pop()
        if name in schemas and name not in keep:
            keep.add(name)
            todo |= _refs(schemas[name])
    spec["components"]["schemas"] = {k: v for k, v in schemas.items() if k in keep}
    if not spec["components"]["schemas"]:
        del spec["components"]["schemas"]


def install_openapi(api: FastAPI, get_settings: Callable[[], ServeSettings | None]) -> None:
    def openapi() -> dict[str, Any]:
        if api.openapi_schema is None:
            api.openapi_schema = build_spec(api, get_settings())
        return api.openapi_schema

    api.openapi = openapi  # type: ignore[method-assign]
