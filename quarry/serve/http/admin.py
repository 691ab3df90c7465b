"""The admin API, ``/v1/admin/...``: what a platform team needs to run Quarry without
editing files or running jobs by hand. Only a platform credential
(``auth.verify_platform_token``: its own key and audience) reaches it; a request without a
valid token gets 401, and a valid tenant token, operator scope or not, gets the same 404
every not-permitted request gets (the admin API does not admit it exists).

- ``GET  /v1/admin/tenants``: every tenant: live generation, generations on disk (complete
  or not, bytes), size, change lag against its change folder, second-stage state.
- ``POST /v1/admin/tenants/{tenant}/rollback``: ``CURRENT`` to another complete generation
  (``quarry.core.index.pointers.rollback``).
- ``POST .../compaction``, ``POST .../reconciliation``, ``DELETE /v1/admin/tenants/{tenant}``
  (purge): jobs started without blocking (``quarry.serve.admin_jobs``); ``GET
  /v1/admin/jobs/{job_id}`` reads their status.
- ``POST .../documents``, ``DELETE .../documents/{doc_id}``, ``POST .../acl``: change records
  appended to ``<index_root>/<changes_dir>/<tenant>/`` in the format ``quarry apply-changes``
  reads, so ingestion keeps one path.

The routes are plain functions on an ``APIRouter`` the Gateway includes; they read this
replica's settings through ``edge.current_settings()``. Bodies carry ids, numbers and
states, never document text.
"""

from __future__ import annotations

import datetime as dt
import uuid

from fastapi import APIRouter, Depends, Header, Path, Query, Request
from fastapi.responses import JSONResponse
from pydantic import TypeAdapter, ValidationError

from quarry.core.changes.log import Change, change_lines
from quarry.core.changes.status import change_lag
from quarry.core.index import layout
from quarry.core.index.manifest import read_manifest
from quarry.core.index.pointers import RollbackRefused, dir_size, generation_infos, rollback
from quarry.core.records import SourceDocument
from quarry.serve import admin_jobs
from quarry.serve.http import edge
from quarry.serve.http.agent_tools import ToolError, not_found
from quarry.serve.http.errors import error_details
from quarry.serve.http.auth import AuthError, bearer_token, verify_platform_token, verify_token
from quarry.serve.http.responses import (
    AclRequest,
    AdminChangeLag,
    AdminGeneration,
    AdminJob,
    AdminTenant,
    AdminTenants,
    ChangesAppended,
    ReconcileRequest,
    RolledBack,
    RollbackRequest,
)
from quarry.serve.settings import ServeSettings

MAX_DOCUMENTS = 1000  # per request; a larger batch belongs in a change file for apply-changes
TENANT = r"^[a-z0-9][a-z0-9_.-]{0,62}$"
DOC_ID = r"^[A-Za-z0-9][A-Za-z0-9_./:-]{0,200}$"
VERSION = r"^[A-Za-z0-9_.-]{1,100}$"


def _settings() -> ServeSettings:
    s = edge.current_settings()
    if s is None:  # a replica answers only after Gateway.__init__ configured it
        raise ToolError(503, {"detail": "not ready"})
    return s


def platform_only(authorization: str | None = Header(default=None)) -> ServeSettings:
    """The route's settings, for a platform credential only: 401 without a valid token,
    404 for a valid tenant token (even an operator's)."""
    s = _settings()
    try:
        token = bearer_token(authorization)
    except AuthError:
        raise ToolError(401, {"detail": "unauthorized"}, {"WWW-Authenticate": "Bearer"}) from None
    if verify_platform_token(token, s.auth):
        return s
    try:
        verify_token(token, s.auth)
    except AuthError:
        raise ToolError(401, {"detail": "unauthorized"}, {"WWW-Authenticate": "Bearer"}) from None
    raise not_found()


router = APIRouter(prefix="/v1/admin", tags=["admin"])
Platform = Depends(platform_only)


def _published(s: ServeSettings, tenant: str) -> int:
    gen = layout.current_generation(s.index_root, tenant)
    if gen is None:
        raise not_found()
    return gen


