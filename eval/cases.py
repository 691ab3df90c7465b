"""Evidence cases (seed 000 §11.12): the case model, the YAML loader and the runner.

A case is the evaluation unit of an agentic retrieval system: a task (one or more queries
run in order, evidence accumulating as in one agent run), a tenant and the principal's
groups, the evaluation date ``valid_at``, the *minimum evidence set* needed to answer, the
evidence that must be rejected or qualified (with reason codes), whether the corpus holds
an answer at all, and the expected resolution (which ids are selected).

The runner sends each query through the real search path (principal mask, both legs, RRF,
the tenant's gate-promoted second stage, expansion, evidence resolution) and scores the
case at each boundary, at document granularity (a document id matches any of its
passages; an id with ``#`` names one passage):

1. ``candidates``: every minimum-evidence id is among the fused candidates (recall at
   candidate width) of some query of the case;
2. ``second_stage``: ... and among the passages the second stage kept (the fused top_k
   when no second stage is enabled);
3. ``delivered``: ... and among the excerpts delivered in the final k;
4. ``resolution``: the decision record makes every ``governing`` id governing, every
   expected-selected id governing or supporting, rejects every must-reject id with an
   allowed reason code (and by the named id), leaves every ``unresolved`` id unresolved
   and every ``not_selected`` id rejected, unresolved or related-but-outdated (a plain
   ``related`` passage is neither selected nor rejected). A must-reject id that was never
   delivered fails (the record cannot show it was seen) unless the case marks it
   ``must_be_seen: false``.

With more than one query, or when the search ran without ``valid_at``, the decision is
``resolve()`` over everything the case's searches delivered, as of the case's date (the
evidence an agent's run has seen), with the case's queries as ``query``; otherwise it is
the search path's own decision. ``resolve_evidence`` is the one place that calls it.

Sweeps: a suite runs each case at every final width asked for (or its own ``top_k``) and
as every principal (its ``groups``, then each ``also_groups``); each (case, width,
principal) is one outcome, ``case@k{width}/{groups}``. A case is ``split: dev`` (what the
resolver was tuned on) or ``test`` (held out); summaries are per split, never blended.

Unanswerable cases are scored apart, never blended into accuracy. Each names its
``decisive_terms``: the words any answer would have to rest on (e.g. ``CAD`` and
``cutoff``). The deterministic sufficiency rule is: an *honest abstention* is a run whose
decision selects (as governing or supporting) no passage holding every decisive term (an
empty result, or one where such passages were only rejected, unresolved or related, is
honest); otherwise the selected evidence would let an agent assert an answer, and the case
counts as a *false assertion*.

The tenant-isolation gate is checked on every query of every run of every case (the runs
made only for counterfactuals included): a candidate, excerpt or
decision id that is not a passage of the principal's tenant readable by its groups, or a
document the case lists as another tenant's (``foreign``), is a leak; one leak fails the
whole run, whatever the accuracy.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from quarry.core.records import (
    TOP_K_CEILING,
    TOP_K_DEFAULT,
    Decision,
    Passage,
    Principal,
    RejectReason,
    SearchRequest,
    SearchResult,
    Verdict,
    SELECTED_VERDICTS,
    validation_reason,
)

Split = Literal["dev", "test"]
SPLITS: tuple[Split, ...] = ("dev", "test")

CaseKind = Literal[
    "lexical-decoy",  # repeats the exact identifier but concerns another event
    "semantic-decoy",  # the same topic for another tenant (must never surface: isolation)
    "superseded-source",  # states an answer that used to be correct
    "conditional-exception",  # correct only before an event
    "unanswerable",  # abundant neighbouring evidence, no decisive fact
    "multi-hop",  # the answer needs several documents, found by several queries
    "authority-conflict",  # two sources give different values; authority decides
    "identifier",  # an exact identifier lookup
    "paraphrase",  # the source uses other words than the query
    "acl",  # a group-restricted document
    "lookup",  # a plain fact in one document
]

BOUNDARIES: tuple[tuple[str, str, str], ...] = (
    ("candidates", "Minimum evidence enters candidate set", "query, source routing or first-stage recall"),
    ("second_stage", "Minimum evidence survives the second stage",
     "reranker discarded necessary evidence (without one: the fused top_k cut it)"),
    ("delivered", "Minimum evidence delivered in the final k", "expansion or the delivered-token ceiling cut it"),
    ("resolution", "Resolution correct", "evidence precedence: the wrong source governs"),
)


class CaseError(ValueError):
    """An invalid case file: the message is one line naming the file, the case and the field."""


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class MustReject(_Frozen):
    """Evidence the resolution must reject, with the allowed reason codes."""

    id: str = Field(min_length=1, description="doc id, or passage id with '#'")
    reason: tuple[RejectReason, ...] = Field(min_length=1, description="allowed reason codes")
    by: str | None = Field(default=None, description="doc or passage id that must defeat it")
    must_be_seen: bool = Field(True, description="False: passing when the run never delivered it")

    @field_validator("reason", mode="before")
    @classmethod
    def _one_or_many(cls, v):
        return (v,) if isinstance(v, str) else v


class EvidenceCase(_Frozen):
    id: str = Field(pattern=r"^[a-z0-9][a-z0-9_.-]{0,80}$")
    kinds: tuple[CaseKind, ...] = Field(min_length=1)
    task: str = Field(min_length=3, description="the user's task, in words")
    queries: tuple[str, ...] = Field(min_length=1, description="searches run in order; evidence accumulates")
    tenant: str = Field(min_length=1)
    groups: tuple[str, ...] = ()
    valid_at: dt.date = Field(description="evaluation date: the resolver decides as of this day")
    filter_valid_at: bool = Field(True, description="also pass valid_at to search (the agent's filter)")
    doc_type: tuple[str, ...] | None = None
    top_k: int = Field(TOP_K_DEFAULT, ge=1, le=TOP_K_CEILING, description="at most a default server's ceiling")
    answerable: bool
    minimum_evidence: tuple[str, ...] = ()
    selected: tuple[str, ...] | None = Field(
        None, description="ids the decision must select, as governing or supporting (default: minimum_evidence)")
    governing: tuple[str, ...] | None = Field(
        None, description="ids that must be governing (None: nothing required beyond `selected`)")
    rejected: tuple[MustReject, ...] = ()
    unresolved: tuple[str, ...] = Field((), description="ids that must stay unresolved (qualified)")
    not_selected: tuple[str, ...] = Field((), description="ids that must be seen and not selected (rejected or unresolved)")
    nothing_unresolved: bool = Field(False, description="the decision must leave no conflict unresolved")
    relevant: tuple[str, ...] = Field((), description="further ids that count as relevant for precision at k")
    decisive_terms: tuple[str, ...] = Field((), description="unanswerable: words an answer would have to rest on")
    foreign: tuple[str, ...] = Field((), description="other tenants' doc ids that must never appear")
    answer: str = Field("", description="reference answer, for people (not scored)")
    split: Split = Field("dev", description="dev: what the resolver was tuned on; test: held out (never blended)")
    also_groups: tuple[tuple[str, ...], ...] = Field(
        (), description="other principals' group sets for which the same expectations must hold")

    @field_validator("queries")
    @classmethod
    def _queries(cls, v):
        if any(not q.strip() for q in v):
            raise ValueError("queries must be non-blank")
        return v

    @field_validator("also_groups")
    @classmethod
    def _also_groups(cls, v):
        for groups in v:
            if any(not g.strip() for g in groups):
                raise ValueError("group names must be non-blank")
        return v

    @model_validator(mode="after")
    def _shape(self) -> "EvidenceCase":
        if self.answerable and not self.minimum_evidence:
            raise ValueError("an answerable case needs a minimum_evidence set")
        if not self.answerable:
            if self.minimum_evidence or self.selected or self.governing:
                raise ValueError("an unanswerable case has no minimum_evidence, selected or governing ids")
            if not self.decisive_terms:
                raise ValueError("an unanswerable case needs decisive_terms (the words an answer would rest on)")
        clash = (set(self.expected_selected) | set(self.governing or ())) & (
            {r.id for r in self.rejected} | set(self.not_selected))
        if clash:
            raise ValueError(f"ids both selected and rejected: {sorted(clash)}")
        sets = [frozenset(g) for g in self.principal_groups]
        if len(set(sets)) != len(sets):
            raise ValueError("also_groups repeats a principal (the case's groups or another also_groups entry)")
        return self

    @property
    def expected_selected(self) -> tuple[str, ...]:
        return self.minimum_evidence if self.selected is None else self.selected

    @property
    def relevant_ids(self) -> frozenset[str]:
        return frozenset(self.minimum_evidence) | frozenset(self.expected_selected) | frozenset(
            self.expected_governing) | frozenset(r.id for r in self.rejected) | frozenset(
            self.unresolved) | frozenset(self.not_selected) | frozenset(self.relevant)

    @property
    def expected_governing(self) -> tuple[str, ...]:
        return self.governing or ()

    @property
    def principal_groups(self) -> tuple[tuple[str, ...], ...]:
        """The group sets the case runs as: its own ``groups``, then each ``also_groups``."""
        return (self.groups, *self.also_groups)

    def principal(self, tenant: str | None = None, groups: Sequence[str] | None = None) -> Principal:
        return Principal(tenant=tenant or self.tenant, subject=f"case:{self.id}",
                         groups=frozenset(self.groups if groups is None else groups))


def principal_label(groups: Sequence[str]) -> str:
    """A principal's groups as an outcome-id suffix: ``all-staff+support`` (``no-groups`` when none)."""
    return "+".join(groups) if groups else "no-groups"


