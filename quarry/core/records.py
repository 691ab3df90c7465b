"""Typed records at Quarry's boundaries: source documents, passages (the evidence
envelope of DESIGN §2), principals, search requests and results.

Pydantic validates where data enters (source records, HTTP, config). Every record
is frozen: stages build new records, they never mutate one in place.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

# Authority ranks: higher governs. Configurable per deployment; this is the default
# table of DESIGN §2 (policy > contract > deployment record > runbook > ... > comment).
DEFAULT_AUTHORITY: dict[str, int] = {
    "policy": 100,
    "contract": 90,
    "deployment": 80,
    "postmortem": 70,
    "runbook": 60,
    "pricing": 55,
    "help": 50,
    "page": 40,
    "ticket": 30,
    "comment": 20,
    "unknown": 0,
}

PUBLIC_GROUP = "*"  # an ACL entry meaning "every principal of the tenant"

# Tenants and doc types: the one slug rule every layer checks (records, change logs, the
# build's accounting, tokens, trace stores).
SLUG = re.compile(r"[a-z0-9][a-z0-9_.-]{0,62}")
SLUG_RULE = "[a-z0-9][a-z0-9_.-]*"
_DOC_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_./:-]{0,200}$")  # never '@' or '#': they delimit passage ids
_VERSION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,40}$")


def is_slug(value: object) -> bool:
    return isinstance(value, str) and SLUG.fullmatch(value) is not None


def check_slug(value: str) -> str:
    """``value`` if it is a lowercase slug (a pydantic field validator's body)."""
    if not is_slug(value):
        raise ValueError(f"must be a lowercase slug: {SLUG_RULE}")
    return value


def check_acl(groups: tuple[str, ...]) -> tuple[str, ...]:
    """A validated ACL: at least one group, none blank or padded; sorted, without duplicates."""
    if not groups or any(not g or g != g.strip() for g in groups):
        raise ValueError("acl must be a non-empty list of group names without surrounding spaces")
    return tuple(sorted(set(groups)))


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Event(Frozen):
    """What a record proves happened, e.g. ("acme cutover completed", 2026-01-15)."""

    what: str = Field(min_length=3, max_length=300)
    on: dt.date


class SourceDocument(Frozen):
    """A source record as it enters the build. Invalid input raises a field-level
    ``pydantic.ValidationError``; the build job quarantines such records."""

    doc_id: str
    version: str = "1"
    tenant: str
    title: str = Field(default="", max_length=500)
    text: str = Field(min_length=1)
    format: Literal["markdown", "text", "python"] = "markdown"
    acl: tuple[str, ...] = Field(min_length=1, description="groups allowed to read; '*' = whole tenant")
    entities: tuple[str, ...] = ()
    doc_type: str = "page"
    authority: str | None = None  # defaults to doc_type's entry in the authority table
    source_url: str | None = None
    published_at: dt.date | None = None
    ingested_at: dt.date | None = None
    effective_from: dt.date | None = None
    effective_to: dt.date | None = None  # inclusive: the last day in force
    supersedes: tuple[str, ...] = ()
    superseded_by: tuple[str, ...] = ()
    # documents this one says it replaces, named by title in its text ("the fee schedule issued
    # in April 2025"): matched against the tenant's titles when a generation is resolved
    supersedes_titles: tuple[str, ...] = ()
    condition: str | None = None
    events: tuple[Event, ...] = ()
    # Envelope fields the build's enricher (core.enrich) filled from the text, not the source.
    extracted: tuple[str, ...] = ()

    @field_validator("doc_id")
    @classmethod
    def _doc_id(cls, v: str) -> str:
        if not _DOC_ID.match(v):
            raise ValueError("doc_id must be 1-200 chars of letters, digits and _ . / : - (no '@' or '#')")
        return v

    @field_validator("version")
    @classmethod
    def _version(cls, v: str) -> str:
        if not _VERSION.match(v):
            raise ValueError("version must be letters, digits and _ . - (e.g. '3' or 'v2.1')")
        return v

    @field_validator("tenant", "doc_type")
    @classmethod
    def _slug(cls, v: str) -> str:
        return check_slug(v)

    @field_validator("acl")
    @classmethod
    def _acl(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        return check_acl(v)

    @field_validator("text")
    @classmethod
    def _text(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("text is blank")
        return v

    @model_validator(mode="after")
    def _dates(self) -> "SourceDocument":
        if self.effective_from and self.effective_to and self.effective_to < self.effective_from:
            raise ValueError("effective_to is before effective_from")
        return self

    @property
    def key(self) -> str:
        return f"{self.doc_id}@{self.version}"


def validation_reason(err: ValidationError) -> str:
    """A compact, field-level reason for quarantine output: 'field: message; ...'."""
    parts = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"]) or "record"
        parts.append(f"{loc}: {e['msg']}")
    return "; ".join(parts)


class Envelope(Frozen):
    """The evidence envelope every passage and parent section carries."""

    doc_id: str
    version: str
    tenant: str
    title: str = ""
    acl: tuple[str, ...]
    entities: tuple[str, ...] = ()
    doc_type: str = "page"
    authority: str = "unknown"
    authority_rank: int = 0
    source_url: str | None = None
    published_at: dt.date | None = None
    ingested_at: dt.date | None = None
    effective_from: dt.date | None = None
    effective_to: dt.date | None = None
    supersedes: tuple[str, ...] = ()
    superseded_by: tuple[str, ...] = ()
    supersedes_titles: tuple[str, ...] = ()  # other documents named by title as replaced (SourceDocument)
    condition: str | None = None
    events: tuple[Event, ...] = ()
    extracted: tuple[str, ...] = ()  # fields filled by the enricher from the text (core.enrich)


class ParentSection(Frozen):
    """The section a passage expands to (DESIGN §4 step 6)."""

    parent_id: str  # "{doc_id}@{version}#{section-anchor}"
    anchor: str
    heading_path: tuple[str, ...] = ()
    text: str
    token_count: int
    envelope: Envelope


class Passage(Frozen):
    """One retrievable chunk with its evidence envelope.

    ``text`` is the source evidence; ``context`` is a derived preamble, indexed but
    never cited as evidence.
    """

    passage_id: str  # "{doc_id}@{version}#{anchor}"
    anchor: str
    heading_path: tuple[str, ...] = ()
    parent_id: str
    text: str
    context: str = ""
    chunker_version: str
    token_count: int
    trust: Literal["untrusted"] = "untrusted"
    envelope: Envelope

    # Flat accessors for the envelope fields most stages read.
    @property
    def doc_id(self) -> str:
        return self.envelope.doc_id

    @property
    def tenant(self) -> str:
        return self.envelope.tenant


class Principal(Frozen):
    """Who is searching. Built only from a verified credential, never from tool input."""

    tenant: str
    subject: str
    groups: frozenset[str] = frozenset()

    def can_read(self, tenant: str, acl: tuple[str, ...]) -> bool:
        return tenant == self.tenant and (PUBLIC_GROUP in acl or not self.groups.isdisjoint(acl))


TOP_K_DEFAULT = 4  # excerpts a search returns unless asked for more (DESIGN §4 step 5)
TOP_K_CEILING = 10  # the server's ceiling on top_k unless configured (serve's top_k_ceiling)
TOP_K_MAX = 50  # the most any request may ask for, and the highest ceiling a server may set


class SearchRequest(BaseModel):
    """The agent-facing search tool input. It never carries tenant, user or groups."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    query: str = Field(min_length=1, max_length=2000, description="What to look for, in words or exact identifiers.")
    top_k: int = Field(default=TOP_K_DEFAULT, ge=1, le=TOP_K_MAX, description="How many cited excerpts to return.")
    doc_type: tuple[str, ...] | None = Field(default=None, description="Only these document types, e.g. ['policy'].")
    valid_at: dt.date | None = Field(default=None, description="Only evidence in force on this date (YYYY-MM-DD).")

    @field_validator("query")
    @classmethod
    def _query(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("query is blank")
        return v


class Candidate(Frozen):
    """One candidate through the stages; ranks are 1-based, None = absent from that leg."""

    passage_id: str
    doc_id: str
    row: int  # tenant-wide row id: (shard, local row) packed by the index
    lexical_rank: int | None = None
    lexical_score: float | None = None
    dense_rank: int | None = None
    dense_score: float | None = None
    fused_rank: int
    fused_score: float
    exact_match: bool = False  # holds every identifier of the query verbatim (pinned ahead)
    rerank_score: float | None = None
    rerank_rank: int | None = None


class StageReport(Frozen):
    name: str
    kept: int
    dropped: int = 0
    note: str = ""


class Excerpt(Frozen):
    """A cited excerpt as delivered to the agent."""

    passage_id: str
    doc_id: str
    version: str
    anchor: str
    heading_path: tuple[str, ...]
    title: str
    doc_type: str
    text: str
    parent_id: str | None = None  # the section fetch expands this passage to
    expanded_to: str | None = None  # parent_id when the excerpt is the parent section
    truncated: bool = False
    effective_from: dt.date | None = None
    effective_to: dt.date | None = None
    validity: Literal["in_force", "unknown"] | None = None  # set when the request had valid_at
    authority: str
    authority_rank: int
    entities: tuple[str, ...] = ()
    supersedes: tuple[str, ...] = ()
    superseded_by: tuple[str, ...] = ()
    condition: str | None = None
    events: tuple[Event, ...] = ()
    source_url: str | None = None
    token_count: int
    trust: Literal["untrusted"] = "untrusted"
    verdict: Literal["governing", "supporting", "rejected", "unresolved", "related"] | None = None  # the decision record's


# -- evidence resolution (DESIGN §4 step 7): the decision record ---------------------

RejectReason = Literal["superseded_by", "not_yet_effective", "no_longer_effective", "condition_ended",
                       "subordinate_to", "untrusted_instruction"]
# governing: answers the question; supporting: proves an event or a link the decision rests
# on; rejected / unresolved: as their records say; related: delivered, neither governs nor
# conflicts (an excerpt, never selected).
Verdict = Literal["governing", "supporting", "rejected", "unresolved", "related"]
SELECTED_VERDICTS: frozenset[str] = frozenset({"governing", "supporting"})


class SelectedEvidence(Frozen):
    """A governing or supporting passage and why (ids, dates and codes only)."""

    passage_id: str
    reason: str
    # "in_force" when effective dates place valid_at inside them; "unknown" when the passage
    # carries none (reported, never assumed current).
    validity: Literal["in_force", "unknown"] | None = None


class RejectedEvidence(Frozen):
    passage_id: str
    reason: RejectReason
    by: str | None = None  # the passage id that defeats it, where there is one
    detail: str = ""  # one line a person can read, built from ids, dates and codes


class UnresolvedConflict(Frozen):
    passage_ids: tuple[str, ...]  # both (all) sides
    reason: str


class RelatedEvidence(Frozen):
    """A delivered passage outside the question's evidence: neither governs nor conflicts.
    ``outdated`` is set when the rules would reject it (superseded, expired, ...): it is
    then never citable, like a rejected passage."""

    passage_id: str
    outdated: RejectReason | None = None
    detail: str = ""


class Decision(Frozen):
    """Which evidence governs at ``valid_at`` and why the rest was rejected. Deterministic:
    it never depends on relevance scores or on the order passages arrive in."""

    valid_at: dt.date
    governing: tuple[SelectedEvidence, ...] = ()
    supporting: tuple[SelectedEvidence, ...] = ()
    rejected: tuple[RejectedEvidence, ...] = ()
    unresolved: tuple[UnresolvedConflict, ...] = ()
    related: tuple[RelatedEvidence, ...] = ()

    @property
    def selected(self) -> tuple[SelectedEvidence, ...]:
        """Governing then supporting: every passage the decision rests on."""
        return self.governing + self.supporting

    def verdict(self, passage_id: str) -> Verdict | None:
        if any(r.passage_id == passage_id for r in self.rejected):
            return "rejected"
        if any(passage_id in u.passage_ids for u in self.unresolved):
            return "unresolved"
        if any(s.passage_id == passage_id for s in self.governing):
            return "governing"
        if any(s.passage_id == passage_id for s in self.supporting):
            return "supporting"
        if any(r.passage_id == passage_id for r in self.related):
            return "related"
        return None

    @property
    def rejected_ids(self) -> frozenset[str]:
        """Passages never to be cited: rejected, or related but outdated."""
        return frozenset(r.passage_id for r in self.rejected) | frozenset(
            r.passage_id for r in self.related if r.outdated is not None)


class SearchResult(Frozen):
    excerpts: tuple[Excerpt, ...]
    candidates: tuple[Candidate, ...]  # for the trace: ids and ranks, never text
    stages: tuple[StageReport, ...]
    generation: int
    delivered_tokens: int
    truncated: bool
    message: str = ""  # set when nothing was found: what was tried, what to change
    decision: Decision | None = None  # evidence resolution over the delivered excerpts