def _tenant_view(s: ServeSettings, tenant: str) -> AdminTenant:
    root = s.index_root
    live = layout.current_generation(root, tenant)
    second = None
    if live is not None:
        try:
            decision = read_manifest(root, tenant, live).second_stage
            second = decision.summary() if decision is not None else None
        except FileNotFoundError:
            pass
    lag = change_lag(root, tenant, live, layout.join(s.changes_root, tenant))
    return AdminTenant(tenant=tenant, live_generation=live,
                       generations=[AdminGeneration(**g.__dict__) for g in generation_infos(root, tenant)],
                       size_bytes=dir_size(layout.tenant_dir(root, tenant)),
                       change_lag=AdminChangeLag(**lag.to_json()), second_stage=second)


@router.get("/tenants")
def tenants(s: ServeSettings = Platform):
    """Every published tenant with its generations, sizes, change lag and second stage."""
    body = AdminTenants(tenants=[_tenant_view(s, t) for t in layout.list_tenants(s.index_root)])
    return JSONResponse(body.model_dump(mode="json"))


@router.post("/tenants/{tenant}/rollback")
def rollback_tenant(request: RollbackRequest, tenant: str = Path(pattern=TENANT), s: ServeSettings = Platform):
    """Make another complete generation live (409 when the target is the live one, missing,
    or was never completed)."""
    try:
        r = rollback(s.index_root, tenant, request.generation)
    except RollbackRefused as e:
        raise (not_found() if e.status == 404 else ToolError(e.status, {"detail": str(e)})) from None
    return JSONResponse(RolledBack(**r.__dict__).model_dump(mode="json"))


def _job(s: ServeSettings, kind: str, tenant: str, **kw) -> JSONResponse:
    job = admin_jobs.start_job(s.index_root, kind, tenant, admin_jobs.command(kind, s.index_root, tenant, **kw),
                               s.admin_job_timeout_s)
    return JSONResponse(AdminJob(**job).model_dump(mode="json"), status_code=202)


@router.post("/tenants/{tenant}/compaction", status_code=202)
def compaction(tenant: str = Path(pattern=TENANT), s: ServeSettings = Platform):
    """Start ``quarry compact`` for the tenant; returns the job (202)."""
    _published(s, tenant)
    return _job(s, "compaction", tenant)


@router.post("/tenants/{tenant}/reconciliation", status_code=202)
def reconciliation(request: ReconcileRequest | None = None, tenant: str = Path(pattern=TENANT),
                   s: ServeSettings = Platform):
    """Start ``quarry reconcile`` against the configured ``reconcile_source``; returns the job (202)."""
    _published(s, tenant)
    if s.reconcile_source is None:
        raise ToolError(409, {"detail": "no reconcile_source is configured for this server"})
    return _job(s, "reconciliation", tenant, source=s.reconcile_source,
                dry_run=bool(request and request.dry_run))


@router.get("/jobs/{job_id}")
def job_status(job_id: str = Path(pattern=admin_jobs.JOB_ID_PATTERN), s: ServeSettings = Platform):
    job = admin_jobs.read_job(s.index_root, job_id)
    if job is None:
        raise not_found()
    return JSONResponse(AdminJob(**job).model_dump(mode="json"))


async def _purge_runs(tenant: str, doc_id: str | None = None, version: str | None = None) -> None:
    """The run store holds runs' seen and fetched ids: the live store purges them itself
    (memory, then its checkpoint or Redis keys), before the storage job starts."""
    store = edge.current_run_store()
    if store is not None:
        await store.purge(tenant, doc_id, version)


@router.delete("/tenants/{tenant}", status_code=202)
async def purge(tenant: str = Path(pattern=TENANT), s: ServeSettings = Platform):
    """Start ``quarry purge --all`` for the tenant: every generation, delta, change and trace
    line of it, its runs, and every replica's copies (docs/operations.md "Purge"); returns the job (202)."""
    _published(s, tenant)
    await _purge_runs(tenant)
    return _job(s, "purge", tenant)