def outcome_id(case_id: str, width: int | None, groups: Sequence[str]) -> str:
    """One run of a case: ``acme-cutoff-after-cutover@k2/all-staff+support``. ``width``
    None: the case's one run (its own top_k, its own groups), named by the case id alone."""
    return case_id if width is None else f"{case_id}@k{width}/{principal_label(groups)}"


# --------------------------------------------------------------------------- loading


def case_files(path: str | Path) -> list[Path]:
    p = Path(path)
    if p.is_file():
        return [p]
    if p.is_dir():
        files = sorted(f for f in p.rglob("*") if f.suffix in (".yaml", ".yml") and f.is_file())
        if files:
            return files
        raise CaseError(f"{p}: no .yaml case files in this folder")
    raise CaseError(f"{p}: no such file or folder (give a case YAML file or a folder of them)")


def load_cases(path: str | Path) -> list[EvidenceCase]:
    """Read cases from a YAML file or a folder of them. A file holds ``cases: [...]`` and
    optional ``defaults: {...}`` merged into each case. Raises :class:`CaseError`."""
    out: list[EvidenceCase] = []
    seen: dict[str, Path] = {}
    for f in case_files(path):
        try:
            doc = yaml.safe_load(f.read_text()) or {}
        except yaml.YAMLError as e:
            raise CaseError(f"{f}: not valid YAML ({str(e).splitlines()[0]})") from None
        if not isinstance(doc, dict) or not isinstance(doc.get("cases"), list):
            raise CaseError(f"{f}: expected a mapping with a 'cases:' list")
        defaults = doc.get("defaults") or {}
        if not isinstance(defaults, dict):
            raise CaseError(f"{f}: 'defaults' must be a mapping")
        for i, raw in enumerate(doc["cases"]):
            if not isinstance(raw, dict):
                raise CaseError(f"{f}: case #{i + 1} is not a mapping")
            name = raw.get("id", f"#{i + 1}")
            try:
                case = EvidenceCase.model_validate({**defaults, **raw})
            except ValidationError as e:
                raise CaseError(f"{f}: case {name!r}: {validation_reason(e)}") from None
            if case.id in seen:
                raise CaseError(f"{f}: case id {case.id!r} is also used in {seen[case.id]}")
            seen[case.id] = f
            out.append(case)
    return out


