"""``quarry eval traces``: summarise stored serving traces (``quarry/serve/stores/tracestore.py``).

    quarry eval traces --trace-dir var/index/_traces [--tenant acme] [--since-hours 24] [--json]

Per tenant: searches, answers and abstentions (by reason code), candidates and delivered
passages per search, and per-stage latency percentiles from ``timings_ms``: the numbers a
workload profile for capacity planning starts from. Reads ids and numbers only; traces
hold no passage text.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any


def _pct(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    s = sorted(xs)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def summarise(records) -> dict[str, Any]:
    by_tenant: dict[str, dict[str, Any]] = defaultdict(lambda: {
        "kinds": Counter(), "reasons": Counter(), "candidates": [], "delivered": [], "timings": defaultdict(list)})
    for r in records:
        t = by_tenant[r.get("tenant", "?")]
        t["kinds"][r.get("kind", "?")] += 1
        if r.get("reason"):
            t["reasons"][r["reason"]] += 1
        if r.get("kind") == "search":
            t["candidates"].append(len(r.get("candidates") or []))
            t["delivered"].append(len(r.get("delivered") or []))
            for stage, ms in (r.get("timings_ms") or {}).items():
                t["timings"][stage].append(float(ms))
    out = {}
    for tenant, t in sorted(by_tenant.items()):
        out[tenant] = {
            "records": dict(t["kinds"]),
            "abstention_reasons": dict(t["reasons"]),
            "candidates_mean": statistics.fmean(t["candidates"]) if t["candidates"] else None,
            "delivered_mean": statistics.fmean(t["delivered"]) if t["delivered"] else None,
            "timings_ms": {s: {"p50": _pct(xs, 0.5), "p95": _pct(xs, 0.95), "n": len(xs)}
                           for s, xs in sorted(t["timings"].items())},
        }
    return out


def add_arguments(p) -> None:
    p.add_argument("--trace-dir", required=True, help="the serving trace folder (default <index_root>/_traces)")
    p.add_argument("--tenant", default=None, help="one tenant (default: all)")
    p.add_argument("--since-hours", type=float, default=None, help="only traces newer than this many hours")
    p.add_argument("--kind", default=None, choices=["search", "answer", "abstention"], help="only this kind")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")


def run(args) -> int:
    from quarry.serve.stores.tracestore import read_traces

    if not Path(args.trace_dir).is_dir():
        print(f"quarry eval traces: no trace folder at {args.trace_dir}; pass the serving trace_dir "
              "(default <index_root>/_traces)", file=sys.stderr)
        return 2
    since = time.time() - args.since_hours * 3600 if args.since_hours is not None else None
    summary = summarise(read_traces(args.trace_dir, args.tenant, since=since, kind=args.kind))
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    for tenant, s in summary.items():
        print(f"{tenant}: {s['records']}  abstentions {s['abstention_reasons'] or '{}'}  "
              f"candidates/search {s['candidates_mean']}  delivered/search {s['delivered_mean']}")
        for stage, v in s["timings_ms"].items():
            print(f"  {stage:<12} p50 {v['p50']:.2f} ms  p95 {v['p95']:.2f} ms  (n={v['n']})")
    if not summary:
        print("no traces matched")
    return 0
