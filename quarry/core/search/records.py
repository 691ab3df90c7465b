"""Typed records passed between the stages of one search (DESIGN §4, §6).

The composer (:func:`quarry.core.search.composer.compose`) and its two stage executors
(in-process, and Serve deployment handles: Retriever -> Reranker -> Retriever -> Resolver)
hand each other these same frozen records, so both run the same stages in the same order
and no stage reads a dict by key. They carry ids, ranks, scores, codes and small records, never arrays or masks.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict

from quarry.core.evidence.graph import EvidenceSet
from quarry.core.records import Candidate, Decision, Excerpt, Frozen, Principal, SearchRequest, StageReport


class _Carrying(Frozen):
    """A record that also carries an :class:`EvidenceSet` (a frozen dataclass of passages
    and their facts)."""

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)


class FirstStage(Frozen):
    """Filter -> lexical and dense legs (with floors) -> RRF, for one query."""

    tenant: str
    generation: int
    candidates: tuple[Candidate, ...]  # fused order, at most the candidate width
    stages: tuple[StageReport, ...]  # filter, lexical, dense, fuse
    lexical_rows: tuple[int, ...] = ()  # each leg's own ranking (tenant-wide rows): evaluation scores legs alone
    dense_rows: tuple[int, ...] = ()


class StageInfo(Frozen):
    """Which second stage serves a (tenant, generation), and the gate decision behind it."""

    kind: Literal["learned", "cross-encoder"] | None = None
    enabled: bool = False
    name: str | None = None
    reason: str | None = None
    model_id: str | None = None
    generation: int | None = None
    metrics: dict[str, Any] | None = None  # the gate's numbers, recorded in traces as they are
    gate: dict[str, Any] | None = None  # JSON-safe summary of the recorded gate decision
    unavailable: bool = False  # the Reranker could not be asked


class RankedCandidate(Frozen):
    passage_id: str
    rerank_score: float
    rerank_rank: int


class RerankRequest(Frozen):
    """What the Gateway sends the Reranker: the fused candidates (ids, rows, ranks); the
    Reranker reads their passages from the same index generation itself."""

    tenant: str
    generation: int
    query: str
    candidates: tuple[Candidate, ...]
    top_k: int


class RerankOutcome(Frozen):
    """A second stage's output: the kept top-k with scores, or why none ran."""

    status: Literal["applied", "skipped", "failed"]
    ranked: tuple[RankedCandidate, ...] = ()
    info: StageInfo = StageInfo()
    error: str | None = None  # exception class name when status is "failed"


class Survivors(Frozen):
    """The survivors of the second stage (or the fused top-k when none ran)."""

    candidates: tuple[Candidate, ...]  # every fused candidate, in fused order, rerank fields where ranked
    survivors: tuple[str, ...]  # passage ids, delivered order
    report: StageReport
    status: Literal["applied", "skipped", "failed"] = "skipped"


class Expansion(Frozen):
    excerpts: tuple[Excerpt, ...]  # verdict unset: resolution runs after expansion
    truncated: bool
    report: StageReport


class Retrieval(_Carrying):
    """A first stage, the expansion of its fused top-k and the evidence resolution needs
    (the delivered passages and their evidence-graph neighbours), from one Retriever call:
    what a search delivers when no second stage reorders the candidates (the composer asks
    for it when the tenant's generation serves none, saving the separate expansion hop)."""

    first: FirstStage
    expansion: Expansion
    evidence: EvidenceSet | None = None


class Delivery(_Carrying):
    """The expansion of a second stage's survivors and the evidence for resolving them."""

    expansion: Expansion
    evidence: EvidenceSet | None = None


class ExpandRequest(Frozen):
    principal: Principal
    request: SearchRequest
    generation: int
    passage_ids: tuple[str, ...]
    ranked: tuple[str, ...] = ()  # the first stage's candidate ids, fused order: the resolution pool is cut from them


class FollowUp(Frozen):
    """One contradiction-search query and what it added to the resolver's evidence. The
    query text is derived from passages, so traces record only its digest and the ids."""

    query: str
    found: tuple[str, ...]  # passage ids not already among the delivered ones
    generation: int


class Resolution(Frozen):
    decision: Decision
    follow_ups: tuple[FollowUp, ...] = ()
    report: StageReport


class ResolveRequest(_Carrying):
    """What the Resolver decides over: the question and the evidence the Retriever gathered."""

    principal: Principal
    request: SearchRequest
    evidence: EvidenceSet