# --------------------------------------------------------------------------- matching ids


def doc_of(passage_id: str) -> str:
    """'{doc_id}@{version}#{anchor}' -> doc_id."""
    return passage_id.split("#", 1)[0].rsplit("@", 1)[0]


def matches(case_id: str, passage_id: str) -> bool:
    """A case id names a document (any version), a ``doc@version``, or one passage (with '#')."""
    if "#" in case_id:
        return case_id == passage_id
    if "@" in case_id:
        return passage_id.split("#", 1)[0] == case_id
    return doc_of(passage_id) == case_id


def _any(case_id: str, passage_ids: Iterable[str]) -> bool:
    return any(matches(case_id, p) for p in passage_ids)


def decision_verdicts(decision: Decision) -> dict[str, Verdict]:
    """Every passage the decision names, with its verdict (the precedence of
    ``Decision.verdict``: rejected, unresolved, governing, supporting, related)."""
    out: dict[str, Verdict] = {}
    for r in decision.related:
        out[r.passage_id] = "related"
    for s in decision.supporting:
        out[s.passage_id] = "supporting"
    for s in decision.governing:
        out[s.passage_id] = "governing"
    for u in decision.unresolved:
        for p in u.passage_ids:
            out[p] = "unresolved"
    for r in decision.rejected:
        out[r.passage_id] = "rejected"
    return out


def _labels(decision: Decision, verdicts: dict[str, Verdict], want: str) -> list[str]:
    """The verdicts of the passages ``want`` names, for a failure line (a related passage
    the rules would reject reads ``related(outdated:REASON)``)."""
    outdated = {r.passage_id: r.outdated for r in decision.related if r.outdated is not None}
    return sorted({f"related(outdated:{outdated[p]})" if v == "related" and p in outdated else v
                   for p, v in verdicts.items() if matches(want, p)})


