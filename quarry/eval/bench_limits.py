"""Tenant isolation under a flood: tenant B's search latency alone, and while tenant A floods.

    python -m quarry.eval.bench_limits [--searches 80] [--flood-threads 6] [--out eval/results/limits.md]

In one run, on one deployed application (Ray in this process, ``bench_serve.deploy``):

1. builds the sample corpus into a temporary index root (``--embedder hashing`` by default:
   this measures admission, not the encoder);
2. deploys the Serve application with tenant limits: ``globex`` (tenant A) may make
   ``--flood-limit`` tool calls per minute; ``initech`` is given a limit it never reaches;
   ``acme`` (tenant B) has the default limits;
3. times tenant B's searches (one fresh run each, created before the clock starts; closed
   loop at ``--concurrency``) in four phases, each while another client does:
   - *alone*: nothing;
   - *A floods past its limit*: ``--flood-threads`` clients loop run + 3 searches as
     ``globex`` as fast as answers come (after its first ``--flood-limit`` calls in the
     minute, every call is a 429 from the limiter);
   - *a flood within its limit*: the same loop as ``initech``, whose limit is not reached,
     so every flood call is a real search: what B would see if A were not limited;
   - *an anonymous /healthz flood*: the same clients calling ``GET /healthz`` (no token, no
     work): what any flood of cheap HTTP calls costs on this machine (clients, proxy,
     Gateway), the floor under the "past its limit" row;
   - *alone* again (drift check); the two alone phases are pooled;
4. reports B's p50/p95 per phase and the ratios to alone, with the flood's call rate and
   status counts. Client threads, Ray and Serve share the machine's cores: a refused call is
   cheap, not free, and the ratio includes what 429s cost.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import secrets
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from quarry.eval.serve_load import GROUPS, QUERIES, TOP_K, percentile

VICTIM, FLOODER, ADMITTED = "acme", "globex", "initech"


def _token(secret: str, tenant: str, subject: str) -> str:
    from quarry.serve.http.auth import mint_token

    return mint_token(tenant, subject, GROUPS, secret=secret, ttl_s=3600)


def victim_searches(base: str, token: str, n: int, concurrency: int) -> dict[str, Any]:
    """``n`` searches of tenant B, one fresh run each (runs made before timing)."""
    import httpx

    auth = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=base, timeout=60) as c:
        runs = [c.post("/v1/runs", headers=auth).json()["run_id"] for _ in range(n)]
    local = threading.local()
    queries = QUERIES[VICTIM]

    def one(i: int) -> tuple[float, int]:
        if not hasattr(local, "c"):
            local.c = httpx.Client(base_url=base, timeout=60)
        c = local.c
        t0 = time.perf_counter()
        r = c.post("/v1/search", headers={**auth, "X-Quarry-Run": runs[i]},
                   json={"query": queries[i % len(queries)], "top_k": TOP_K})
        return (time.perf_counter() - t0) * 1000, r.status_code

    with ThreadPoolExecutor(concurrency) as ex:
        res = list(ex.map(one, range(n)))
    ok = [ms for ms, code in res if code == 200]
    return {"searches": n, "non_200": sum(1 for _, code in res if code != 200), "p50_ms": percentile(ok, 0.5),
            "p95_ms": percentile(ok, 0.95), "latencies_ms": [round(ms, 2) for ms, _ in res]}


class Flood:
    """``threads`` clients looping run + 3 searches as ``tenant`` until stopped."""

    def __init__(self, base: str, secret: str, tenant: str, threads: int, healthz: bool = False):
        self.base, self.tenant, self.threads, self.healthz = base, tenant, threads, healthz
        self.tokens = [_token(secret, tenant, f"flood-{i}") for i in range(threads)]
        self.codes: dict[int, int] = {}
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._workers: list[threading.Thread] = []

    def _loop(self, i: int) -> None:
        import httpx

        auth = {"Authorization": f"Bearer {self.tokens[i]}"}
        queries = QUERIES[self.tenant]
        with httpx.Client(base_url=self.base, timeout=60) as c:
            k = 0
            while not self._stop.is_set():
                if self.healthz:
                    code = c.get("/healthz").status_code
                    with self._lock:
                        self.codes[code] = self.codes.get(code, 0) + 1
                    continue
                r = c.post("/v1/runs", headers=auth)
                codes = [r.status_code]
                run = r.json().get("run_id", "none") if r.status_code == 200 else "none"
                for _ in range(3):
                    if self._stop.is_set():
                        break
                    k += 1
                    codes.append(c.post("/v1/search", headers={**auth, "X-Quarry-Run": run},
                                        json={"query": queries[k % len(queries)], "top_k": TOP_K}).status_code)
                with self._lock:
                    for code in codes:
                        self.codes[code] = self.codes.get(code, 0) + 1

    def __enter__(self) -> "Flood":
        self.t0 = time.perf_counter()
        self._workers = [threading.Thread(target=self._loop, args=(i,), daemon=True) for i in range(self.threads)]
        for w in self._workers:
            w.start()
        time.sleep(0.5)  # let the flood start before B is timed
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        for w in self._workers:
            w.join(60)
        self.wall_s = time.perf_counter() - self.t0

    def summary(self) -> dict[str, Any]:
        calls = sum(self.codes.values())
        return {"tenant": None if self.healthz else self.tenant, "healthz": self.healthz, "threads": self.threads, "calls": calls,
                "calls_per_s": round(calls / self.wall_s, 1), "status_counts": dict(sorted(self.codes.items()))}


def run(args) -> dict[str, Any]:
    from quarry.eval.bench_serve import build_index, deploy
    from quarry.serve import launch
    from quarry.serve.settings import AuthSettings, ServeSettings

    tmp = tempfile.TemporaryDirectory(prefix="quarry-bench-limits-")
    root = launch.absolute_root(str(Path(tmp.name) / "idx"))
    print("[bench] building the sample corpus ...", flush=True)
    build_index(root, args.embedder)
    secret = secrets.token_urlsafe(48)
    limits = {"window_s": 60, "overrides": {
        FLOODER: {"requests_per_tenant": args.flood_limit, "requests_per_subject": args.flood_limit},
        ADMITTED: {"requests_per_tenant": 10_000_000, "requests_per_subject": 10_000_000}}}
    settings = ServeSettings(index_root=root, auth=AuthSettings(hs256_secret=secret), ray_namespace="quarry-bench",
                             store_name_prefix="quarry-bench-limits", reranker_enabled=False, query_cache_size=0,
                             max_ongoing_requests=32, tenant_limits=limits, runs_open_per_subject=1_000_000,
                             runs_open_per_tenant=1_000_000, runs_kept_per_tenant=1_000_000)
    base = deploy(settings, "optimized", args.port or launch.free_port(), args.ray_cpus)
    victim = _token(secret, VICTIM, "agent-b")
    phases: dict[str, Any] = {}
    try:
        victim_searches(base, victim, 20, args.concurrency)  # warm-up: index loads on the replicas
        phases["alone_1"] = victim_searches(base, victim, args.searches, args.concurrency)
        with Flood(base, secret, FLOODER, args.flood_threads) as f:
            phases["a_floods_past_its_limit"] = victim_searches(base, victim, args.searches, args.concurrency)
        phases["a_floods_past_its_limit"]["flood"] = f.summary()
        with Flood(base, secret, ADMITTED, args.flood_threads) as f:
            phases["flood_within_its_limit"] = victim_searches(base, victim, args.searches, args.concurrency)
        phases["flood_within_its_limit"]["flood"] = f.summary()
        with Flood(base, secret, FLOODER, args.flood_threads, healthz=True) as f:
            phases["healthz_flood"] = victim_searches(base, victim, args.searches, args.concurrency)
        phases["healthz_flood"]["flood"] = f.summary()
        phases["alone_2"] = victim_searches(base, victim, args.searches, args.concurrency)
    finally:
        launch.stop()
    alone = [ms for k in ("alone_1", "alone_2") for ms in phases[k]["latencies_ms"]]
    phases["alone"] = {"searches": len(alone), "p50_ms": percentile(alone, 0.5), "p95_ms": percentile(alone, 0.95)}
    for k in ("a_floods_past_its_limit", "flood_within_its_limit", "healthz_flood"):
        phases[k]["p50_ratio"] = phases[k]["p50_ms"] / phases["alone"]["p50_ms"]
        phases[k]["p95_ratio"] = phases[k]["p95_ms"] / phases["alone"]["p95_ms"]
    return phases


def markdown(phases: dict[str, Any], meta: dict[str, Any]) -> str:
    out = ["# Tenant limits: tenant B's search latency alone and while tenant A floods", "",
           f"Command: `{meta['command']}`  ",
           f"Machine: {meta['machine']}; the flood clients, B's client, Ray and Serve share these cores.  ",
           f"Setup: the sample corpus, embedder `{meta['embedder']}`, second stage off, one Gateway and one Retriever "
           f"replica (in-memory limiter). B (`{VICTIM}`): {meta['searches']} searches per phase at concurrency "
           f"{meta['concurrency']}, a fresh run each. Flood: {meta['flood_threads']} clients looping run + 3 searches; "
           f"A (`{FLOODER}`) limited to {meta['flood_limit']} calls per minute, `{ADMITTED}` never limited.  ",
           f"Measured {meta['date']}; one run (1/5/15-min load average at the end: {meta['load']}).", "",
           "| phase | B searches | B non-200 | B p50 ms | B p95 ms | p50 / alone | p95 / alone | flood calls/s "
           "| flood statuses |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    rows = [("alone (two phases pooled)", "alone"), ("A floods past its limit", "a_floods_past_its_limit"),
            ("a flood within its limit (no limit reached)", "flood_within_its_limit"),
            ("an anonymous GET /healthz flood (no work)", "healthz_flood")]
    for title, k in rows:
        p = phases[k]
        fl = p.get("flood")
        out.append(f"| {title} | {p['searches']} | {p.get('non_200', sum(phases[x]['non_200'] for x in ('alone_1', 'alone_2')))} "
                   f"| {p['p50_ms']:.1f} | {p['p95_ms']:.1f} | {p.get('p50_ratio', 1.0):.2f}x | "
                   f"{p.get('p95_ratio', 1.0):.2f}x | {fl['calls_per_s'] if fl else ''} | "
                   f"{', '.join(f'{c}: {n}' for c, n in fl['status_counts'].items()) if fl else ''} |")
    out += ["", "The flood clients run the same loop in every flood phase and send as fast as answers come, so "
            "the refused flood (cheap answers) sends more calls per second than the admitted one (real searches). "
            "Read the refused row against the /healthz row: what remains above it is what the limiter's refusal "
            "costs beyond any HTTP call.", "", f"Drift: alone before {phases['alone_1']['p50_ms']:.1f} / {phases['alone_1']['p95_ms']:.1f} ms, "
            f"after {phases['alone_2']['p50_ms']:.1f} / {phases['alone_2']['p95_ms']:.1f} ms (p50 / p95).", ""]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m quarry.eval.bench_limits", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    p.add_argument("--searches", type=int, default=80, help="tenant B's searches per phase (default 80)")
    p.add_argument("--concurrency", type=int, default=2, help="tenant B's client concurrency (default 2)")
    p.add_argument("--flood-threads", type=int, default=6, help="flooding clients (default 6)")
    p.add_argument("--flood-limit", type=int, default=30, help="tenant A's calls per minute (default 30)")
    p.add_argument("--embedder", default="hashing", help="'hashing' (default) or a model dir")
    p.add_argument("--ray-cpus", type=int, default=2, help="CPUs for the in-process Ray (default 2)")
    p.add_argument("--port", type=int, default=0, help="loopback port (default: a free one)")
    p.add_argument("--out", default="eval/results/limits.md", help="Markdown table to write ('' = none)")
    p.add_argument("--json", default="eval/results/limits.json", help="raw results ('' = none)")
    args = p.parse_args(argv)
    if min(args.searches, args.concurrency, args.flood_threads, args.flood_limit) < 1:
        p.error("--searches, --concurrency, --flood-threads and --flood-limit must be at least 1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    phases = run(args)
    meta = {"command": ("python -m quarry.eval.bench_limits " + " ".join(argv if argv is not None else
                                                                         __import__("sys").argv[1:])).strip(),
            "machine": f"{platform.machine()}, {os.cpu_count()} cores", "embedder": args.embedder,
            "searches": args.searches, "concurrency": args.concurrency, "flood_threads": args.flood_threads,
            "flood_limit": args.flood_limit, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "load": " / ".join(f"{x:.1f}" for x in os.getloadavg())}
    text = markdown(phases, meta)
    print(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text)
    if args.json:
        slim = {k: {kk: vv for kk, vv in v.items() if kk != "latencies_ms"} for k, v in phases.items()}
        Path(args.json).write_text(json.dumps({"meta": meta, "phases": slim}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
