"""Tenant-scale benchmark, in-process part: N small tenants (10 documents each, built with
the in-process pipeline and the hashing embedder), the cold-load time of a tenant from local
disk (``TenantIndex.load``, p50/p95) and the resident memory per loaded small tenant (RSS
delta over all loaded tenants / N, next to the index's own byte estimate).

With ``--http``: the real Serve app (``quarry.serve.launch.start``) over loopback HTTP, a
closed-loop load at ``--concurrency`` for one hot tenant, working sets of 8, 64 and 512
tenants, and a uniform spread over all, in the same run (p50/p95 and ratios to the hot p50,
and to the hot tenant's p50 measured right before and after each phase: its paired baseline);
errors, and cross-tenant leaks (a delivered passage whose id is not the caller's tenant's).

With ``--routing``: ``--replicas`` Retriever replicas of ``--routing-lru`` tenants each and a
working set of ``--routing-working-set`` tenants (more than one replica holds, fewer than all
do), searched with tenant routing on (the tenant as Serve's multiplexed model id) and off
(``ServeSettings.tenant_routing``: Serve's default routing); p50/p95 and tenant loads per
search summed over the replicas' counters.

    python -m quarry.eval.bench_tenants --tenants 1000 --root var/bench-tenants --http --out eval/results/tenants
    python -m quarry.eval.bench_tenants --tenants 64 --root var/bench-route --routing --requests 400 --out eval/results/tenant_routing
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import threading
import time
from pathlib import Path

from quarry.eval.serve_load import percentile

WORDS = ("ledger", "payout", "refund", "cutoff", "invoice", "webhook", "migration", "incident", "policy", "batch")


def _docs(tenant: str, n_docs: int):
    from quarry.core.records import SourceDocument

    return [SourceDocument(doc_id=f"{tenant}-d{i}", tenant=tenant, acl=("*",) if i % 3 else ("eng",), doc_type="note",
                           title=f"{tenant} doc {i}",
                           text=f"{tenant} {WORDS[i % len(WORDS)]} note {i}: the {WORDS[(i * 7) % len(WORDS)]} "
                                f"for {tenant} runs daily at {10 + i % 8}:00 UTC.")
            for i in range(n_docs)]


def build(root: str, tenants: int, n_docs: int) -> float:
    from quarry.core.embed.embedders import HashingEmbedder
    from quarry.core.index import layout
    from quarry.core.ingest.pipeline import build_corpus

    emb = HashingEmbedder(dim=64)
    t0 = time.perf_counter()
    docs = []
    for i in range(tenants):
        t = f"t{i:05d}"
        if layout.current_generation(root, t) is None:
            docs += _docs(t, n_docs)
    if docs:
        build_corpus(docs, root, emb)
    return time.perf_counter() - t0


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def measure(root: str, tenants: int, hold: int = 1000) -> dict:
    """Every tenant loaded once (cold-load p50/p95); the first ``hold`` are kept loaded for the
    RSS and file-descriptor deltas per tenant (a loaded tenant keeps its memory-mapped files
    open, so one process cannot hold all of 10,000 under a 20,000-descriptor limit)."""
    from quarry.core.index.shards import TenantIndex

    names = [f"t{i:05d}" for i in range(tenants)]
    TenantIndex.load(root, names[0])  # imports and first-touch costs out of the timing
    gc.collect()
    rss0, fds0 = _rss(), _open_fds()
    held, lat = [], []
    for k, t in enumerate(names):
        t0 = time.perf_counter()
        index = TenantIndex.load(root, t)
        lat.append((time.perf_counter() - t0) * 1000)
        if k < hold:
            held.append(index)
        if k + 1 == min(hold, tenants):
            gc.collect()
            rss1, fds1 = _rss(), _open_fds()
        del index
    est = [i.resident_bytes for i in held]
    heap = [i.heap_bytes for i in held]
    n = len(held)
    return {"tenants": tenants, "cold_load_p50_ms": percentile(lat, 0.5), "cold_load_p95_ms": percentile(lat, 0.95),
            "held_for_rss": n, "rss_per_tenant_bytes": (rss1 - rss0) / n, "fds_per_tenant": (fds1 - fds0) / n,
            "estimate_per_tenant_bytes": sum(est) / n, "heap_estimate_per_tenant_bytes": sum(heap) / n}


def _http_phase(base: str, secret: str, tenants: list[str], n: int | None, concurrency: int, seed: int) -> dict:
    import random
    from concurrent.futures import ThreadPoolExecutor

    import httpx

    from quarry.serve.http.auth import mint_token

    rng = random.Random(seed)
    # The same ten query texts for every tenant, so each phase sees the same query-vector
    # cache hit rate (vectors are shared across tenants; masks and results are not).
    picks = list(tenants) if n is None else [rng.choice(tenants) for _ in range(n)]
    reqs = [(t, f"{WORDS[rng.randrange(len(WORDS))]} schedule") for t in picks]
    tokens = {t: mint_token(t, "bench", ("eng",), secret=secret, ttl_s=3600) for t in {t for t, _ in reqs}}
    with httpx.Client(base_url=base, timeout=60) as c:
        runs = [c.post("/v1/runs", headers={"Authorization": f"Bearer {tokens[t]}"}).json()["run_id"] for t, _ in reqs]
    local = threading.local()
    leaks = [0]

    def one(i: int) -> tuple[float, int]:
        t, q = reqs[i]
        c = getattr(local, "c", None) or setattr(local, "c", httpx.Client(base_url=base, timeout=60)) or local.c
        t0 = time.perf_counter()
        try:
            r = c.post("/v1/search", headers={"Authorization": f"Bearer {tokens[t]}", "X-Quarry-Run": runs[i]},
                       json={"query": q, "top_k": 4})
        except httpx.HTTPError:
            return (time.perf_counter() - t0) * 1000, 599
        ms = (time.perf_counter() - t0) * 1000
        if r.status_code == 200:
            body = r.json()
            ids = [e["passage_id"] for e in body["excerpts"]] + list(body.get("new_passage_ids", ()))
            leaks[0] += sum(1 for pid in ids if not pid.startswith(f"{t}-d"))
        return ms, r.status_code

    with ThreadPoolExecutor(concurrency) as ex:
        res = list(ex.map(one, range(len(reqs))))
    ok = [ms for ms, code in res if code == 200]
    return {"tenants": len(tenants), "requests": len(res), "errors": sum(1 for _, c in res if c != 200),
            "leaks": leaks[0], "p50_ms": percentile(ok, 0.5), "p95_ms": percentile(ok, 0.95), "_ok_ms": ok}


def http_bench(root: str, tenants: int, n: int, concurrency: int, lru_tenants: int) -> dict:
    from quarry.serve import launch
    from quarry.serve.settings import AuthSettings, ServeSettings

    secret = "bench-tenants-secret-" + "0" * 40
    settings = ServeSettings(index_root=os.path.abspath(root), auth=AuthSettings(hs256_secret=secret),
                             reranker_enabled=False, lru_tenants=lru_tenants,
                             runs_open_per_subject=10_000)  # one bench subject opens every run
    base = launch.start(settings, "127.0.0.1", launch.free_port(), ray_init={
        "num_cpus": 2, "include_dashboard": False, "log_to_driver": False, "configure_logging": False})
    names = [f"t{i:05d}" for i in range(tenants)]
    phases = {}
    try:
        _http_phase(base, secret, names[:1], 20, concurrency, 0)  # warm-up: imports, first encodes
        for name, ws in [("hot", names[:1]), ("ws8", names[:8]), ("ws64", names[:64]),
                         ("ws512", names[:512]), ("uniform", names)]:
            _http_phase(base, secret, ws[:512], None, concurrency, 1)  # every tenant of the working set once
            # the hot tenant right before and after the phase: its paired baseline, so a
            # machine shared with other jobs shifts both alike
            pair = [_http_phase(base, secret, names[:1], n // 2, concurrency, 3)]
            phases[name] = _http_phase(base, secret, ws, n, concurrency, 2)
            pair.append(_http_phase(base, secret, names[:1], n // 2, concurrency, 4))
            hot_ms = pair[0].pop("_ok_ms") + pair[1].pop("_ok_ms")
            phases[name]["paired_hot_p50_ms"] = percentile(hot_ms, 0.5)
            phases[name]["paired_errors"] = sum(p["errors"] for p in pair)
            phases[name]["paired_leaks"] = sum(p["leaks"] for p in pair)
    finally:
        launch.stop()
    hot = phases["hot"]["p50_ms"]
    for v in phases.values():
        v.pop("_ok_ms")
        v["ratio_to_hot_p50"] = v["p50_ms"] / hot
        v["ratio_to_paired_hot_p50"] = v["p50_ms"] / v["paired_hot_p50_ms"]
    return {"concurrency": concurrency, "lru_tenants": lru_tenants, "reranker": False, "phases": phases}


def _replica_loads(app: str, calls: int = 40) -> dict[str, int]:
    """Each Retriever replica's tenant-load counter, sampled through the handle (a handle
    call goes to one replica; ``calls`` sequential calls reach every replica of a few)."""
    from ray import serve

    h = serve.get_deployment_handle("Retriever", app_name=app)
    seen: dict[str, int] = {}
    for _ in range(calls):
        c = h.tenant_cache.remote().result()
        seen[c["replica"]] = max(seen.get(c["replica"], 0), c["loads"])
    return seen


def routing_bench(root: str, working_set: int, lru_tenants: int, replicas: int, n: int, concurrency: int) -> dict:
    """``replicas`` Retriever replicas of ``lru_tenants`` tenants each, a working set larger
    than one replica holds but smaller than all of them: the same closed-loop load with
    tenant routing on (the tenant as Serve's multiplexed model id) and off (Serve's default
    routing), tenant loads per search counted on every replica."""
    from quarry.serve import launch
    from quarry.serve.settings import AuthSettings, ServeSettings

    secret = "bench-tenants-secret-" + "0" * 40
    names = [f"t{i:05d}" for i in range(working_set)]
    out: dict = {"replicas": replicas, "lru_tenants": lru_tenants, "working_set": working_set,
                 "concurrency": concurrency, "order": ["routed", "unrouted", "unrouted", "routed"]}
    runs: dict[str, list[dict]] = {"routed": [], "unrouted": []}
    for mode in out["order"]:  # ABBA: a load that drifts during the run weighs on both alike
        settings = ServeSettings(index_root=os.path.abspath(root), auth=AuthSettings(hs256_secret=secret),
                                 reranker_enabled=False, lru_tenants=lru_tenants, retriever_replicas=replicas,
                                 tenant_routing=mode == "routed", runs_open_per_subject=10_000)
        base = launch.start(settings, "127.0.0.1", launch.free_port(), ray_init={
            "num_cpus": 2, "include_dashboard": False, "log_to_driver": False, "configure_logging": False})
        try:
            _http_phase(base, secret, names[:1], 20, concurrency, 0)  # warm-up: imports, first encodes
            _http_phase(base, secret, names, 2 * working_set, concurrency, 1)  # the working set placed
            before = _replica_loads(launch.APP_NAME)
            phase = _http_phase(base, secret, names, n, concurrency, 2)
            after = _replica_loads(launch.APP_NAME)
        finally:
            launch.stop()
        phase["loads"] = sum(after.values()) - sum(before.get(r, 0) for r in after)
        phase["replicas_seen"] = len(after)
        runs[mode].append(phase)
    for mode, got in runs.items():
        ok = [ms for p in got for ms in p.pop("_ok_ms")]
        requests = sum(p["requests"] for p in got)
        out[mode] = {"runs": got, "requests": requests, "errors": sum(p["errors"] for p in got),
                     "leaks": sum(p["leaks"] for p in got), "p50_ms": percentile(ok, 0.5),
                     "p95_ms": percentile(ok, 0.95), "loads_per_search": sum(p["loads"] for p in got) / requests}
    out["p50_unrouted_over_routed"] = out["unrouted"]["p50_ms"] / out["routed"]["p50_ms"]
    out["p95_unrouted_over_routed"] = out["unrouted"]["p95_ms"] / out["routed"]["p95_ms"]
    return out


def plot(res: dict, path: str) -> None:
    """p50 and p95 per HTTP phase, with the 1.3x-of-hot target line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ph = res["http"]["phases"]
    names = list(ph)
    x = range(len(names))
    fig, ax = plt.subplots(figsize=(7, 3.5))
    ax.bar([i - 0.2 for i in x], [ph[n]["p50_ms"] for n in names], 0.4, label="p50")
    ax.bar([i + 0.2 for i in x], [ph[n]["p95_ms"] for n in names], 0.4, label="p95")
    ax.axhline(1.3 * ph["hot"]["p50_ms"], color="k", ls="--", lw=1, label="1.3 x hot p50")
    ax.set_xticks(list(x), [f"{n}\n({ph[n]['tenants']} tenants)" for n in names])
    ax.set_ylabel("ms per search (HTTP)")
    ax.set_title(f"{res['tenants']} small tenants, concurrency {res['http']['concurrency']}, "
                 f"lru_tenants {res['http']['lru_tenants']}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m quarry.eval.bench_tenants", description=__doc__.split("\n\n")[0])
    ap.add_argument("--tenants", type=int, default=1000)
    ap.add_argument("--docs", type=int, default=10, help="documents per tenant")
    ap.add_argument("--root", default="var/bench-tenants")
    ap.add_argument("--out", default=None, help="write OUT.json")
    ap.add_argument("--hold", type=int, default=1000, help="tenants kept loaded for the RSS-per-tenant figure")
    ap.add_argument("--http", action="store_true", help="also the routed HTTP load through the Serve app")
    ap.add_argument("--requests", type=int, default=200, help="searches per HTTP phase")
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--lru-tenants", type=int, default=256, help="ServeSettings.lru_tenants for the HTTP run")
    ap.add_argument("--routing", action="store_true",
                    help="also tenant routing on vs off across --replicas Retriever replicas")
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--routing-lru", type=int, default=32, help="lru_tenants per replica in the routing run")
    ap.add_argument("--routing-working-set", type=int, default=48,
                    help="tenants searched in the routing run (more than one replica holds)")
    a = ap.parse_args(argv)
    build_s = build(a.root, a.tenants, a.docs)
    res = {"build_s": round(build_s, 1), "docs_per_tenant": a.docs, **measure(a.root, a.tenants, a.hold)}
    if a.http:
        res["http"] = http_bench(a.root, a.tenants, a.requests, a.concurrency, a.lru_tenants)
    if a.routing:
        if a.routing_working_set > a.tenants:
            ap.error("--routing-working-set exceeds --tenants")
        res["routing"] = routing_bench(a.root, a.routing_working_set, a.routing_lru, a.replicas, a.requests,
                                       a.concurrency)
    print(json.dumps(res, indent=2))
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out + ".json").write_text(json.dumps(res, indent=2) + "\n")
        if "http" in res:
            plot(res, a.out + ".png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
