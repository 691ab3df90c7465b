"""Load benchmark for ``POST /v1/search`` over loopback HTTP, against the same search
called in-process through ``quarry.core.search.in_process.search``.

    python -m quarry.eval.bench_serve [--requests 200] [--concurrency 1,4,16] [--out eval/results/serve.md]

What it does, in one process on one machine:

1. builds the sample corpus (in-process build, packaged MiniLM unless ``--embedder hashing``)
   into a temporary index root, or uses ``--index-root``;
2. for each configuration (second stage off; the learned ranker; a MiniLM-size
   random-weight cross-encoder) deploys the Serve application in-process (Ray on
   ``--ray-cpus``), creates one run per request beforehand (the budget rule: a run allows 3
   searches, and the benchmark never asks the server for more), then sends ``--requests``
   searches at each concurrency with a bounded thread pool of httpx clients, timing each
   search request only (the query-vector cache is off unless ``--query-cache``: every search
   encodes, as in-process);
3. times the same searches in-process (same index, embedder, settings and second stage),
   sequentially, and reports HTTP p50 at concurrency 1 divided by the in-process p50;
4. pairs them: each search in-process, then over HTTP, alternating, so both halves see the
   same load from the rest of a shared machine (the ratio to read on a noisy machine).

The learned ranker is trained per tenant on the corpus's own titles-as-queries and its
gate decision is recorded with fixed numbers (``record_decision``): this measures the cost
of serving a promoted ranker, not its quality. It only touches an index root the
benchmark built itself. The cross-encoder has random weights (latency only), built by
``quarry.eval.bench_crossencoder.build_random_cross_encoder``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import secrets
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from quarry.eval.serve_load import GROUPS, QUERIES, TOP_K, http_load, in_process, paired, workload


# ----------------------------------------------------------------------------- setup

def build_index(root: str, embedder: str | None) -> None:
    from quarry.core.ingest.contextualize_extractive import ExtractiveContextualizer
    from quarry.core.embed.factory import build_embedder
    from quarry.core.ingest.pipeline import build_corpus
    from quarry.core.ingest.sources import SAMPLE_CORPUS, load_documents

    emb = build_embedder(embedder)
    docs, _ = load_documents(SAMPLE_CORPUS)
    build_corpus(docs, root, emb, ExtractiveContextualizer())


def promote_learned(root: str, embedder) -> dict[str, str]:
    """Train a small LightGBM ranker per tenant and record an enabled gate decision."""
    from quarry.core.rank.gate import evaluate_gate, record_decision
    from quarry.core.index.shards import TenantIndex
    from quarry.core.index.layout import current_generation
    from quarry.core.rank.model import LearnedRanker
    from quarry.core.rank.train import label_candidates, mine_candidates
    from quarry.core.records import Principal
    from quarry.core.search.settings import SearchSettings

    ids = {}
    for tenant in sorted(QUERIES):
        idx = TenantIndex.load(root, tenant, current_generation(root, tenant))
        p = Principal(tenant=tenant, subject="bench", groups=frozenset(GROUPS + ("finance-admins",)))
        docs = sorted({d for sh in idx.shards for d in sh.doc_ids})
        titles = {d: idx.document(d, p)[0].envelope.title for d in docs if idx.document(d, p)}
        mined = mine_candidates(idx, p, embedder, titles, SearchSettings())
        groups = [(m.query, m.candidates, m.passages, label_candidates(m.candidates, {d: 1})) for d, m in mined.items()]
        r = LearnedRanker(params={"n_estimators": 100, "num_leaves": 15}).fit(groups)
        record_decision(root, tenant, idx.generation, evaluate_gate(0.5, 0.6, model_id=r.model_id, n_queries=0 + 10,
                                                                    reason=None), r)
        ids[tenant] = r.model_id
    return ids


def make_embedder(root: str):
    from quarry.core.index.shards import TenantIndex
    from quarry.core.embed.factory import embedder_for_index

    return embedder_for_index(TenantIndex.load(root, "globex").manifest)


# ----------------------------------------------------------------------------- in-process

def in_process_search(root: str, embedder, width: int, stage_kind: str, ce_dir: str | None, graph_hops: int = 3):
    """(tenant, query) -> one in-process search, as the HTTP path runs it (same index,
    embedder, settings, second stage and principal), warmed up."""
    from quarry.core.index.shards import TenantIndex
    from quarry.core.records import Principal, SearchRequest
    from quarry.core.rank.cross_encoder import CrossEncoderReranker
    from quarry.core.rank.rerank import RerankInput, apply_rerank
    from quarry.core.search.in_process import search
    from quarry.core.search.settings import SearchSettings

    import torch

    # Replicas run with OMP_NUM_THREADS=1 (Ray sets it from num_cpus); the baseline does the
    # same, or on a loaded 2-core machine torch's spinning threads would make it look slow.
    torch.set_num_threads(1)
    settings = SearchSettings(top_k_ceiling=10, candidate_width=width, graph_hops=graph_hops)
    idx = {t: TenantIndex.load(root, t) for t in QUERIES}
    stages: dict[str, Any] = {t: None for t in QUERIES}
    if stage_kind == "learned":
        from quarry.core.rank.gate import load_second_stage

        stages = {t: load_second_stage(root, t, idx[t].generation)[0] for t in QUERIES}
    elif stage_kind == "cross-encoder":
        ce = CrossEncoderReranker(ce_dir, max_length=256)

        def ce_stage(query, cands, passages, top_k):
            scores = ce.score(query, [RerankInput(p.passage_id, p.envelope.title, tuple(p.heading_path), p.text)
                                      for p in passages])
            by = {c.passage_id: c for c in cands}
            return [by[pid].model_copy(update={"rerank_score": s, "rerank_rank": r})
                    for pid, s, r in apply_rerank(scores, [c.passage_id for c in cands], top_k)]

        stages = {t: ce_stage for t in QUERIES}
    principals = {t: Principal(tenant=t, subject="bench", groups=frozenset(GROUPS)) for t in QUERIES}

    def one(t: str, q: str) -> None:
        search(idx[t], principals[t], SearchRequest(query=q, top_k=TOP_K), embedder, settings, stages[t])

    for t, q in workload(20):  # warm-up: model loads, mask caches
        one(t, q)
    return one



RESOLUTIONS = {"graph": "resolution over the evidence graph", "search": "graph off: contradiction search"}
MODES = {"standard": "standard Serve", "optimized": "throughput-optimized Serve, through the proxy",
         "direct": "throughput-optimized Serve, direct to the Gateway replica"}


def deploy(settings, mode: str, port: int, ray_cpus: int) -> str:
    """Start the application in a Serve ``mode`` and return the URL the client calls:
    the proxy's, or under ``direct`` the Gateway replica's own port (direct ingress)."""
    from quarry.serve import launch

    settings = settings.model_copy(update={"throughput_optimized": mode != "standard"})
    # Ray reads the mode from the environment of the processes it starts, and launch.start
    # sets it from the settings without overriding a value already there: clear what the
    # previous mode of this run left, so modes measured in one run do not inherit it.
    for k in launch.THROUGHPUT_KEYS:
        os.environ.pop(k, None)
    base = launch.start(settings, "127.0.0.1", port, ray_init={
        "num_cpus": ray_cpus, "include_dashboard": False, "log_to_driver": False, "configure_logging": False})
    if mode == "direct":
        urls = launch.ingress_urls("127.0.0.1")
        if not urls:
            launch.stop()
            raise RuntimeError("direct ingress is on but no Gateway replica reported a port of its own")
        base = urls[0]
    return base


def run_config(name: str, root: str, secret: str, args, extra: dict[str, Any], embedder, stage_kind: str,
               width: int, ce_dir: str | None, n_requests: int | None = None, mode: str = "optimized",
               resolution: str = "graph") -> dict[str, Any]:
    n_requests = n_requests or args.requests
    from quarry.serve import launch
    from quarry.serve.settings import AuthSettings, ServeSettings

    name = f"{name}, {MODES[mode]}, {RESOLUTIONS[resolution]}"
    hops = 0 if resolution == "search" else 3

    settings = ServeSettings(index_root=root, auth=AuthSettings(hs256_secret=secret), ray_namespace="quarry-bench",
                             store_name_prefix="quarry-bench", search={"candidate_width": width, "graph_hops": hops},
                             max_ongoing_requests=32,
                             # every search encodes, as the in-process baseline does (default): the
                             # workload repeats its queries, so the query-vector cache hides the encoder
                             query_cache_size=args.query_cache,
                             # one benchmark subject opens every run: quotas would refuse, not measure
                             runs_open_per_subject=1_000_000, runs_open_per_tenant=1_000_000,
                             runs_kept_per_tenant=1_000_000, **extra)
    print(f"[bench] {name}: deploying", flush=True)
    base = deploy(settings, mode, args.port, args.ray_cpus)
    rows = []
    one = in_process_search(root, embedder, width, stage_kind, ce_dir, hops)
    try:
        http_load(base, secret, workload(20), 4)  # warm-up: index loads, model loads
        for c in args.concurrency:
            r = http_load(base, secret, workload(n_requests), c)
            print(f"[bench] {name} c={c}: p50 {r['p50_ms']:.1f} ms p95 {r['p95_ms']:.1f} ms "
                  f"{r['throughput_rps']:.1f} req/s errors {r['errors']} with follow-ups {r['with_follow_ups']} "
                  f"rerank {r['rerank_notes']}", flush=True)
            rows.append(r)
        pair = paired(base, secret, one, workload(n_requests))
        print(f"[bench] {name} paired c=1: HTTP p50 {pair['http_p50_ms']:.1f} ms, in-process "
              f"{pair['in_process_p50_ms']:.1f} ms, {pair['ratio_of_p50']:.2f}x", flush=True)
    finally:
        launch.stop()
    ip = in_process(one, workload(n_requests))
    print(f"[bench] {name} in-process p50 {ip['p50_ms']:.2f} ms", flush=True)
    return {"name": name, "width": width, "rows": rows, "in_process": ip, "paired": pair, "mode": mode,
            "resolution": resolution}


def markdown(results: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    out = [
        "# Serving benchmark: `POST /v1/search` over loopback HTTP vs in-process `search`",
        "",
        f"Command: `{meta['command']}`  ",
        f"Machine: {meta['machine']}; client, Ray, Serve and the in-process baseline share these cores.  ",
        f"Index: the sample corpus (3 tenants, {meta['passages']} passages), embedder `{meta['embedder']}`; "
        f"top_k {TOP_K}; one gateway, one retriever replica; a fresh run per search (created before timing).  ",
        f"Measured {meta['date']}; one run on a shared machine (1/5/15-min load average at the end: {meta['load']}), "
        "as measured (noisy). The in-process baseline uses 1 torch thread, like the replicas "
        "(Ray sets OMP_NUM_THREADS=1).",
        "",
        "| configuration | candidates to 2nd stage | concurrency | requests | errors | p50 ms | p95 ms | req/s "
        "| searches with follow-up queries | in-process p50 ms | HTTP p50 (c=1) / in-process |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for res in results:
        ip = res["in_process"]["p50_ms"]
        c1 = next((r for r in res["rows"] if r["concurrency"] == 1), res["rows"][0])
        for r in res["rows"]:
            ratio = f"{c1['p50_ms'] / ip:.2f}x" if r is c1 else ""
            out.append(f"| {res['name']} | {res['width']} | {r['concurrency']} | {r['requests']} | {r['errors']} | "
                       f"{r['p50_ms']:.1f} | {r['p95_ms']:.1f} | {r['throughput_rps']:.1f} | "
                       f"{r.get('with_follow_ups', 0)} | {ip:.1f} | {ratio} |")
    out += ["", "Paired at c=1: each search in-process, then the same search over HTTP, alternating, so "
            "both see the same load from the rest of the machine (the acceptance ratio):", "",
            "| configuration | searches | in-process p50 ms | HTTP p50 ms | HTTP p50 / in-process p50 "
            "| median of per-search ratios |", "| --- | --- | --- | --- | --- | --- |"]
    for res in results:
        pr = res["paired"]
        out.append(f"| {res['name']} | {pr['n']} | {pr['in_process_p50_ms']:.1f} | {pr['http_p50_ms']:.1f} | "
                   f"{pr['ratio_of_p50']:.2f}x | {pr['median_ratio']:.2f}x |")
    out += ["", "Second-stage notes seen in responses (rerank stage):", ""]
    for res in results:
        notes: dict[str, int] = {}
        for r in res["rows"]:
            for k, v in r["rerank_notes"].items():
                notes[k] = notes.get(k, 0) + v
        out.append(f"- {res['name']}: " + "; ".join(f"{v}x \"{k}\"" for k, v in notes.items()))
    out += ["", "Goal: HTTP p50 <= 1.2x in-process (stretch 1.1x) with the second stage off. The HTTP path adds "
            "the Serve proxy (not when direct), token verification (cached per token until its exp), one "
            "run-store decision after the search (plus an existence check the first time a replica sees a "
            "run), a trace queued for a background writer, the deployment hops (Retriever, Resolver and its "
            "follow-ups) and JSON "
            "(de)serialisation around the same `search` call. Standard Serve: the proxy and deployment calls as "
            "Ray ships them; throughput-optimized Serve (`RAY_SERVE_THROUGHPUT_OPTIMIZED=1`, quarry's default, "
            "`ServeSettings.throughput_optimized`): gRPC between deployments, user code on the replica loop, "
            "buffered request logs, and direct ingress (`ServeSettings.direct_ingress`): the Gateway replica also "
            "listens on a port of its own. Through the proxy: the client calls the proxy, which forwards to the "
            "Gateway replica and is called back once per request for disconnects; direct: the client calls the "
            "Gateway replica's own port (`launch.ingress_urls`), no proxy.", ""]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m quarry.eval.bench_serve", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    p.add_argument("--requests", type=int, default=200, help="searches per concurrency level (default 200)")
    p.add_argument("--concurrency", default="1,4,16", help="comma-separated client concurrency levels")
    p.add_argument("--index-root", default=None, help="an existing index root (default: build the sample corpus)")
    p.add_argument("--embedder", default=None, help="'hashing' or a model dir (default: packaged MiniLM)")
    p.add_argument("--configs", default="off,learned,cross-encoder",
                   help="which second stages to measure: off, learned, cross-encoder")
    p.add_argument("--ce-candidates", type=int, default=10, help="candidates the cross-encoder re-scores (default 10)")
    p.add_argument("--ce-requests", type=int, default=50,
                   help="searches per concurrency level with the cross-encoder (default 50: it is CPU-bound)")
    p.add_argument("--learned-candidates", type=int, default=50, help="candidates the learned ranker sees (default 50)")
    p.add_argument("--ray-cpus", type=int, default=2, help="CPUs for the in-process Ray (default 2)")
    p.add_argument("--port", type=int, default=0, help="loopback port (default: a free one)")
    p.add_argument("--out", default="eval/results/serve.md", help="Markdown table to write ('' = none)")
    p.add_argument("--json", default=None, help="also write the raw results here")
    p.add_argument("--query-cache", type=int, default=0,
                   help="the Retriever's query-vector cache size (default 0: every search encodes, like the "
                        "in-process baseline; the workload repeats its queries, so a cache serves most of them)")
    p.add_argument("--resolution", default="graph",
                   help="comma-separated resolution evidence, each measured in turn: graph (the evidence graph's "
                        "links, the default) and search (graph off: query-based contradiction search, the path "
                        "before the graph)")
    p.add_argument("--modes", default="optimized",
                   help="comma-separated Serve modes, each measured in turn: standard, optimized (the default "
                        "deployment, RAY_SERVE_THROUGHPUT_OPTIMIZED=1 with direct ingress, called through the "
                        "proxy), direct (the same, calling the Gateway replica's own port)")
    args = p.parse_args(argv)
    modes = [m for m in args.modes.split(",") if m]
    if not modes or any(m not in MODES for m in modes):
        print(f"error: --modes takes a comma-separated list of {', '.join(MODES)}", file=sys.stderr)
        return 2
    resolutions = [r for r in args.resolution.split(",") if r]
    if not resolutions or any(r not in RESOLUTIONS for r in resolutions):
        print(f"error: --resolution takes a comma-separated list of {', '.join(RESOLUTIONS)}", file=sys.stderr)
        return 2
    if args.query_cache < 0:
        print("error: --query-cache must be 0 (off) or a positive size", file=sys.stderr)
        return 2
    args.concurrency = [int(x) for x in args.concurrency.split(",") if x]
    configs = [c for c in args.configs.split(",") if c]
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from quarry.serve import launch

    if not args.port:
        args.port = launch.free_port()
    tmp = tempfile.TemporaryDirectory(prefix="quarry-bench-")
    own = args.index_root is None
    root = launch.absolute_root(args.index_root or str(Path(tmp.name) / "idx"))
    if own:
        print("[bench] building the sample corpus ...", flush=True)
        build_index(root, args.embedder)
    embedder = make_embedder(root)
    secret = secrets.token_urlsafe(48)
    results = []
    if "off" in configs:
        for mode in modes:
            for res in resolutions:
                results.append(run_config("second stage off", root, secret, args, {"reranker_enabled": False},
                                          embedder, "off", 50, None, mode=mode, resolution=res))
    if "learned" in configs:
        if not own:
            print("[bench] skipping 'learned': it records gate decisions, so it only runs on an index it built",
                  flush=True)
        else:
            promote_learned(root, embedder)
            for mode in modes:
                results.append(run_config("learned ranker (LightGBM, gate-promoted)", root, secret, args,
                                          {"reranker_enabled": True}, embedder, "learned", args.learned_candidates,
                                          None, mode=mode))
    if "cross-encoder" in configs:
        from quarry.eval.bench_crossencoder import build_random_cross_encoder

        ce_dir = str(build_random_cross_encoder(Path(tmp.name) / "ce"))
        for mode in modes:
            results.append(run_config(
                "cross-encoder (MiniLM-L6-size, random weights, CPU)", root, secret, args,
                {"reranker_enabled": True, "learned_ranker": False,
                 "reranker_factory": "quarry.core.rank.cross_encoder:CrossEncoderReranker",
                 "reranker_options": {"model": ce_dir, "max_length": 256}}, embedder, "cross-encoder",
                args.ce_candidates, ce_dir, n_requests=args.ce_requests, mode=mode))
    from quarry.core.index.shards import TenantIndex

    meta = {
        "command": "python -m quarry.eval.bench_serve " + " ".join(argv if argv is not None else sys.argv[1:]),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPU cores, Python {platform.python_version()}",
        "passages": sum(len(TenantIndex.load(root, t)) for t in QUERIES),
        "embedder": getattr(embedder, "name", "?"),
        "date": time.strftime("%Y-%m-%d"),
        "load": " / ".join(f"{x:.1f}" for x in os.getloadavg()),
        "modes": modes,
    }
    md = markdown(results, meta)
    print(md)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(md)
    if args.json:
        Path(args.json).write_text(json.dumps({"meta": meta, "results": results}, indent=2, default=str))
    tmp.cleanup()
    bad = sum(r["errors"] for res in results for r in res["rows"])
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
