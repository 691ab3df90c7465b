"""``quarry reconcile --source URI --index-root URI``: compare the source of truth with each
tenant's served index (documents, versions, ACLs, text) and repair the drift through the
same change path as ``apply-changes``: the repairs are written as a change log under
``<index-root>/_reconcile/<run-id>/`` and applied by the PySpark job (or in-process with
``--apply in-process``). Prints per tenant what was missing, extra, stale ACL or changed.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
from pathlib import Path

from quarry.core.errors import UsageError
from quarry.core.index import layout
from quarry.core.index.lease import tenant_lease
from quarry.core.ingest.contextualize_factory import make_contextualizer
from quarry.core.changes.delta import apply_local, upsert_contextualizer
from quarry.core.embed.factory import embedder_for_index
from quarry.core.index.shards import TenantIndex
from quarry.core.changes.reconcile import diff
from quarry.core.ingest.sources import load_documents
from quarry.jobs.report import new_run_id


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--source", required=True, help="the source of truth: JSONL/Parquet/Markdown file or folder")
    p.add_argument("--index-root", required=True, help="the published index root")
    p.add_argument("--tenants", default=None, help="comma-separated tenants (default: every published one)")
    p.add_argument("--dry-run", action="store_true", help="report the drift, repair nothing")
    p.add_argument("--apply", choices=("spark", "in-process"), default="spark",
                   help="how repairs are applied (default: the PySpark apply-changes job)")
    p.add_argument("--master", default=None, help="Spark master for --apply spark")
    p.add_argument("--json", action="store_true")


def reconcile(source: str, root: str, tenants=None, dry_run: bool = False, apply: str = "spark", master=None,
              spark=None) -> dict:

    docs, bad = load_documents(source)
    by_tenant: dict[str, list] = {}
    for d in docs:
        by_tenant.setdefault(d.tenant, []).append(d)
    published = layout.list_tenants(root)
    wanted = sorted(tenants or published)
    at = dt.datetime.now(dt.timezone.utc)
    run_id = new_run_id(at)
    report: dict = {"run_id": run_id, "source_invalid": len(bad), "tenants": {}}
    repairs = []
    for t in wanted:
        if t not in published:
            report["tenants"][t] = {"error": "no published index (run quarry build)"}
            continue
        drift = diff(TenantIndex.load(root, t), by_tenant.get(t, []), at)
        report["tenants"][t] = {**drift.counts(), "missing_ids": list(drift.missing)[:20],
                                "extra_ids": list(drift.extra)[:20], "stale_acl_ids": list(drift.stale_acl)[:20],
                                "changed_ids": list(drift.changed)[:20], "repairs": len(drift.changes)}
        repairs.extend(drift.changes)
    report["unindexed_tenants"] = sorted(set(by_tenant) - set(published))
    if dry_run or not repairs:
        report["repaired"] = False
        return report
    log_dir = layout.join(root, "_reconcile", run_id)
    layout.write_atomic(layout.join(log_dir, "changes.jsonl"),
                        "".join(c.model_dump_json(exclude_none=True) + "\n" for c in repairs).encode())
    report["repair_log"] = log_dir
    if apply == "spark":
        from quarry.jobs.apply_changes import ApplySettings, apply_records  # defers pyspark: the local path needs none

        # the repairs are in hand: handed to Spark as rows (the log under the root, possibly
        # s3://, is the audit record; no executor has to read it)
        rep = apply_records(ApplySettings(changes=log_dir, index_root=root, master=master, quiet=True),
                            [json.loads(c.model_dump_json(exclude_none=True)) for c in repairs], spark=spark)
        applied = {t: tr.applied for t, tr in rep.tenants.items()}
    else:
        applied = _apply_in_process(root, repairs)
    for t, n in applied.items():
        if t in report["tenants"]:
            report["tenants"][t]["applied"] = n
    report["repaired"] = True
    return report


def _apply_in_process(root: str, repairs) -> dict[str, int]:
    out = {}
    for t in sorted({c.tenant for c in repairs}):
        with tenant_lease(root, t, "reconcile"):
            index = TenantIndex.load(root, t)
            emb = embedder_for_index(index.manifest)
            choice = upsert_contextualizer(index.manifest)
            key = os.environ.get(choice.llm.api_key_env) if choice.llm is not None and choice.llm.api_key_env else None
            ctx = make_contextualizer(choice.kind, llm=choice.llm, api_key=key)
            _, res = apply_local(root, t, [c for c in repairs if c.tenant == t], emb, ctx,
                                 contextualizer_record=choice.record())
        out[t] = sum(o == "applied" for o in res.outcomes.values())
    return out


def run(args: argparse.Namespace) -> int:
    if not Path(args.source).exists():
        raise UsageError(f"--source {args.source}: no such file or directory")
    rep = reconcile(args.source, args.index_root, args.tenants.split(",") if args.tenants else None,
                    args.dry_run, args.apply, args.master)
    if args.json:
        print(json.dumps(rep, indent=2, sort_keys=True))
        return 0
    for t, r in sorted(rep["tenants"].items()):
        if "error" in r:
            print(f"{t}: {r['error']}")
            continue
        print(f"{t}: missing={r['missing']} extra={r['extra']} stale_acl={r['stale_acl']} changed={r['changed']} "
              f"repairs={r['repairs']} applied={r.get('applied', 0 if not rep['repaired'] else '-')}")
    if rep["unindexed_tenants"]:
        print(f"tenants in the source without an index: {', '.join(rep['unindexed_tenants'])}")
    return 0
