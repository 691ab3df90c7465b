"""The change log (DESIGN §3 "Updates", §7 ``apply-changes``): records, validation, and the
per-document fold that turns a stream of changes into the tenant's overlay state.

A change is one of

* ``upsert``: a full source document (``doc_id@version`` is added, or replaced if present);
* ``delete``: one version of a document, or every version when ``version`` is absent;
* ``acl``: the new group list of one version, or of every version.

Changes to one document apply in ``at`` order (ties broken by ``change_id``). A change
whose ``(at, change_id)`` is not after the last change applied to its document is skipped
as ``stale`` (a re-applied change, or one that arrived after a newer change to the same
document), so re-applying a log is a no-op and the result never depends on the order
change files are read in.

The fold's output, :class:`TenantState`, says for every touched document which versions
are live, whether each lives in the base generation or the delta, and any ACL override.
``quarry.core.index.shards`` turns it into per-shard row masks.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from quarry.core.ingest.sources import ERROR_KEY, SOURCE_KEY, read_records, validate
from quarry.core.records import Frozen, SourceDocument, check_acl, check_slug, validation_reason

Op = Literal["upsert", "delete", "acl"]
Outcome = Literal["applied", "stale"]
MAX_LAG_SAMPLES = 10_000  # per tenant: enough for p95 over the recent changes


def _utc(v: dt.datetime) -> dt.datetime:
    return v.replace(tzinfo=dt.timezone.utc) if v.tzinfo is None else v.astimezone(dt.timezone.utc)


class Change(Frozen):
    """One change-log record. ``at`` is when the source changed (naive times are UTC)."""

    op: Op
    tenant: str
    doc_id: str
    version: str | None = None
    acl: tuple[str, ...] | None = None
    document: SourceDocument | None = None
    at: dt.datetime
    change_id: str | None = Field(default=None, min_length=1, max_length=200)

    @field_validator("tenant")
    @classmethod
    def _tenant(cls, v: str) -> str:
        return check_slug(v)

    @field_validator("at")
    @classmethod
    def _at(cls, v: dt.datetime) -> dt.datetime:
        return _utc(v)

    @field_validator("acl")
    @classmethod
    def _acl(cls, v: tuple[str, ...] | None) -> tuple[str, ...] | None:
        return None if v is None else check_acl(v)

    @model_validator(mode="after")
    def _shape(self) -> "Change":
        d = self.document
        if self.op == "upsert":
            if d is None:
                raise ValueError("an upsert carries the full source document in 'document'")
            if d.tenant != self.tenant or d.doc_id != self.doc_id:
                raise ValueError("document.tenant/doc_id must equal the change's tenant/doc_id")
            if self.version is not None and self.version != d.version:
                raise ValueError("version must equal document.version")
            if self.acl is not None:
                raise ValueError("an upsert's ACL is the document's 'acl'; do not set 'acl'")
        elif d is not None:
            raise ValueError(f"a {self.op} change carries no 'document'")
        if self.op == "acl" and self.acl is None:
            raise ValueError("an acl change carries the new group list in 'acl'")
        if self.op == "delete" and self.acl is not None:
            raise ValueError("a delete carries no 'acl'")
        if self.op == "upsert" and self.version is None:
            object.__setattr__(self, "version", d.version)
        if self.change_id is None:  # content-addressed: the same record always has the same id
            body = self.model_dump_json(exclude={"change_id"})
            object.__setattr__(self, "change_id", hashlib.sha256(body.encode()).hexdigest()[:24])
        return self

    @property
    def order(self) -> tuple[str, str]:
        return (self.at.isoformat(), str(self.change_id))


def validate_change(raw: Mapping[str, Any]) -> Change:
    """Validate one raw change record (reader bookkeeping keys, ``_*``, are dropped).
    Raises ``pydantic.ValidationError``; :func:`change_reason` makes it a quarantine line."""
    if ERROR_KEY in raw:
        validate(raw)  # raises the reader's field-located error
    return Change.model_validate({k: v for k, v in raw.items() if not k.startswith("_")})


def change_reason(err: ValidationError) -> str:
    return validation_reason(err)


def change_record_id(raw: Mapping[str, Any]) -> str | None:
    """What a quarantined change is called in reports: ``op:doc_id@version`` when readable."""
    doc_id = raw.get("doc_id")
    if doc_id is None:
        return raw.get("change_id") if isinstance(raw.get("change_id"), str) else None
    v = raw.get("version")
    return f"{raw.get('op')}:{doc_id}" + (f"@{v}" if v is not None else "")


def doc_hash(doc: SourceDocument) -> str:
    """Content address of an upserted document (what its delta passages were built from)."""
    return hashlib.sha256(doc.model_dump_json().encode()).hexdigest()[:16]


# --------------------------------------------------------------------------- state


class VersionState(Frozen):
    """One live version of a document: where its passages are, and an ACL override."""

    origin: Literal["base", "delta"]
    hash: str | None = None  # doc_hash of the upsert, for origin == "delta"
    acl: tuple[str, ...] | None = None  # None: the ACL its passages carry


class DocState(Frozen):
    last: tuple[str, str]  # (at iso, change_id) of the last change applied
    versions: dict[str, VersionState] | None = None  # None: exactly as in the base


class TenantState(Frozen):
    """The fold of every change applied to one tenant since its base generation was built.

    ``lags`` keeps (source changed, visible) epoch seconds of the most recent changes, for
    the staleness report; ``applied`` counts every change ever applied."""

    tenant: str
    base: int  # the generation the versions' 'base' origin refers to
    seq: int = 0  # the delta generation this state was published as
    docs: dict[str, DocState] = Field(default_factory=dict)
    applied: int = 0
    skipped: int = 0
    lags: tuple[tuple[float, float], ...] = ()
    published_at: float | None = None

    def rebased(self, base: int) -> "TenantState":
        """The same applied history over another base generation (after a compaction or a
        full rebuild): document versions are read from that base again; the per-document
        ``last`` marks stay, so re-applying old changes remains a no-op."""
        if base == self.base:
            return self
        docs = {d: DocState(last=s.last) for d, s in self.docs.items()}
        return self.model_copy(update={"base": base, "docs": docs})

    def live_delta(self) -> dict[tuple[str, str], str]:
        """(doc_id, version) -> doc hash of every version whose passages live in the delta."""
        out = {}
        for d, s in self.docs.items():
            for v, vs in (s.versions or {}).items():
                if vs.origin == "delta":
                    out[(d, v)] = vs.hash or ""
        return out


BaseVersions = Callable[[str], Mapping[str, tuple[str, ...]]]  # doc_id -> {version: acl} in the base


@dataclass(frozen=True)
class FoldResult:
    state: TenantState
    outcomes: dict[str, Outcome]  # change_id -> what happened
    upserts: dict[tuple[str, str], Change]  # live delta versions that came from *these* changes


def fold(state: TenantState, changes: Iterable[Change], base_versions: BaseVersions) -> FoldResult:
    """Apply ``changes`` (one tenant's) to ``state``, per document in ``(at, change_id)`` order."""
    by_doc: dict[str, list[Change]] = {}
    for c in changes:
        if c.tenant != state.tenant:
            raise ValueError(f"fold for tenant {state.tenant!r} was given a change of {c.tenant!r}")
        by_doc.setdefault(c.doc_id, []).append(c)
    docs = dict(state.docs)
    outcomes: dict[str, Outcome] = {}
    fresh: dict[tuple[str, str], Change] = {}
    applied = skipped = 0
    for doc_id, cs in by_doc.items():
        cur = docs.get(doc_id)
        last = cur.last if cur is not None else ("", "")
        versions: dict[str, VersionState] | None = dict(cur.versions) if cur and cur.versions is not None else None
        for c in sorted(cs, key=lambda c: c.order):
            if c.order <= last:
                outcomes[c.change_id] = "stale"
                skipped += 1
                continue
            if versions is None:
                versions = {v: VersionState(origin="base") for v in base_versions(doc_id)}
            _apply(versions, c, fresh)
            last = c.order
            outcomes[c.change_id] = "applied"
            applied += 1
        if cur is None and versions is None:
            continue
        docs[doc_id] = DocState(last=last, versions=versions)
    return FoldResult(
        state=state.model_copy(update={"docs": docs, "applied": state.applied + applied,
                                       "skipped": state.skipped + skipped}),
        outcomes=outcomes, upserts={k: c for k, c in fresh.items()},
    )


def _apply(versions: dict[str, VersionState], c: Change, fresh: dict[tuple[str, str], Change]) -> None:
    targets = [c.version] if c.version is not None else list(versions)
    if c.op == "upsert":
        versions[c.version] = VersionState(origin="delta", hash=doc_hash(c.document))
        fresh[(c.doc_id, c.version)] = c
    elif c.op == "delete":
        for v in targets:
            versions.pop(v, None)
            fresh.pop((c.doc_id, v), None)
    else:  # acl
        for v in targets:
            if v in versions:
                versions[v] = versions[v].model_copy(update={"acl": c.acl})


def with_lags(state: TenantState, changes: Sequence[Change], outcomes: Mapping[str, Outcome],
              visible_at: float) -> TenantState:
    """Record (source changed, visible) for the applied changes, keeping the newest samples."""
    new = [(c.at.timestamp(), visible_at) for c in changes if outcomes.get(c.change_id) == "applied"]
    lags = (tuple(state.lags) + tuple(sorted(new)))[-MAX_LAG_SAMPLES:]
    return state.model_copy(update={"lags": lags, "published_at": visible_at})


def lag_summary(state: TenantState) -> dict[str, float | int | None]:
    """p50/p95/max seconds from source change to visible, over the recorded samples."""
    import numpy as np

    if not state.lags:
        return {"changes": 0, "p50_s": None, "p95_s": None, "max_s": None}
    lag = np.array([max(0.0, v - a) for a, v in state.lags])
    return {"changes": int(lag.size), "p50_s": round(float(np.percentile(lag, 50)), 3),
            "p95_s": round(float(np.percentile(lag, 95)), 3), "max_s": round(float(lag.max()), 3)}


def parse_state(text: str) -> TenantState:
    return TenantState.model_validate_json(text)


def dump_state(state: TenantState) -> bytes:
    return json.dumps(json.loads(state.model_dump_json()), sort_keys=True).encode()


def read_changes(path: str) -> tuple[list[Change], list[tuple[str | None, str, str]]]:
    """In-process reader: every change under ``path`` (JSONL/Parquet file or folder), and
    the invalid ones as (record id, source, reason). The Spark job reads the same way."""
    good, bad = [], []
    for raw in read_records(path):
        try:
            good.append(validate_change(raw))
        except ValidationError as e:
            bad.append((change_record_id(raw), str(raw.get(SOURCE_KEY, "<unknown>")), change_reason(e)))
    return good, bad


def change_lines(changes: Iterable[Change]) -> bytes:
    """Changes as the JSON lines ``quarry apply-changes`` reads (one record per line)."""
    return "".join(c.model_dump_json(exclude_none=True) + "\n" for c in changes).encode()


def pending_changes(state: TenantState, changes: Iterable[Change]) -> list[Change]:
    """The changes of ``state``'s tenant that applying would still apply: exactly those the
    fold would not skip as stale (after the last change applied to their document)."""
    out = []
    for c in changes:
        if c.tenant != state.tenant:
            continue
        doc = state.docs.get(c.doc_id)
        if doc is None or c.order > doc.last:
            out.append(c)
    return out
