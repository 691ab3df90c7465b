"""``quarry status --index-root URI [--changes URI]``: per tenant, the live generation and
delta, how many changes were applied, the source-change-to-visible lag (p50/p95/max over the
recent changes) and, given the change log, the age of the oldest change not yet applied."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import time
from pathlib import Path

from quarry.core.changes.delta import current_state, fold_for
from quarry.core.changes.log import lag_summary, read_changes
from quarry.core.errors import UsageError
from quarry.core.index import layout
from quarry.core.index.shards import TenantIndex


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--index-root", required=True, help="the published index root")
    p.add_argument("--changes", default=None, help="the change log (file or folder): report unapplied changes")
    p.add_argument("--json", action="store_true", help="print JSON")


def tenant_status(root: str, tenant: str, changes=None, now: float | None = None) -> dict:
    now = time.time() if now is None else now
    index = TenantIndex.load(root, tenant)
    state = current_state(index)
    out = {"generation": index.generation, "delta": index.delta_seq, "changes_applied": state.applied,
           "lag": lag_summary(state),
           "last_published_age_s": round(now - state.published_at, 3) if state.published_at else None}
    if changes is not None:
        mine = [c for c in changes if c.tenant == tenant]
        outcomes = fold_for(index, mine).outcomes if mine else {}
        pending = [c for c in mine if outcomes.get(c.change_id) == "applied"]  # would apply: not applied yet
        out["unapplied"] = len(pending)
        out["oldest_unapplied_age_s"] = round(now - min(c.at.timestamp() for c in pending), 3) if pending else None
    return out


def run(args: argparse.Namespace) -> int:
    tenants = layout.list_tenants(args.index_root)
    if not tenants:
        raise UsageError(f"--index-root {args.index_root}: no published index")
    changes = None
    if args.changes:
        if not Path(args.changes).exists():
            raise UsageError(f"--changes {args.changes}: no such file or directory")
        changes, _bad = read_changes(args.changes)
    rep = {t: tenant_status(args.index_root, t, changes) for t in tenants}
    if args.json:
        print(json.dumps(rep, indent=2, sort_keys=True))
        return 0
    cols = ["tenant", "gen", "delta", "applied", "lag_p50_s", "lag_p95_s", "lag_max_s", "unapplied", "oldest_unapplied_s"]
    print("  ".join(cols))
    for t, r in rep.items():
        lag = r["lag"]
        print("  ".join(str(x) for x in (t, r["generation"], r["delta"], r["changes_applied"], lag["p50_s"],
                                          lag["p95_s"], lag["max_s"], r.get("unapplied", "-"),
                                          r.get("oldest_unapplied_age_s", "-"))))
    print(f"(as of {dt.datetime.now(dt.timezone.utc).isoformat(timespec='seconds')})")
    return 0