def resolution_failures(case: EvidenceCase, decision: Decision) -> list[str]:
    """What the decision got wrong against the case's expected resolution (empty = correct).

    Expected governing ids must be governing; expected selected ids governing or
    supporting; must-reject ids rejected (with an allowed code, by the named id);
    ``unresolved`` ids unresolved; ``not_selected`` ids rejected, unresolved, or related
    with an ``outdated`` reason (never citable). A plain related passage is neither
    selected nor rejected."""
    verdicts = decision_verdicts(decision)
    outdated = {r.passage_id for r in decision.related if r.outdated is not None}
    fails = []

    def got(want: str) -> str:
        return "/".join(_labels(decision, verdicts, want)) or "not delivered"

    for want in case.expected_governing:
        if not any(v == "governing" for p, v in verdicts.items() if matches(want, p)):
            fails.append(f"{want}: expected governing, got {got(want)}")
    # Cases written before the record named governing evidence (no governing: or selected:
    # field, the sample suite) meant by "selected" what the record then said: kept, neither
    # rejected nor unresolved. A related passage that is not outdated is kept in that sense.
    kept = SELECTED_VERDICTS if (case.governing is not None or case.selected is not None) else (
        SELECTED_VERDICTS | {"related"})
    for want in case.expected_selected:
        if not any(v in kept and p not in outdated for p, v in verdicts.items() if matches(want, p)):
            fails.append(f"{want}: expected selected, got {got(want)}")
    for must in case.rejected:
        hits = [r for r in decision.rejected if matches(must.id, r.passage_id)]
        ok = [r for r in hits if r.reason in must.reason and (must.by is None or (r.by and matches(must.by, r.by)))]
        if ok:
            continue
        if hits:
            fails.append(f"{must.id}: rejected as {hits[0].reason} by {hits[0].by}, expected "
                         f"{'/'.join(must.reason)}" + (f" by {must.by}" if must.by else ""))
        else:
            if not _labels(decision, verdicts, must.id) and not must.must_be_seen:
                continue
            fails.append(f"{must.id}: expected rejected ({'/'.join(must.reason)}), got {got(must.id)}")
    for want in case.unresolved:
        if not any(v == "unresolved" for p, v in verdicts.items() if matches(want, p)):
            fails.append(f"{want}: expected unresolved, got {got(want)}")
    for want in case.not_selected:
        mine = {p: v for p, v in verdicts.items() if matches(want, p)}
        denied = [p for p, v in mine.items() if v in ("rejected", "unresolved") or p in outdated]
        if not denied or any(v in SELECTED_VERDICTS for v in mine.values()):
            fails.append(f"{want}: expected rejected or unresolved, got {got(want)}")
    if case.nothing_unresolved and decision.unresolved:
        fails.append("expected nothing unresolved, got " + "; ".join(
            "/".join(u.passage_ids) for u in decision.unresolved))
    return fails


def holds_terms(text: str, terms: Sequence[str]) -> bool:
    """Every term occurs in ``text`` as a whole word (case-insensitive)."""
    return all(re.search(rf"(?<![\w-]){re.escape(t)}(?![\w-])", text, re.IGNORECASE) for t in terms)


# --------------------------------------------------------------------------- the search path


def _run_search(index, principal: Principal, request: SearchRequest, embedder, settings,
                second_stage=None) -> SearchResult:
    """The one call into the search path: the composed in-process ``search()``, the same
    stages as serving, with the decision record filled."""
    from quarry.core.search.in_process import search

    return search(index, principal, request, embedder, settings, second_stage=second_stage)


def survivors(result: SearchResult, top_k: int) -> list[str]:
    """Passage ids the second stage kept: those it ranked (rerank_rank set), or the fused
    top_k when no second stage ran."""
    ranked = [c for c in result.candidates if c.rerank_rank is not None]
    if ranked:
        return [c.passage_id for c in sorted(ranked, key=lambda c: c.rerank_rank)[:top_k]]
    return [c.passage_id for c in sorted(result.candidates, key=lambda c: c.fused_rank)[:top_k]]


def case_query(case: EvidenceCase) -> str:
    """The case's task as the resolver sees it: its queries, joined."""
    return " ".join(case.queries)


def resolve_evidence(passages: Sequence[Passage], principal: Principal, valid_at: dt.date,
                     query: str | None) -> Decision:
    """The one call into ``core.resolve.resolve`` for evaluation (the runner and the
    counterfactuals): ``query`` lets the resolver tell governing from related evidence."""
    from quarry.core.evidence import resolve as resolver  # looked up per call: tests swap in doubles

    return resolver.resolve(list(passages), principal, valid_at, query=query)


# --------------------------------------------------------------------------- per-case outcome


class QueryTrace(_Frozen):
    """One search of a case, ids only (never text)."""

    query: str
    candidates: tuple[str, ...]  # passage ids in fused order
    survivors: tuple[str, ...]
    delivered: tuple[str, ...]
    generation: int


