"""Request load for the serving benchmarks: the query workload over the sample corpus, the
in-process and paired in-process/HTTP timings, and a closed-loop HTTP load at a concurrency.
Used by :mod:`quarry.eval.bench_serve`."""

from __future__ import annotations

import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from quarry.serve.http.auth import mint_token


QUERIES: dict[str, list[str]] = {
    "acme": ["Which settlement cutoff applies to Acme's EUR batch?", "E-4471", "refund window for orders",
             "Why did Acme's January reconciliation fail?", "payout_batch_v2 migration", "INC-2291 duplicate payouts",
             "webhook signature errors", "ledger service rollout v2.3.1"],
    "globex": ["Does the Pro plan include SSO?", "Security add-on SSO price", "chargeback fee", "CM-2026-014",
               "payout schedule", "API rate limits", "INC-3107 payout delay", "Globex settlement cutoff"],
    "initech": ["Initech settlement cutoff", "INC-1877 payroll delay", "refund policy", "credit line",
                "Security add-on price", "error code E-4471", "incident policy", "payout schedule"],
}
GROUPS = ("all-staff", "support", "engineering")
TOP_K = 4


def percentile(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    s = sorted(xs)
    i = min(len(s) - 1, max(0, int(round(q * (len(s) - 1)))))
    return s[i]


def workload(n: int) -> list[tuple[str, str]]:
    pairs = [(t, q) for t in sorted(QUERIES) for q in QUERIES[t]]
    return [pairs[i % len(pairs)] for i in range(n)]



def in_process(one, requests: list[tuple[str, str]]) -> dict[str, Any]:
    lat = []
    for t, q in requests:
        t0 = time.perf_counter()
        one(t, q)
        lat.append((time.perf_counter() - t0) * 1000)
    return {"p50_ms": percentile(lat, 0.5), "p95_ms": percentile(lat, 0.95), "n": len(lat)}


def _tokens(secret: str, requests: list[tuple[str, str]]) -> dict[str, str]:
    """One benchmark token per tenant in the workload."""
    return {t: mint_token(t, "bench", GROUPS, secret=secret, ttl_s=3600) for t in sorted({t for t, _ in requests})}


def paired(base: str, secret: str, one, requests: list[tuple[str, str]]) -> dict[str, Any]:
    """Each search in-process then over HTTP, one after the other, so both see the same
    load from the rest of the machine: the ratio of their p50s and the median of the
    per-search ratios."""
    import httpx

    tokens = _tokens(secret, requests)
    ip, http, ratios = [], [], []
    with httpx.Client(base_url=base, timeout=60) as c:
        runs = [c.post("/v1/runs", headers={"Authorization": f"Bearer {tokens[t]}"}).json()["run_id"]
                for t, _ in requests]
        for (t, q), run in zip(requests, runs):
            t0 = time.perf_counter()
            one(t, q)
            t1 = time.perf_counter()
            r = c.post("/v1/search", headers={"Authorization": f"Bearer {tokens[t]}", "X-Quarry-Run": run},
                       json={"query": q, "top_k": TOP_K})
            t2 = time.perf_counter()
            r.raise_for_status()
            ip.append((t1 - t0) * 1000)
            http.append((t2 - t1) * 1000)
            ratios.append((t2 - t1) / (t1 - t0))
    return {"n": len(ip), "in_process_p50_ms": percentile(ip, 0.5), "http_p50_ms": percentile(http, 0.5),
            "ratio_of_p50": percentile(http, 0.5) / percentile(ip, 0.5), "median_ratio": statistics.median(ratios)}


# ----------------------------------------------------------------------------- HTTP

def http_load(base: str, secret: str, requests: list[tuple[str, str]], concurrency: int) -> dict[str, Any]:
    import httpx

    tokens = _tokens(secret, requests)
    local = threading.local()

    def client() -> httpx.Client:
        c = getattr(local, "c", None)
        if c is None:
            c = local.c = httpx.Client(base_url=base, timeout=60)
        return c

    def new_run(t: str) -> str:
        r = client().post("/v1/runs", headers={"Authorization": f"Bearer {tokens[t]}"})
        r.raise_for_status()
        return r.json()["run_id"]

    # One fresh run per search, created before the clock starts: the budget stays the
    # server's (3 per run) and the timed requests are searches only.
    with ThreadPoolExecutor(max(4, concurrency)) as ex:
        runs = list(ex.map(lambda tq: new_run(tq[0]), requests))
    notes: dict[str, int] = {}
    follow = [0]  # searches whose resolution ran contradiction-search queries (each one encodes)
    lock = threading.Lock()

    def one(i: int) -> tuple[float, int]:
        t, q = requests[i]
        h = {"Authorization": f"Bearer {tokens[t]}", "X-Quarry-Run": runs[i]}
        t0 = time.perf_counter()
        try:
            r = client().post("/v1/search", headers=h, json={"query": q, "top_k": TOP_K})
            code = r.status_code
        except httpx.HTTPError:
            return (time.perf_counter() - t0) * 1000, 599
        ms = (time.perf_counter() - t0) * 1000
        if code == 200:
            stages = r.json()["stages"]
            note = next((s["note"] for s in stages if s["name"] == "rerank"), "")
            searched = "follow-up" in next((s["note"] for s in stages if s["name"] == "resolve"), "")
            with lock:
                notes[note] = notes.get(note, 0) + 1
                follow[0] += searched
        return ms, code

    t_start = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as ex:
        res = list(ex.map(one, range(len(requests))))
    wall = time.perf_counter() - t_start
    ok = [ms for ms, code in res if code == 200]
    return {"concurrency": concurrency, "requests": len(res), "errors": sum(1 for _, c in res if c != 200),
            "p50_ms": percentile(ok, 0.5), "p95_ms": percentile(ok, 0.95), "throughput_rps": len(res) / wall,
            "rerank_notes": notes, "with_follow_ups": follow[0]}
