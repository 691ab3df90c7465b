"""``quarry gc``: delete a tenant's generations and delta folders that retention does not
keep (``quarry.core.index.retention``: CURRENT, the newest ``--retain-generations - 1``
published ones below it, any above it, and what the live DELTA names), under the tenant's
writer lease."""

from __future__ import annotations

import argparse
import json

from quarry.core.errors import UsageError


def add_arguments(p: argparse.ArgumentParser) -> None:
    from quarry.core.index.lease import DEFAULT_WAIT_S
    from quarry.core.index.retention import DEFAULT_RETAIN

    p.add_argument("--index-root", required=True, help="the published index root (path or fsspec URI)")
    who = p.add_mutually_exclusive_group(required=True)
    who.add_argument("--tenant", help="collect this tenant")
    who.add_argument("--all", action="store_true", help="collect every published tenant")
    p.add_argument("--retain-generations", type=int, default=DEFAULT_RETAIN,
                   help=f"published generations kept, CURRENT included (default {DEFAULT_RETAIN}: one to roll back to)")
    p.add_argument("--lease-wait-s", type=float, default=DEFAULT_WAIT_S,
                   help=f"wait this long for another writer of the tenant (default {DEFAULT_WAIT_S:g})")
    p.add_argument("--json", action="store_true", help="print one JSON report per tenant")


def run(args: argparse.Namespace) -> int:
    from quarry.core.index import layout
    from quarry.core.index.lease import tenant_lease
    from quarry.core.index.retention import collect

    if args.retain_generations < 1:
        raise UsageError("--retain-generations must be at least 1 (CURRENT is always kept)")
    tenants = layout.list_tenants(args.index_root) if args.all else [args.tenant]
    if not args.all and layout.current_generation(args.index_root, args.tenant) is None:
        raise UsageError(f"no published index for tenant {args.tenant!r} under {args.index_root}")
    for t in tenants:
        with tenant_lease(args.index_root, t, "gc", wait_s=args.lease_wait_s):
            rep = collect(args.index_root, t, args.retain_generations)
        print(json.dumps(rep.model_dump(), sort_keys=True) if args.json else
              f"{t}: current={rep.current} kept={rep.kept_generations} deleted_generations={rep.deleted_generations} "
              f"deleted_deltas={rep.deleted_deltas}")
    return 0