class CaseOutcome(_Frozen):
    """One run of a case: at one final width, as one principal (``id`` says which)."""

    id: str  # outcome_id(case_id, width, groups)
    case_id: str
    split: Split
    width: int  # the final k the searches asked for
    groups: tuple[str, ...]  # the principal's groups
    kinds: tuple[str, ...]
    tenant: str
    answerable: bool
    queries: tuple[QueryTrace, ...]
    candidates: bool  # every minimum-evidence id among the candidates
    candidate_recall: float | None  # fraction of minimum-evidence ids among the candidates
    second_stage: bool
    delivered: bool
    resolution: bool
    first_lost: str | None  # the first boundary the case failed, None when it survived all
    precision: float | None  # relevant delivered excerpts / delivered excerpts
    abstained: bool | None  # unanswerable cases only: honest abstention
    asserted_by: tuple[str, ...] = ()  # unanswerable: selected passages holding every decisive term
    failures: tuple[str, ...] = ()
    leaks: tuple[str, ...] = ()
    decision: Decision


@dataclass
class CaseContext:
    """What a case's run leaves behind for counterfactuals: the index, the principal, the
    evidence the decision was made over (delivered excerpts in delivery order, then any
    passage the path's contradiction search added) and the decision."""

    case: EvidenceCase
    index: Any
    principal: Principal
    delivered: list[Passage]
    decision: Decision
    results: list[SearchResult] = field(default_factory=list)
    width: int = TOP_K_DEFAULT
    outcome_id: str = ""

    @property
    def label(self) -> str:
        return self.outcome_id or self.case.id


def leaks_of(case: EvidenceCase, index, principal: Principal, result: SearchResult) -> list[str]:
    """Ids in a result that the principal must not see: not a passage of its tenant's index,
    another tenant's envelope, an ACL the groups cannot read, or a listed foreign doc."""
    ids = [c.passage_id for c in result.candidates] + [e.passage_id for e in result.excerpts]
    if result.decision is not None:
        ids += list(decision_verdicts(result.decision))
    out = []
    for pid in dict.fromkeys(ids):
        p = index.passage(pid, principal)
        if p is None:
            out.append(f"{pid}: not a passage this principal can read in tenant {principal.tenant!r}")
        elif p.tenant != principal.tenant or not principal.can_read(p.tenant, p.envelope.acl):
            out.append(f"{pid}: belongs to tenant {p.tenant!r} / acl {list(p.envelope.acl)}")
        elif any(matches(f, pid) for f in case.foreign):
            out.append(f"{pid}: listed as another tenant's document")
    return out


def run_case(case: EvidenceCase, index, embedder, settings, second_stage=None,
             search_fn: Callable[..., SearchResult] | None = None, *, width: int | None = None,
             groups: Sequence[str] | None = None, suffix: bool = True) -> tuple[CaseOutcome, CaseContext]:
    """Run ``case`` at final width ``width`` (default: its ``top_k``) as the principal with
    ``groups`` (default: the case's groups) and score it. The outcome id names the width
    and the principal (``outcome_id``) unless ``suffix`` is False."""
    search_fn = search_fn or _run_search
    k = case.top_k if width is None else width
    groups = tuple(case.groups if groups is None else groups)
    principal = case.principal(groups=groups)
    traces, results, leaks = [], [], []
    delivered: dict[str, Passage] = {}
    for q in case.queries:
        req = SearchRequest(query=q, top_k=k, doc_type=case.doc_type,
                            valid_at=case.valid_at if case.filter_valid_at else None)
        res = search_fn(index, principal, req, embedder, settings, second_stage)
        results.append(res)
        leaks += leaks_of(case, index, principal, res)
        for e in res.excerpts:
            p = index.passage(e.passage_id, principal)
            if p is not None:
                delivered.setdefault(p.passage_id, p)
        traces.append(QueryTrace(query=q, candidates=tuple(c.passage_id for c in res.candidates),
                                 survivors=tuple(survivors(res, k)),
                                 delivered=tuple(e.passage_id for e in res.excerpts), generation=res.generation))
    # The path's own decision when it answers the case exactly (one query, same date);
    # otherwise resolve over everything the run delivered (and its evidence-graph
    # neighbours, as one search does), as of the case's date.
    only = results[0].decision if len(results) == 1 else None
    if only is not None and only.valid_at == case.valid_at:
        decision = only
    else:
        from quarry.core.search.resolution import resolve_delivered

        decision = resolve_delivered(index, principal, case_query(case), list(delivered.values()), case.valid_at,
                                     settings, embedder)
    # The evidence the decision was made over: the excerpts, plus whatever the graph or
    # the contradiction search folded in (counterfactuals re-resolve exactly this set).
    evidence = dict(delivered)
    for pid in decision_verdicts(decision):
        if pid not in evidence and (p := index.passage(pid, principal)) is not None:
            evidence[pid] = p

    cand = {p for t in traces for p in t.candidates}
    surv = {p for t in traces for p in t.survivors}
    deliv = {p for t in traces for p in t.delivered}
    need = case.minimum_evidence
    in_cand = [m for m in need if _any(m, cand)]
    stages = {
        "candidates": len(in_cand) == len(need),
        "second_stage": all(_any(m, surv) for m in need),
        "delivered": all(_any(m, deliv) for m in need),
    }
    fails = resolution_failures(case, decision)
    stages["resolution"] = not fails
    for m in need:
        if not _any(m, cand):
            fails.insert(0, f"{m}: not among the candidates")
    first_lost = next((b for b, _, _ in BOUNDARIES if not stages[b]), None) if case.answerable else None

    all_delivered = [p for t in traces for p in t.delivered]
    precision = None
    if case.answerable and all_delivered:
        rel = case.relevant_ids
        precision = sum(1 for p in all_delivered if _any_rel(rel, p)) / len(all_delivered)
    elif case.answerable:
        precision = 0.0

    abstained, asserted = None, ()
    if not case.answerable:
        texts = {pid: p.text for pid, p in delivered.items()}
        asserted = tuple(s.passage_id for s in decision.selected
                         if holds_terms(_text_of(s.passage_id, texts, index, principal), case.decisive_terms))
        abstained = not asserted
        if asserted:
            fails.append("selected evidence holds every decisive term: " + ", ".join(asserted))

    oid = outcome_id(case.id, k if suffix else None, groups)
    outcome = CaseOutcome(
        id=oid, case_id=case.id, split=case.split, width=k, groups=groups, kinds=case.kinds, tenant=case.tenant,
        answerable=case.answerable, queries=tuple(traces),
        candidates=stages["candidates"], candidate_recall=(len(in_cand) / len(need)) if need else None,
        second_stage=stages["second_stage"], delivered=stages["delivered"], resolution=stages["resolution"],
        first_lost=first_lost, precision=precision, abstained=abstained, asserted_by=asserted,
        failures=tuple(fails), leaks=tuple(leaks), decision=decision,
    )
    return outcome, CaseContext(case, index, principal, list(evidence.values()), decision, results, width=k,
                                outcome_id=oid)


