"""``quarry rollback``: make another complete generation of a tenant live
(``quarry.core.index.pointers.rollback``, the admin API's rollback): the delta that
generation was served with is restored, or the rollback is refused with one line (exit 2)
when compaction or retention removed it."""

from __future__ import annotations

import argparse
import json

from quarry.core.errors import UsageError


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--index-root", required=True, help="the published index root (path or fsspec URI)")
    p.add_argument("--tenant", required=True, help="the tenant to roll back")
    p.add_argument("--generation", type=int, required=True, help="the generation to make live")
    p.add_argument("--lease-wait-s", type=float, default=10.0, help="wait this long for another writer (default 10)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")


def run(args: argparse.Namespace) -> int:
    from quarry.core.index.pointers import RollbackRefused, rollback

    try:
        r = rollback(args.index_root, args.tenant, args.generation, wait_s=args.lease_wait_s)
    except RollbackRefused as e:
        raise UsageError(f"tenant {args.tenant!r} not found under {args.index_root}" if e.status == 404
                         else f"{args.tenant}: {e}") from None
    print(json.dumps(r.__dict__, sort_keys=True) if args.json else
          f"{r.tenant}: gen-{r.previous} -> gen-{r.generation} restored_delta={r.restored_delta} "
          f"retired_delta={r.retired_delta}")
    return 0
