"""Filter columns and the principal's row mask (DESIGN §3-4).

Every shard stores, per row: ACL groups as one packed bitset per group of the shard's
group vocabulary (``acl_bits``: groups x ceil(rows/8) bytes, little bit order; shards
written before stored a dense rows x groups bool matrix ``acl``, still read and packed at
load), a 'whole tenant' flag, a doc_type code, and validity as int64 epoch-day bounds with
'known' flags. A mask is computed once per (generation, groups, doc_type,
valid_at) and applied *inside* each leg before anything is scored or ranked.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from quarry.core.records import PUBLIC_GROUP, Envelope, Principal

EPOCH = dt.date(1970, 1, 1)
NO_DAY = np.iinfo(np.int64).min  # sentinel for an unknown bound


def epoch_day(d: dt.date | None) -> int:
    return NO_DAY if d is None else (d - EPOCH).days


def pack_acl(acl: np.ndarray) -> np.ndarray:
    """A dense (rows, groups) bool matrix as one packed bitset per group."""
    acl = np.asarray(acl, dtype=bool)
    return np.packbits(acl.T, axis=1, bitorder="little") if acl.size else \
        np.zeros((acl.shape[1] if acl.ndim == 2 else 0, (acl.shape[0] + 7) // 8), dtype=np.uint8)


@dataclass(frozen=True)
class FilterColumns:
    tenant: str
    groups: tuple[str, ...]  # row order of ``acl_bits``
    acl_bits: np.ndarray  # (len(groups), ceil(n/8)) uint8: row g = packed bits of the rows group g may read
    public: np.ndarray  # (n,) bool: '*' in acl
    doc_types: tuple[str, ...]
    doc_type: np.ndarray  # (n,) int16 codes into doc_types
    valid_from: np.ndarray  # (n,) int64 epoch days or NO_DAY
    valid_to: np.ndarray  # (n,) int64 epoch days (inclusive) or NO_DAY
    deleted: np.ndarray  # (n,) bool tombstones (delta generations set these)

    @property
    def n(self) -> int:
        return int(self.public.shape[0])

    @property
    def nbytes(self) -> int:
        """Bytes these columns hold in memory."""
        return sum(int(a.nbytes) for a in (self.acl_bits, self.public, self.doc_type, self.valid_from,
                                              self.valid_to, self.deleted))

    def group_rows(self, group: str) -> np.ndarray:
        """(n,) bool: the rows ``group`` is granted (not counting public rows)."""
        if group not in self.groups:
            return np.zeros(self.n, dtype=bool)
        return np.unpackbits(self.acl_bits[self.groups.index(group)], count=self.n, bitorder="little").astype(bool)

    @classmethod
    def from_envelopes(cls, tenant: str, envelopes: Sequence[Envelope]) -> "FilterColumns":
        if any(e.tenant != tenant for e in envelopes):
            raise ValueError(f"a shard of tenant {tenant!r} was given another tenant's passage")
        groups = tuple(sorted({g for e in envelopes for g in e.acl if g != PUBLIC_GROUP}))
        gi = {g: i for i, g in enumerate(groups)}
        n = len(envelopes)
        acl = np.zeros((n, len(groups)), dtype=bool)
        for r, e in enumerate(envelopes):
            for g in e.acl:
                if g != PUBLIC_GROUP:
                    acl[r, gi[g]] = True
        doc_types = tuple(sorted({e.doc_type for e in envelopes}))
        di = {t: i for i, t in enumerate(doc_types)}
        return cls(
            tenant=tenant,
            groups=groups,
            acl_bits=pack_acl(acl),
            public=np.array([PUBLIC_GROUP in e.acl for e in envelopes], dtype=bool),
            doc_types=doc_types,
            doc_type=np.array([di[e.doc_type] for e in envelopes], dtype=np.int16),
            valid_from=np.array([epoch_day(e.effective_from) for e in envelopes], dtype=np.int64),
            valid_to=np.array([epoch_day(e.effective_to) for e in envelopes], dtype=np.int64),
            deleted=np.zeros(n, dtype=bool),
        )

    def to_arrays(self) -> dict[str, np.ndarray]:
        return {
            "acl_bits": self.acl_bits, "public": self.public, "doc_type": self.doc_type,
            "valid_from": self.valid_from, "valid_to": self.valid_to, "deleted": self.deleted,
        }

    @classmethod
    def from_arrays(cls, tenant: str, groups: Iterable[str], doc_types: Iterable[str], arrays) -> "FilterColumns":
        """From ``filters.npz``'s arrays: ``acl_bits`` as stored, or an older shard's dense
        ``acl`` matrix packed here."""
        names = set(getattr(arrays, "files", None) or arrays.keys())
        bits = np.asarray(arrays["acl_bits"], dtype=np.uint8) if "acl_bits" in names \
            else pack_acl(np.asarray(arrays["acl"], dtype=bool))
        return cls(
            tenant=tenant, groups=tuple(groups), doc_types=tuple(doc_types),
            acl_bits=bits, public=np.asarray(arrays["public"], dtype=bool),
            doc_type=np.asarray(arrays["doc_type"]), valid_from=np.asarray(arrays["valid_from"]),
            valid_to=np.asarray(arrays["valid_to"]), deleted=np.asarray(arrays["deleted"], dtype=bool),
        )

    def mask(
        self,
        principal: Principal,
        doc_type: Sequence[str] | None = None,
        valid_at: dt.date | None = None,
    ) -> np.ndarray:
        """Rows this principal may see under the request filters. Unknown validity passes
        a ``valid_at`` filter (it is flagged 'unknown' downstream, never assumed current)."""
        if principal.tenant != self.tenant:
            return np.zeros(self.n, dtype=bool)
        m = self.public.copy()
        cols = [i for i, g in enumerate(self.groups) if g in principal.groups]
        if cols:
            granted = np.bitwise_or.reduce(self.acl_bits[cols], axis=0)
            m |= np.unpackbits(granted, count=self.n, bitorder="little").astype(bool)
        return m & self.request_mask(doc_type, valid_at)

    def request_mask(self, doc_type: Sequence[str] | None = None, valid_at: dt.date | None = None) -> np.ndarray:
        """The non-ACL part of the mask: tombstones, doc_type and valid_at."""
        m = ~self.deleted
        if doc_type is not None:
            codes = [i for i, t in enumerate(self.doc_types) if t in set(doc_type)]
            m &= np.isin(self.doc_type, np.array(codes, dtype=self.doc_type.dtype))
        if valid_at is not None:
            day = epoch_day(valid_at)
            too_early = (self.valid_from != NO_DAY) & (self.valid_from > day)
            too_late = (self.valid_to != NO_DAY) & (self.valid_to < day)
            m &= ~(too_early | too_late)
        return m


@dataclass(frozen=True)
class RowOverlay:
    """Changes applied over one shard since it was built (DESIGN §3 "Updates"): rows that
    are tombstoned (deleted, or replaced by a newer copy in the delta) and rows whose ACL
    was overridden. Folded into the principal's mask, so the legs need nothing else."""

    hidden: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    acl: tuple[tuple[tuple[str, ...], np.ndarray], ...] = ()  # (new acl, rows)

    @property
    def empty(self) -> bool:
        return not self.hidden.size and not self.acl

    def mask(self, cols: FilterColumns, principal: Principal, doc_type: Sequence[str] | None = None,
             valid_at: dt.date | None = None) -> np.ndarray:
        m = cols.mask(principal, doc_type, valid_at)
        if self.empty:
            return m
        if self.acl:
            req = cols.request_mask(doc_type, valid_at)
            for groups, rows in self.acl:
                m[rows] = req[rows] if principal.can_read(cols.tenant, groups) else False
        m[self.hidden] = False
        return m


def validity(env: Envelope, valid_at: dt.date | None) -> str | None:
    """'in_force' when a known bound places ``valid_at`` inside the range, 'unknown' when
    the passage carries no effective dates; None when the request had no valid_at."""
    if valid_at is None:
        return None
    if env.effective_from is None and env.effective_to is None:
        return "unknown"
    return "in_force"