def _any_rel(relevant: frozenset[str], passage_id: str) -> bool:
    return any(matches(r, passage_id) for r in relevant)


def _text_of(pid: str, texts: dict[str, str], index, principal: Principal) -> str:
    if pid in texts:
        return texts[pid]
    p = index.passage(pid, principal)
    return p.text if p is not None else ""


# --------------------------------------------------------------------------- the suite


def boundary_table(outcomes: Sequence[CaseOutcome]) -> list[dict[str, Any]]:
    """Seed §11.12's table over the answerable cases: cases surviving each boundary (and
    every one before it), the rate conditional on the previous boundary, what failure means."""
    ans = [o for o in outcomes if o.answerable]
    rows, prev = [], len(ans)
    alive = list(ans)
    for key, label, meaning in BOUNDARIES:
        alive = [o for o in alive if getattr(o, key)]
        rows.append({"boundary": key, "label": label, "surviving": len(alive), "of": prev,
                     "conditional_rate": (len(alive) / prev) if prev else None, "failure_means": meaning})
        prev = len(alive)
    rows.append({"boundary": "end_to_end", "label": "End-to-end", "surviving": len(alive), "of": len(ans),
                 "conditional_rate": (len(alive) / len(ans)) if ans else None,
                 "failure_means": "product result, not a diagnosis"})
    return rows


def _rate(n: int, d: int) -> float | None:
    return n / d if d else None


def summarize(outcomes: Sequence[CaseOutcome]) -> dict[str, Any]:
    """The figures over a set of outcomes of *one* split (the caller never mixes splits).
    Counts are outcomes (case x width x principal); ``case_count`` counts distinct cases."""
    ans = [o for o in outcomes if o.answerable]
    una = [o for o in outcomes if not o.answerable]
    precisions = [o.precision for o in ans if o.precision is not None]
    recalls = [o.candidate_recall for o in ans if o.candidate_recall is not None]
    honest = sum(1 for o in una if o.abstained)
    leaks = [f"{o.id}: {leak}" for o in outcomes for leak in o.leaks]
    return {
        "cases": len(outcomes),
        "case_count": len({o.case_id for o in outcomes}),
        "answerable": len(ans),
        "unanswerable": len(una),
        "candidate_recall": _rate(sum(o.candidates for o in ans), len(ans)),
        "candidate_recall_mean_fraction": (sum(recalls) / len(recalls)) if recalls else None,
        "second_stage_survival": _rate(sum(o.second_stage for o in ans), len(ans)),
        "delivered": _rate(sum(o.delivered for o in ans), len(ans)),
        "resolution_correct": sum(o.resolution for o in ans),
        "resolution_accuracy": _rate(sum(o.resolution for o in ans), len(ans)),
        "precision_at_k": (sum(precisions) / len(precisions)) if precisions else None,
        "honest_abstention_rate": _rate(honest, len(una)),
        "false_assertion_rate": _rate(len(una) - honest, len(una)),
        "honest_abstentions": honest,
        "false_assertions": len(una) - honest,
        "isolation": "pass" if not leaks else "FAIL",
        "leaks": leaks,
        "boundaries": boundary_table(outcomes),
        "same_at_every_width": width_invariance(outcomes),
        "first_lost": {b: sum(1 for o in ans if o.first_lost == b) for b, _, _ in BOUNDARIES},
        "failing_cases": [{"id": o.id, "case": o.case_id, "width": o.width, "principal": principal_label(o.groups),
                           "failures": list(o.leaks) + list(o.failures)}
                          for o in outcomes if o.failures or o.leaks],
    }


