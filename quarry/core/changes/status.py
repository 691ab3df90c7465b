"""A tenant's change lag read from small files only (no index loaded): the applied state
named by the ``DELTA`` watermark, and how much of a change log it has not applied yet.
What the admin API's tenant list reports; ``quarry status`` computes the same with the
index loaded."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from quarry.core.changes.log import TenantState, lag_summary, parse_state, pending_changes, read_changes
from quarry.core.index import layout


def applied_state(root: str, tenant: str) -> TenantState | None:
    """The fold of every change applied to ``tenant`` (the state the watermark names), or
    None when no change was ever applied."""
    parsed = layout.parse_watermark(layout.read_watermark(root, tenant))
    if parsed is None:
        return None
    fs, path = layout.fs_and_path(layout.join(layout.delta_dir(root, tenant, parsed[0]), "state.json"))
    with fs.open(path, "r") as f:
        return parse_state(f.read())


@dataclass(frozen=True)
class ChangeLag:
    watermark: str | None  # "delta-<m> gen-<n>", or None
    delta_applies: bool  # the watermark's base is the live generation (its delta is served)
    changes_applied: int
    lag: dict[str, Any]  # p50/p95/max seconds from source change to visible
    unapplied: int | None  # changes in the log not applied yet (None: no log given)
    oldest_unapplied_age_s: float | None
    invalid_changes: int | None  # records in the log that would be quarantined

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def change_lag(root: str, tenant: str, live_generation: int | None, log_uri: str | None = None,
               now: float | None = None) -> ChangeLag:
    """``tenant``'s applied watermark against the change log at ``log_uri`` (a file or folder
    of change files; absent: no pending figures)."""
    now = time.time() if now is None else now
    watermark = layout.read_watermark(root, tenant)
    parsed = layout.parse_watermark(watermark)
    state = applied_state(root, tenant)
    base = state or TenantState(tenant=tenant, base=live_generation or 0)
    unapplied = oldest = invalid = None
    if log_uri is not None:
        fs, path = layout.fs_and_path(log_uri)
        changes, bad = read_changes(path) if fs.exists(path) else ([], [])
        pending = pending_changes(base, changes)
        unapplied, invalid = len(pending), len(bad)
        oldest = round(now - min(c.at.timestamp() for c in pending), 3) if pending else None
    return ChangeLag(watermark=watermark, delta_applies=parsed is not None and parsed[1] == live_generation,
                     changes_applied=base.applied, lag=lag_summary(base), unapplied=unapplied,
                     oldest_unapplied_age_s=oldest, invalid_changes=invalid)
