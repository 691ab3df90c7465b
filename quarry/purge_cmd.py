"""``quarry purge``: remove a document, or a whole tenant, from every copy under the index
root (``quarry.jobs.purge``): a new generation without the document, every older generation
and delta deleted, quarantine/reconcile/trace lines scrubbed, and a purge epoch that makes
every serving replica drop its in-memory and local copies within ``generation_check_ms``
plus one reload (docs/operations.md, "Purge")."""

from __future__ import annotations

import argparse

from quarry.core.errors import UsageError


def add_arguments(p: argparse.ArgumentParser) -> None:
    from quarry.core.index.lease import DEFAULT_WAIT_S

    p.add_argument("--index-root", required=True, help="the published index root (path or fsspec URI)")
    p.add_argument("--tenant", required=True, help="the tenant whose data is purged")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--doc-id", help="purge this document (every version, unless --version)")
    what.add_argument("--all", action="store_true", help="purge the whole tenant")
    p.add_argument("--version", default=None, help="with --doc-id: purge only this version of the document")
    p.add_argument("--trace-dir", action="append", default=[],
                   help="a trace or run-store folder outside the index root to scrub too (repeatable)")
    p.add_argument("--lease-wait-s", type=float, default=DEFAULT_WAIT_S,
                   help=f"wait this long for another writer of the tenant to finish (default {DEFAULT_WAIT_S:g})")
    p.add_argument("--json", action="store_true", help="print the purge report as JSON")


def run(args: argparse.Namespace) -> int:
    from quarry.jobs.purge import as_json, purge_document, purge_tenant, report_line

    if args.version and not args.doc_id:
        raise UsageError("--version needs --doc-id")
    if args.all:
        rep = purge_tenant(args.index_root, args.tenant, lease_wait_s=args.lease_wait_s, extra_dirs=args.trace_dir)
    else:
        rep = purge_document(args.index_root, args.tenant, args.doc_id, args.version,
                             lease_wait_s=args.lease_wait_s, extra_dirs=args.trace_dir)
    print(as_json(rep) if args.json else report_line(rep))
    return 0