def width_invariance(outcomes: Sequence[CaseOutcome]) -> dict[str, int]:
    """Over (case, principal) run at more than one width: how many give the same
    governing documents, the same rejections (document, reason) and the same unresolved
    groups at every width. Resolution is meant not to depend on width."""
    runs: dict[tuple, dict[int, Decision]] = {}
    for o in outcomes:
        runs.setdefault((o.case_id, o.groups), {})[o.width] = o.decision
    multi = [r for r in runs.values() if len(r) > 1]

    def same(view) -> int:
        return sum(1 for r in multi if len({view(d) for d in r.values()}) == 1)
    return {
        "runs": len(multi),
        "governing": same(lambda d: frozenset(doc_of(x.passage_id) for x in d.governing)),
        "rejected": same(lambda d: frozenset((doc_of(x.passage_id), x.reason) for x in d.rejected)),
        "unresolved": same(lambda d: frozenset(frozenset(doc_of(p) for p in u.passage_ids) for u in d.unresolved)),
    }


# What jobs/case_gate.py reads at the top of the summary (pooled, see summarize_suite).
POOLED_FOR_GATE = ("answerable", "resolution_accuracy", "candidate_recall", "false_assertion_rate")


def summarize_suite(outcomes: Sequence[CaseOutcome], extra_leaks: Sequence[str] = ()) -> dict[str, Any]:
    """Per split (dev and test apart, never blended) and, within each, per width; the
    isolation gate over every run (``extra_leaks``: runs made only for counterfactuals)."""
    leaks = [f"{o.id}: {leak}" for o in outcomes for leak in o.leaks] + list(extra_leaks)
    widths = sorted({o.width for o in outcomes})
    splits: dict[str, Any] = {}
    for sp in SPLITS:
        mine = [o for o in outcomes if o.split == sp]
        if not mine:
            continue
        s = summarize(mine)
        s["widths"] = sorted({o.width for o in mine})
        s["by_width"] = {str(k): summarize([o for o in mine if o.width == k]) for k in s["widths"]}
        splits[sp] = s
    pooled = summarize(outcomes)
    return {
        "isolation": "pass" if not leaks else "FAIL",
        "leaks": leaks,
        # Pooled over every split, only for comparing one case set with itself (the
        # promotion gate, jobs/case_gate.py: new vs live generation); never reported.
        **{k: pooled[k] for k in POOLED_FOR_GATE},
        "outcomes": len(outcomes),
        "cases": len({o.case_id for o in outcomes}),
        "widths": widths,
        "principals": len({(o.case_id, o.groups) for o in outcomes}),
        "splits": splits,
        # rows: width; columns: split (correct / answerable outcomes at that width)
        "resolution_by_width": {str(k): {sp: {"correct": s["by_width"][str(k)]["resolution_correct"],
                                              "of": s["by_width"][str(k)]["answerable"],
                                              "rate": s["by_width"][str(k)]["resolution_accuracy"]}
                                         for sp, s in splits.items() if str(k) in s["by_width"]}
                                for k in widths},
    }


@dataclass
class SuiteRun:
    outcomes: list[CaseOutcome]
    contexts: list[CaseContext]  # one per (case, principal): the run at the counterfactual width
    summary: dict[str, Any]
    counterfactuals: list[Any] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)


class IndexMissing(FileNotFoundError):
    pass


