"""The REST response bodies as pydantic models: what the routes return and what the
OpenAPI document's response schemas are generated from (``openapi.py``). Field order and
omissions are the wire format's; extra fields may be added without breaking clients."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from quarry.core.agent.citations import Claim
from quarry.core.agent.fetch import FetchResult, SectionView
from quarry.core.records import Decision, Excerpt, StageReport

from quarry.serve.deployments.tenant_status import TenantStatus
from quarry.serve.wire import OmittingNone


class Detail(BaseModel):
    """An error: one sentence saying what to do (``{"detail": "not found"}`` for not found
    and not permitted alike)."""

    model_config = ConfigDict(frozen=True)
    detail: str


class LimitInfo(BaseModel):
    """Which limit refused a call (429): its scope and kind, the limit, its window (None for
    concurrency and open runs), when it resets (epoch seconds) and the ``Retry-After`` seconds."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    scope: Literal["tenant", "subject"]
    kind: Literal["rate", "concurrency", "open_runs"]
    limit: int
    window_s: int | None
    reset_at: float
    retry_after_s: int


class Limited(BaseModel):
    """A call refused by a tenant limit or an open-run quota (429, with ``Retry-After``)."""

    model_config = ConfigDict(frozen=True)
    detail: str
    limit: LimitInfo


class FieldError(BaseModel):
    """Where and why a request did not validate; never the input."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    loc: list[str | int]
    type: str
    msg: str


class ValidationErrors(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    detail: list[FieldError]


class RunCreated(OmittingNone):
    run_id: str
    budget: int
    searches_left: int


class SearchResponse(OmittingNone):
    """The agent-facing body of a search: excerpts (each with its verdict), the decision
    record next to them (the same record ``quarry search --json`` prints), stages and
    counts. The trace-only parts (candidates) stay out."""

    run_id: str
    excerpts: tuple[Excerpt, ...]
    decision: Decision | None
    stages: tuple[StageReport, ...]
    generation: int
    delivered_tokens: int
    truncated: bool
    message: str
    new_passage_ids: tuple[str, ...]
    searches_left: int
    trace_id: str


class FetchResponse(OmittingNone):
    """A passage, section or document: ``passages`` or ``section``, never both; the
    fetched passages' decision when they were resolved."""

    omit_when_none: ClassVar[tuple[str, ...]] = ("section", "passages", "decision")

    kind: Literal["passage", "section", "document"]
    generation: int
    section: SectionView | None = None
    passages: tuple[Excerpt, ...] | None = None
    decision: Decision | None = None

    @classmethod
    def of(cls, res: FetchResult) -> "FetchResponse":
        return cls(kind=res.kind, generation=res.generation, section=res.section,
                   passages=res.passages if res.section is None else None, decision=res.decision)


class Answered(OmittingNone):
    status: Literal["answered"] = "answered"
    claims: tuple[Claim, ...]
    trace_id: str


class Abstained(OmittingNone):
    """The run ended without an answer; the reason code is only in the trace."""

    status: Literal["abstained"] = "abstained"
    message: str
    searches_left: int = 0
    trace_id: str


class TenantHealth(TenantStatus):
    """A tenant in ``/healthz``: the Retriever's status plus the second stage composed for
    its generation (None when this replica has not loaded it)."""

    second_stage: dict[str, Any] | None


class Health(OmittingNone):
    """Liveness; ``tenants`` only for operator and platform credentials."""

    omit_when_none: ClassVar[tuple[str, ...]] = ("tenants",)

    status: Literal["ok"] = "ok"
    tenants: dict[str, TenantHealth] | None = None


class ToolDefinitions(BaseModel):
    """The three tools for OpenAI function calling and Anthropic tool use."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    openai: list[dict[str, Any]]
    anthropic: list[dict[str, Any]]


class TraceView(BaseModel):
    """A stored trace as written, filtered by the operator's groups; its envelope is
    typed, the rest is the trace's own record (``quarry/serve/stores/tracestore.py``)."""

    model_config = ConfigDict(frozen=True, extra="allow")
    trace_id: str
    kind: str
    tenant: str = Field(description="always the operator's own tenant")


# --------------------------------------------------------------------------- admin API
# Bodies of /v1/admin/... (platform credential only). Ids, numbers and states; never
# document text.


class AdminGeneration(BaseModel):
    generation: int
    complete: bool = Field(description="a manifest was written: the generation can be served or rolled back to")
    size_bytes: int


class AdminChangeLag(BaseModel):
    watermark: str | None = Field(description='"delta-<m> gen-<n>": the last applied change batch, or none')
    delta_applies: bool = Field(description="the watermark's base is the live generation (its delta is served)")
    changes_applied: int
    lag: dict[str, Any] = Field(description="p50/p95/max seconds from source change to visible")
    unapplied: int | None = Field(description="records in the tenant's change folder not applied yet")
    oldest_unapplied_age_s: float | None
    invalid_changes: int | None = Field(description="records in the change folder that would be quarantined")


class AdminTenant(BaseModel):
    tenant: str
    live_generation: int | None
    generations: list[AdminGeneration]
    size_bytes: int = Field(description="everything under the tenant's folder")
    change_lag: AdminChangeLag
    second_stage: dict[str, Any] | None = Field(description="the live manifest's second-stage decision (summary)")


class AdminTenants(BaseModel):
    tenants: list[AdminTenant]


class RollbackRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    generation: int = Field(ge=1, le=2**31 - 1)


class RolledBack(BaseModel):
    tenant: str
    generation: int
    previous: int
    retired_delta: str | None = Field(description="the change watermark that no longer applies (changes applied "
                                                  "over the previous generation are not served)")
    restored_delta: int | None = Field(default=None, description="the delta the target generation was served "
                                                                 "with, live again over it")


class ReconcileRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    dry_run: bool = False


class AclRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    doc_id: str = Field(min_length=1, max_length=200)
    version: str | None = Field(default=None, min_length=1, max_length=100)
    acl: list[str] = Field(min_length=1, max_length=256)


JobKind = Literal["compaction", "reconciliation", "purge", "purge-document"]
JobState = Literal["running", "succeeded", "failed", "lost"]


class AdminJob(BaseModel):
    """An admin job: started without blocking the request; its status is kept under the
    index root, so any Gateway replica answers for it."""

    job_id: str
    kind: JobKind
    tenant: str
    status: JobState
    started_at: str
    finished_at: str | None = None
    outcome: dict[str, Any] | None = Field(default=None, description="the job's JSON outcome when it succeeded")
    error: str | None = Field(default=None, description="the job's last error line when it failed, or why it is lost")
    owner: str | None = Field(default=None, description="host:pid of the Gateway replica that runs the job")
    pid: int | None = Field(default=None, description="the job's child process on the owner's host")
    heartbeat_at: float | None = Field(default=None, description="epoch seconds of the owner's last heartbeat")
    lost_at: str | None = Field(default=None, description="when a job whose owner stopped heartbeating was "
                                                         "declared lost (status 'lost')")


class ChangesAppended(BaseModel):
    tenant: str
    change_ids: list[str]
    changes_file: str = Field(description="the change file written, relative to the index root")
