"""Reconciliation (DESIGN §7 ``reconcile``): compare a tenant's source of truth with what its
index serves (base + delta + masks) and express the drift as change records, so repairs
go through the same change path as every other change.

Per document version the index either lacks (``missing``), holds but the source does not
(``extra``), holds with another ACL (``stale_acl``) or holds with other text (``changed``:
the source was edited without a version bump).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, field

from quarry.core.changes.log import Change
from quarry.core.ingest.chunking import ChunkSettings, chunk_document
from quarry.core.index.shards import TenantIndex
from quarry.core.records import SourceDocument


@dataclass(frozen=True)
class Drift:
    tenant: str
    missing: tuple[str, ...] = ()  # doc_id@version in the source, not served
    extra: tuple[str, ...] = ()  # served, not in the source
    stale_acl: tuple[str, ...] = ()
    changed: tuple[str, ...] = ()
    changes: tuple[Change, ...] = field(default=(), repr=False)

    def counts(self) -> dict[str, int]:
        return {"missing": len(self.missing), "extra": len(self.extra), "stale_acl": len(self.stale_acl),
                "changed": len(self.changed)}


def served_versions(index: TenantIndex) -> dict[tuple[str, str], tuple[tuple[str, ...], tuple[tuple[str, str], ...]]]:
    """(doc_id, version) -> (effective ACL, sorted (passage_id, text)) as the index serves them."""
    out: dict[tuple[str, str], tuple[tuple[str, ...], list[tuple[str, str]]]] = {}
    for si, r in index.live_rows():
        p = index.shards[si].passage(r)
        key = (p.doc_id, p.envelope.version)
        _, acl = index.version_view(si, *key)
        acl_now = tuple(sorted(acl or p.envelope.acl))
        out.setdefault(key, (acl_now, []))[1].append((p.passage_id, p.text))
    return {k: (a, tuple(sorted(ps))) for k, (a, ps) in out.items()}


def diff(index: TenantIndex, docs: Sequence[SourceDocument], at: dt.datetime,
         chunk_settings: ChunkSettings = ChunkSettings()) -> Drift:
    """The drift between ``docs`` (the tenant's source of truth) and ``index``, with the
    change records that repair it, stamped ``at``."""
    served = served_versions(index)
    source = {(d.doc_id, d.version): d for d in docs if d.tenant == index.tenant}
    missing, extra, stale, changed, changes = [], [], [], [], []
    for key, d in sorted(source.items()):
        have = served.get(key)
        if have is None:
            missing.append(f"{key[0]}@{key[1]}")
            changes.append(Change(op="upsert", tenant=d.tenant, doc_id=d.doc_id, document=d, at=at))
            continue
        acl, texts = have
        want = tuple(sorted((p.passage_id, p.text) for p in chunk_document(d, chunk_settings)[0]))
        if want != texts:
            changed.append(f"{key[0]}@{key[1]}")
            changes.append(Change(op="upsert", tenant=d.tenant, doc_id=d.doc_id, document=d, at=at))
        elif acl != tuple(sorted(d.acl)):
            stale.append(f"{key[0]}@{key[1]}")
            changes.append(Change(op="acl", tenant=d.tenant, doc_id=d.doc_id, version=d.version, acl=d.acl, at=at))
    for key in sorted(set(served) - set(source)):
        extra.append(f"{key[0]}@{key[1]}")
        changes.append(Change(op="delete", tenant=index.tenant, doc_id=key[0], version=key[1], at=at))
    return Drift(index.tenant, tuple(missing), tuple(extra), tuple(stale), tuple(changed), tuple(changes))