def load_tenant(index_root: str, tenant: str, generation: int | None = None):
    """(index, embedder, second_stage) for a tenant's live (or given) generation, as serving
    loads them: the embedder the manifest names and the gate-promoted second stage."""
    from quarry.core.index import layout
    from quarry.core.rank.gate import load_second_stage
    from quarry.core.index.shards import TenantIndex
    from quarry.core.embed.factory import embedder_for_index

    if generation is None and layout.current_generation(index_root, tenant) is None:
        raise IndexMissing(f"no published index for tenant {tenant!r} under {index_root}; build one with "
                           f"`quarry build --source quarry/sample_corpus --index-root {index_root}`")
    index = TenantIndex.load(index_root, tenant, generation)
    second, _decision = load_second_stage(index_root, tenant, index.generation)
    return index, embedder_for_index(index.manifest), second


def case_widths(case: EvidenceCase, widths: Sequence[int] | None) -> tuple[int, ...]:
    """The final widths a case runs at: ``widths`` (deduplicated, in order), or its own top_k."""
    return (case.top_k,) if widths is None else tuple(dict.fromkeys(widths))


def counterfactual_width(case: EvidenceCase) -> int:
    """Counterfactuals run at one width per principal, to bound time: the case's top_k
    (which defaults to TOP_K_DEFAULT = 4)."""
    return case.top_k


def run_suite(cases: Sequence[EvidenceCase], index_root: str, settings=None, *, widths: Sequence[int] | None = None,
              generation: dict[str, int] | None = None, counterfactuals: bool = True, search_fn=None,
              progress: Callable[[str], None] | None = None) -> SuiteRun:
    """Run every case at each final width in ``widths`` (None: the case's own top_k) and as
    each principal (its groups, then each ``also_groups``) against the published indexes
    under ``index_root`` (or the given generation per tenant). With ``counterfactuals``,
    each answerable case's four also run, once per principal at the case's top_k (a run
    made only for them, when that width is not swept, still counts for isolation)."""
    from quarry.core.search.settings import SearchSettings

    settings = settings or SearchSettings()
    if widths is not None:
        bad = [k for k in widths if not isinstance(k, int) or not 1 <= k <= TOP_K_CEILING]
        if bad or not widths:
            raise ValueError(f"widths must be integers 1..{TOP_K_CEILING}, got {list(widths)}")
    loaded: dict[str, tuple] = {}
    embedders: dict[str, Any] = {}
    outcomes, contexts, extra_leaks = [], [], []
    for case in cases:
        if case.tenant not in loaded:
            index, emb, second = load_tenant(index_root, case.tenant, (generation or {}).get(case.tenant))
            # One embedder object per model name: MiniLM loads once for every tenant.
            emb = embedders.setdefault(emb.name, emb)
            loaded[case.tenant] = (index, emb, second)
        index, emb, second = loaded[case.tenant]
        ks, cf_k = case_widths(case, widths), counterfactual_width(case)
        # A sweep names each run case@k{width}/{principal}; a case run once (its own top_k,
        # its own groups) keeps its bare id, as the promotion gate compares them.
        suffix = widths is not None or bool(case.also_groups)
        for groups in case.principal_groups:
            for k in ks:
                out, ctx = run_case(case, index, emb, settings, second, search_fn, width=k, groups=groups,
                                    suffix=suffix)
                outcomes.append(out)
                if k == cf_k:
                    contexts.append(ctx)
                if progress:
                    progress(f"{out.id}: {'ok' if not out.failures and not out.leaks else 'FAIL'}")
            if cf_k not in ks and counterfactuals and case.answerable:
                out, ctx = run_case(case, index, emb, settings, second, search_fn, width=cf_k, groups=groups)
                contexts.append(ctx)
                extra_leaks += [f"{out.id} (counterfactual base run): {leak}" for leak in out.leaks]
    run = SuiteRun(outcomes, contexts, summarize_suite(outcomes, extra_leaks),
                   meta={"index_root": str(index_root),
                         "widths": "case" if widths is None else list(dict.fromkeys(widths)),
                         "generations": {t: v[0].generation for t, v in loaded.items()},
                         "embedder": {t: v[1].name for t, v in loaded.items()},
                         "second_stage": {t: v[2] is not None for t, v in loaded.items()}})
    if counterfactuals:
        from quarry.eval.counterfactuals import run_counterfactuals

        run.counterfactuals = run_counterfactuals(contexts, index_root, settings, loaded, search_fn)
        run.summary["counterfactuals"] = {
            sp: _cf_summary([r for r in run.counterfactuals if r.split == sp])
            for sp in SPLITS if any(r.split == sp for r in run.counterfactuals)}
    return run


def _cf_summary(results) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for r in results:
        s = out.setdefault(r.kind, {"applicable": 0, "passed": 0, "not_applicable": 0, "failing": []})
        if not r.applicable:
            s["not_applicable"] += 1
        elif r.passed:
            s["applicable"] += 1
            s["passed"] += 1
        else:
            s["applicable"] += 1
            s["failing"].append(r.case_id)
    return out
