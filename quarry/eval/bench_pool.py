"""What the resolution pool costs: in-process searches of the serving workload with
``resolution_pool`` 0 (resolution over the delivered passages and their graph neighbours)
and the default (the ranked candidates up to 8 as well), interleaved one by one in one
process so machine noise falls on both; p50 and p95 per setting and the ratio. With
``--field out_of_force --valid-at DATE`` it measures the same way what deciding over the
passages outside ``valid_at`` costs (one more first stage per search).

    python -m quarry.eval.bench_pool --index-root ROOT [--requests 200] [--out FILE.md]
    python -m quarry.eval.bench_pool --index-root ROOT --field out_of_force --pools 0,2 --valid-at 2026-03-10

ROOT must hold the sample corpus's tenants (``quarry build quarry/sample_corpus``).
Bad input is one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from quarry.eval.serve_load import GROUPS, QUERIES, TOP_K, workload


FIELDS = ("resolution_pool", "out_of_force")  # the search settings this benchmark compares


def measure(root: str, requests: int, pools: Sequence[int], field: str = "resolution_pool",
            valid_at: dt.date | None = None) -> dict[int, list[float]]:
    """Milliseconds per search for each value of ``field``, the settings alternating per request."""
    import torch

    from quarry.core.embed.factory import embedder_for_index
    from quarry.core.index.shards import TenantIndex
    from quarry.core.records import Principal, SearchRequest
    from quarry.core.search.in_process import search
    from quarry.core.search.settings import SearchSettings

    torch.set_num_threads(1)  # as a replica runs (Ray sets OMP_NUM_THREADS from num_cpus)
    idx = {t: TenantIndex.load(root, t) for t in QUERIES}
    embedder = embedder_for_index(next(iter(idx.values())).manifest)
    who = {t: Principal(tenant=t, subject="bench", groups=frozenset(GROUPS)) for t in QUERIES}
    settings = {n: SearchSettings(**{field: n}) for n in pools}

    def one(t: str, q: str, n: int) -> float:
        t0 = time.perf_counter()
        search(idx[t], who[t], SearchRequest(query=q, top_k=TOP_K, valid_at=valid_at), embedder, settings[n])
        return (time.perf_counter() - t0) * 1000

    for t, q in workload(20):  # warm-up: model loads, mask caches
        for n in pools:
            one(t, q, n)
    out: dict[int, list[float]] = {n: [] for n in pools}
    for k, (t, q) in enumerate(workload(requests)):
        order = pools if k % 2 == 0 else tuple(reversed(pools))
        for n in order:
            out[n].append(one(t, q, n))
    return out


def to_markdown(ms: dict[int, list[float]], requests: int, field: str = "resolution_pool",
                valid_at: dt.date | None = None) -> str:
    base = min(ms)
    p50 = {n: float(np.percentile(v, 50)) for n, v in ms.items()}
    when = f", valid_at {valid_at.isoformat()}" if valid_at else ""
    lines = [f"# {field}: in-process search latency", "",
             f"{requests} searches per setting of the serving workload (sample corpus tenants, top_k {TOP_K}{when}), "
             "settings interleaved per search in one process; `python -m quarry.eval.bench_pool`.", "",
             f"| {field} | p50 ms | p95 ms | p50 / {field} {base} |", "| ---: | ---: | ---: | ---: |"]
    for n, v in sorted(ms.items()):
        lines.append(f"| {n} | {p50[n]:.1f} | {np.percentile(v, 95):.1f} | {p50[n] / p50[base]:.2f} |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m quarry.eval.bench_pool", description=__doc__.splitlines()[0])
    ap.add_argument("--index-root", required=True, help="index root holding the sample corpus tenants")
    ap.add_argument("--requests", type=int, default=200, help="searches per setting (default 200)")
    ap.add_argument("--pools", default="0,8", help="comma-separated values of --field (default 0,8)")
    ap.add_argument("--field", default="resolution_pool", choices=FIELDS,
                    help="the search setting compared (default resolution_pool)")
    ap.add_argument("--valid-at", default="", help="YYYY-MM-DD passed with every search (out_of_force needs one)")
    ap.add_argument("--out", default="", help="also write the Markdown table here")
    args = ap.parse_args(argv)
    try:
        pools = tuple(int(x) for x in args.pools.split(","))
    except ValueError:
        print(f"bench_pool: --pools must be comma-separated integers, not {args.pools!r}", file=sys.stderr)
        return 2
    try:
        valid_at = dt.date.fromisoformat(args.valid_at) if args.valid_at else None
    except ValueError:
        print(f"bench_pool: --valid-at must be a date YYYY-MM-DD, not {args.valid_at!r}", file=sys.stderr)
        return 2
    missing = [t for t in QUERIES if not (Path(args.index_root) / t).is_dir()]
    if args.requests < 1 or missing:
        print(f"bench_pool: {'--requests must be at least 1' if args.requests < 1 else 'no index for ' + ', '.join(missing)}"
              f" under {args.index_root}", file=sys.stderr)
        return 2
    md = to_markdown(measure(args.index_root, args.requests, pools, args.field, valid_at), args.requests,
                     args.field, valid_at)
    print(md)
    if args.out:
        Path(args.out).write_text(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
