"""The evidence case: its model, the outcome ids of its runs, and the YAML loader.

A case is the evaluation unit of an agentic retrieval system: a task (one or more queries
run in order, evidence accumulating as in one agent run), a tenant and the principal's
groups, the evaluation date ``valid_at``, the *minimum evidence set* needed to answer, the
evidence that must be rejected or qualified (with reason codes), whether the corpus holds
an answer at all, and the expected resolution (which ids are selected).

A case runs as every principal it names (its ``groups``, then each ``also_groups``) and
at every final width a sweep asks for; each run is one outcome, named by
:func:`outcome_id`. A case is ``split: dev`` (what the resolver was tuned on) or ``test``
(held out). An unanswerable case names its ``decisive_terms``: the words any answer would
have to rest on. A file holds ``cases: [...]`` and optional ``defaults: {...}``; an
invalid one raises :class:`CaseError` with one line naming the file, the case and the
field.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from quarry.core.records import TOP_K_CEILING, TOP_K_DEFAULT, Principal, RejectReason, validation_reason

__all__ = ["SPLITS", "CaseError", "CaseKind", "EvidenceCase", "FrozenModel", "MustReject", "Split", "case_files",
           "load_cases", "outcome_id", "principal_label"]

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


class CaseError(ValueError):
    """An invalid case file: the message is one line naming the file, the case and the field."""


class FrozenModel(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class MustReject(FrozenModel):
    """Evidence the resolution must reject, with the allowed reason codes."""

    id: str = Field(min_length=1, description="doc id, or passage id with '#'")
    reason: tuple[RejectReason, ...] = Field(min_length=1, description="allowed reason codes")
    by: str | None = Field(default=None, description="doc or passage id that must defeat it")
    must_be_seen: bool = Field(True, description="False: passing when the run never delivered it")

    @field_validator("reason", mode="before")
    @classmethod
    def _one_or_many(cls, v):
        return (v,) if isinstance(v, str) else v


class EvidenceCase(FrozenModel):
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