@router.post("/tenants/{tenant}/purge", status_code=202)
async def purge_document(tenant: str = Path(pattern=TENANT), doc_id: str = Query(pattern=DOC_ID),
                         version: str | None = Query(default=None, pattern=VERSION), s: ServeSettings = Platform):
    """Start ``quarry purge --doc-id`` (every version, or ``version``): the document's text is
    left in no generation, delta or log under the root, and its ids in no run; returns the job (202)."""
    _published(s, tenant)
    await _purge_runs(tenant, doc_id, version)
    return _job(s, "purge-document", tenant, doc_id=doc_id, version=version)


# --------------------------------------------------------------------------- changes


def _append(s: ServeSettings, tenant: str, changes: list[Change]) -> JSONResponse:
    """One new change file per request, written atomically (readers never see half)."""
    now = dt.datetime.now(dt.timezone.utc)
    name = f"{now:%Y%m%dT%H%M%S%fZ}-{uuid.uuid4().hex[:8]}.jsonl"
    layout.write_atomic(layout.join(s.changes_root, tenant, name), change_lines(changes))
    body = ChangesAppended(tenant=tenant, change_ids=[c.change_id for c in changes],
                           changes_file=f"{s.changes_dir}/{tenant}/{name}")
    return JSONResponse(body.model_dump(mode="json"))


def _invalid(loc: list, msg: str) -> ToolError:
    return ToolError(422, {"detail": [{"loc": loc, "type": "value_error", "msg": msg}]})


_DOCS = TypeAdapter(SourceDocument | list[SourceDocument])


@router.post("/tenants/{tenant}/documents")  # request schema: openapi.admin_operations
async def upsert_documents(http: Request, tenant: str = Path(pattern=TENANT), s: ServeSettings = Platform):
    """Append an upsert per document (one SourceDocument or a list) to the change log. An
    unknown tenant is 404 before the body is read (the not-found style of every route)."""
    _published(s, tenant)
    try:
        documents = _DOCS.validate_json(await http.body())
    except ValidationError as e:
        raise ToolError(422, {"detail": error_details(e.errors(include_url=False, include_input=False), ("body",))}) from None
    docs = documents if isinstance(documents, list) else [documents]
    if not docs:
        raise _invalid(["body"], "give at least one document")
    if len(docs) > MAX_DOCUMENTS:
        raise _invalid(["body"], f"at most {MAX_DOCUMENTS} documents per request")
    for i, d in enumerate(docs):
        if d.tenant != tenant:
            raise _invalid(["body", i, "tenant"] if isinstance(documents, list) else ["body", "tenant"],
                           "must equal the tenant in the path")
    at = dt.datetime.now(dt.timezone.utc)
    return _append(s, tenant, [Change(op="upsert", tenant=tenant, doc_id=d.doc_id, document=d, at=at) for d in docs])


@router.delete("/tenants/{tenant}/documents/{doc_id:path}")
def delete_document(tenant: str = Path(pattern=TENANT), doc_id: str = Path(pattern=DOC_ID),
                    version: str | None = Query(default=None, pattern=VERSION), s: ServeSettings = Platform):
    """Append a delete of one version of a document, or of every version without ``version``."""
    _published(s, tenant)
    return _append(s, tenant, [Change(op="delete", tenant=tenant, doc_id=doc_id, version=version,
                                      at=dt.datetime.now(dt.timezone.utc))])


@router.post("/tenants/{tenant}/acl")
def change_acl(request: AclRequest, tenant: str = Path(pattern=TENANT), s: ServeSettings = Platform):
    """Append an ACL change: the new group list of one version of a document, or of every version."""
    _published(s, tenant)
    try:
        change = Change(op="acl", tenant=tenant, doc_id=request.doc_id, version=request.version,
                        acl=tuple(request.acl), at=dt.datetime.now(dt.timezone.utc))
    except ValidationError as e:
        raise ToolError(422, {"detail": error_details(e.errors(), ("body",))}) from None
    return _append(s, tenant, [change])
