"""``quarry compact --tenant T --index-root URI``: fold a tenant's delta generation,
tombstones and ACL overrides into a new base generation (``quarry.core.changes.compact``) and
switch ``CURRENT`` atomically. Safe to kill at any point: the new generation is published
only after its manifest and checksums are complete, and only if no change was applied
meanwhile; a re-run starts a fresh generation folder.

The fold runs in one process: it reads stored passages and embeddings (nothing is
re-embedded), so it costs a shard rebuild, not a build.
"""

from __future__ import annotations

import argparse
import json
import time

from quarry.core.errors import UsageError
from quarry.core.index import layout
from quarry.core.index.lease import DEFAULT_WAIT_S, tenant_lease
from quarry.core.index.retention import DEFAULT_RETAIN, collect
from quarry.core.changes.compact import compaction_input, publish_compacted, write_compacted
from quarry.core.index.shards import TenantIndex
from quarry.core.rank.carry_over import carry_over
from quarry.jobs.report import Progress, new_run_id


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tenant", required=True, help="the tenant to compact")
    p.add_argument("--index-root", required=True, help="the published index root")
    p.add_argument("--lease-wait-s", type=float, default=DEFAULT_WAIT_S,
                   help=f"wait this long for another writer of the tenant (default {DEFAULT_WAIT_S:g})")
    p.add_argument("--retain-generations", type=int, default=DEFAULT_RETAIN,
                   help=f"published generations kept after the switch, CURRENT included (default {DEFAULT_RETAIN})")
    p.add_argument("--json", action="store_true", help="print the outcome as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress lines")


def compact_tenant(root: str, tenant: str, quiet: bool = True, lease_wait_s: float = DEFAULT_WAIT_S,
                   retain: int = DEFAULT_RETAIN) -> dict:
    """Fold and publish under the tenant's writer lease, then collect past-retention generations."""
    t0 = time.monotonic()
    prog = Progress(new_run_id(), quiet=quiet, job="compact")
    try:
        with tenant_lease(root, tenant, "compact", wait_s=lease_wait_s) as held:
            prog.start("read")
            index = TenantIndex.load(root, tenant)
            if index.delta is None:
                return {"tenant": tenant, "compacted": False, "generation": index.generation,
                        "reason": "no changes applied since this generation was built"}
            ci = compaction_input(index)
            prog.done("read", {"passages": len(ci.passages)})
            prog.start("build")
            gen = write_compacted(ci)
            prog.done("build", {"generation": gen})
            prog.start("second-stage")  # a promoted learned ranker is carried over and re-gated, never dropped silently
            carried = carry_over(root, tenant, index.generation, gen)
            prog.done("second-stage", {"carried": carried is not None})
            prog.start("publish")
            held.ensure()
            publish_compacted(index, gen)
            gc = collect(root, tenant, retain)
            prog.done("publish", {})
    finally:
        prog.close()
    return {"tenant": tenant, "compacted": True, "from_generation": index.generation, "delta": index.delta_seq,
            "generation": gen, "passages": len(ci.passages), "parents": len(ci.parents),
            "current": layout.current_generation(root, tenant), "deleted_generations": gc.deleted_generations,
            "deleted_deltas": gc.deleted_deltas,
            "second_stage": carried.summary() if carried is not None else None,
            "seconds": round(time.monotonic() - t0, 3)}


def run(args: argparse.Namespace) -> int:
    if layout.current_generation(args.index_root, args.tenant) is None:
        raise UsageError(f"no published index for tenant {args.tenant!r} under {args.index_root} "
                         f"(check --tenant and --index-root)")
    out = compact_tenant(args.index_root, args.tenant, quiet=args.quiet, lease_wait_s=args.lease_wait_s,
                         retain=args.retain_generations)
    print(json.dumps(out, sort_keys=True) if args.json else
          " ".join(f"{k}={v}" for k, v in out.items()))
    return 0
