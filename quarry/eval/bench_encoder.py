"""Query encoders side by side, in one run: torch, ONNX and ONNX int8 for the same model.

    python -m quarry.eval.bench_encoder --dataset-dir ../shared/data/beir/scifact \\
        [--index-root var/bench-encoder] [--queries 200] [--requests 200] [--concurrency 1,4,16]

For each encoder: load time and its agreement with torch (minimum cosine over the fixed
probes), encode p50/p95 for one query at a time, in-process ``search`` p50 with and without the resolution stage (encode
included), and the dataset's nDCG@10 (hybrid and dense legs) with the index built once by
the torch encoder. Then over loopback HTTP (``quarry.eval.serve_load.http_load``): the
baseline (torch, no encode batching, no cache, standard Serve through the proxy: the
serving path before the ONNX encoders), the same Retriever in the default Serve mode (throughput-
optimized, called directly on the Gateway replica's port), and each encoder with
``@serve.batch`` encoding in that mode (the recommended one also through the proxy), at
each concurrency: p50, p95 and searches/s. The
query-vector cache is off in these rows (every search encodes); one extra row repeats
each query twice with the cache on to show its hit rate.

The index is built once (in-process pipeline, torch MiniLM) into ``--index-root`` and
reused on later runs; ``var/`` is git-ignored.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import secrets
import sys
import time
from pathlib import Path
from typing import Any

from quarry.eval.bench_serve import MODES, deploy
from quarry.eval.serve_load import http_load, percentile

ENCODERS = ("torch", "onnx", "onnx-int8")
MAX_NDCG_LOSS = 0.002  # int8 (or ONNX) becomes the serving default only within this of torch


def interleaved(fns: dict[str, Any], xs: list[str], before=None) -> dict[str, list[float]]:
    """Milliseconds per call, each input timed with every function in turn, so load that
    other processes put on the machine falls on all of them alike; ``before`` runs untimed
    before each call."""
    out: dict[str, list[float]] = {k: [] for k in fns}
    for x in xs:
        for k, fn in fns.items():
            if before is not None:
                before()
            t0 = time.perf_counter()
            fn(x)
            out[k].append((time.perf_counter() - t0) * 1000)
    return out


def clear_text_caches() -> None:
    from quarry.core.evidence.predicates import predicates
    from quarry.core.evidence.sentences import passage_sentences
    from quarry.core.evidence.statements import statements

    for fn in (statements, predicates, passage_sentences):
        fn.cache_clear()


def load_encoders(encoders: list[str], manifest) -> dict[str, tuple[Any, float]]:
    from quarry.core.embed.factory import embedder_for_index

    out = {}
    for e in encoders:
        t0 = time.perf_counter()
        emb = embedder_for_index(manifest, encoder=e)
        getattr(emb, "load", lambda: None)()
        out[e] = (emb, time.perf_counter() - t0)
        print(f"[bench] {e}: loaded in {out[e][1]:.1f}s, agreement {getattr(emb, 'agreement', None)}", flush=True)
    return out


def measure_encoders(loaded: dict[str, tuple[Any, float]], queries: list[str], index=None, ds=None) -> list[dict]:
    from quarry.core.records import Principal, SearchRequest
    from quarry.core.search.in_process import search
    from quarry.eval.beir import run_stages

    for emb, _ in loaded.values():  # warm-up
        emb.encode(queries[:10])
    enc = interleaved({k: (lambda q, e=e: e.encode([q])) for k, (e, _) in loaded.items()}, queries)
    srch: dict[str, list[float]] = {}
    if index is not None:
        principal = Principal(tenant=index.tenant, subject="bench")
        # each search starts with the resolver's text caches empty: otherwise the first
        # encoder in the row would pay for parsing the passages and the others would not
        srch = interleaved({k: (lambda q, e=e: search(index, principal, SearchRequest(query=q, top_k=4), e))
                            for k, (e, _) in loaded.items()}, queries, before=clear_text_caches)
        # without the resolution stage (its contradiction search encodes up to 2 more
        # queries): the path the encoders were first measured on
        bare = interleaved({k: (lambda q, e=e: search(index, principal, SearchRequest(query=q, top_k=4), e,
                                                             resolve=False))
                            for k, (e, _) in loaded.items()}, queries)
    rows = []
    for k, (emb, load_s) in loaded.items():
        row: dict[str, Any] = {"encoder": k, "load_s": load_s, "agreement": getattr(emb, "agreement", None),
                               "encode_p50_ms": percentile(enc[k], 0.5), "encode_p95_ms": percentile(enc[k], 0.95)}
        if index is not None:
            stages = run_stages(index, ds, emb)
            row.update(search_p50_ms=percentile(srch[k], 0.5), search_p95_ms=percentile(srch[k], 0.95),
                       unresolved_p50_ms=percentile(bare[k], 0.5),
                       ndcg_hybrid=stages["hybrid"]["ndcg@10"], ndcg_dense=stages["dense"]["ndcg@10"])
        print(f"[bench] {k}: " + ", ".join(f"{a} {b:.4g}" for a, b in row.items() if isinstance(b, float)),
              flush=True)
        rows.append(row)
    return rows


def measure_http(name: str, root: str, secret: str, extra: dict[str, Any], requests: list[tuple[str, str]],
                 levels: list[int], port: int, ray_cpus: int, mode: str = "direct") -> dict[str, Any]:
    """One deployment in a ``bench_serve.MODES`` Serve mode, loaded at each concurrency."""
    from ray import serve

    from quarry.serve import launch
    from quarry.serve.settings import AuthSettings, ServeSettings

    settings = ServeSettings(index_root=root, auth=AuthSettings(hs256_secret=secret), ray_namespace="quarry-bench",
                             # one benchmark subject opens every run: quotas would refuse, not measure
                             runs_open_per_subject=1_000_000, runs_open_per_tenant=1_000_000,
                             runs_kept_per_tenant=1_000_000,
                             store_name_prefix="quarry-bench-enc", reranker_enabled=False,
                             max_ongoing_requests=32, **extra)
    name = f"{name}, {MODES[mode]}"
    print(f"[bench] HTTP {name}: deploying", flush=True)
    base = deploy(settings, mode, port, ray_cpus)
    rows = []
    try:
        http_load(base, secret, requests[:20], 4)  # warm-up: index and model loads
        for c in levels:
            r = http_load(base, secret, requests, c)
            r.pop("rerank_notes", None)
            print(f"[bench] HTTP {name} c={c}: p50 {r['p50_ms']:.1f} ms p95 {r['p95_ms']:.1f} ms "
                  f"{r['throughput_rps']:.1f} searches/s errors {r['errors']}", flush=True)
            rows.append(r)
        stats = serve.get_deployment_handle("Retriever", app_name=launch.APP_NAME).encoder_stats.remote().result()
    finally:
        launch.stop()
    sizes = stats.pop("encode_batch_sizes", [])
    stats["mean_encode_batch"] = sum(sizes) / len(sizes) if sizes else 0.0
    return {"name": name, "settings": extra, "rows": rows, "encoder_stats": stats}


def markdown(enc_rows: list[dict[str, Any]], http_rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    torch_row = next(r for r in enc_rows if r["encoder"] == "torch")
    f = lambda r, k, fmt: format(r[k], fmt) if k in r else "n/a"  # noqa: E731 - encode-only runs lack index columns
    out = [
        "# Query encoders: torch vs ONNX vs ONNX int8 (same model)",
        "",
        f"Command: `{meta['command']}`  ",
        f"Machine: {meta['machine']}. Measured {meta['date']}, one run on a shared machine that other "
        f"engineers were loading at the same time (1/5/15-min load average before: {meta['load_before']}, "
        f"after: {meta['load_after']}): the numbers are noisy; compare rows of this run, not runs.  ",
        f"Dataset: {meta['dataset']} ({meta['passages']} passages, {meta['n_queries']} test queries for nDCG@10); "
        f"latencies over {meta['timed_queries']} queries, one at a time, torch threads {meta['torch_threads']}.",
        "",
        "| encoder | load s | min cosine vs torch | encode p50 ms | encode p95 ms | search p50 ms "
        "| search p95 ms | search p50 ms without resolution | nDCG@10 hybrid | nDCG@10 dense | hybrid Δ vs torch |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in enc_rows:
        agree = "reference" if r["encoder"] == "torch" else f"{r['agreement']:.4f}"
        delta = f"{r['ndcg_hybrid'] - torch_row['ndcg_hybrid']:+.4f}" if "ndcg_hybrid" in r else "n/a"
        out.append(f"| {r['encoder']} | {r['load_s']:.1f} | {agree} | {r['encode_p50_ms']:.2f} | "
                   f"{r['encode_p95_ms']:.2f} | {f(r, 'search_p50_ms', '.2f')} | {f(r, 'search_p95_ms', '.2f')} | "
                   f"{f(r, 'unresolved_p50_ms', '.2f')} | "
                   f"{f(r, 'ndcg_hybrid', '.4f')} | {f(r, 'ndcg_dense', '.4f')} | {delta} |")
    out += [] if not http_rows else [
        "", "Over loopback HTTP (`POST /v1/search`, one gateway and one Retriever replica, no second stage; "
            "client, Ray and Serve on the same cores). Serve modes as in `quarry.eval.bench_serve`: standard Serve "
            "through the proxy (the first measured serving path), or the default throughput-optimized mode "
            "called through the proxy or directly on the Gateway replica's own port (direct ingress):", "",
            "| configuration | concurrency | requests | errors | p50 ms | p95 ms | searches/s | mean encode batch "
            "| cache hit rate |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    if not http_rows:
        out += ["", "HTTP: not measured in this run (`--no-http` or `--encode-only`)."]
    for h in http_rows:
        st = h["encoder_stats"]
        for r in h["rows"]:
            out.append(f"| {h['name']} | {r['concurrency']} | {r['requests']} | {r['errors']} | {r['p50_ms']:.1f} | "
                       f"{r['p95_ms']:.1f} | {r['throughput_rps']:.1f} | {st['mean_encode_batch']:.2f} | "
                       f"{st['hit_rate']:.2f} |")
    base = max((r["throughput_rps"] for r in http_rows[0]["rows"]), default=0.0) if http_rows else 0.0
    for h in http_rows[1:]:
        peak = max(r["throughput_rps"] for r in h["rows"])
        out.append(f"\nPeak searches/s, {h['name']}: {peak:.1f} = {peak / base:.2f}x the baseline's {base:.1f}.")
    out += ["", f"Default rule: an ONNX encoder is the serving default only if its hybrid nDCG@10 is within "
            f"{MAX_NDCG_LOSS} of torch's. This run: recommended default `{meta['recommended']}`.", ""]
    return "\n".join(out)


def recommend(enc_rows: list[dict[str, Any]]) -> str:
    if any("ndcg_hybrid" not in r for r in enc_rows):
        return "torch (no nDCG measured in this run)"
    torch_ndcg = next(r["ndcg_hybrid"] for r in enc_rows if r["encoder"] == "torch")
    for name in ("onnx-int8", "onnx"):
        row = next((r for r in enc_rows if r["encoder"] == name), None)
        if row is not None and torch_ndcg - row["ndcg_hybrid"] <= MAX_NDCG_LOSS:
            return name
    return "torch"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m quarry.eval.bench_encoder", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    p.add_argument("--dataset-dir", required=True, help="a BEIR dataset folder (corpus.jsonl, queries.jsonl, qrels/)")
    p.add_argument("--index-root", default="var/bench-encoder", help="where the index is built once and reused")
    p.add_argument("--encoders", default=",".join(ENCODERS), help="comma-separated: torch, onnx, onnx-int8")
    p.add_argument("--queries", type=int, default=200, help="queries timed one at a time (default 200)")
    p.add_argument("--requests", type=int, default=200, help="HTTP searches per concurrency level (default 200)")
    p.add_argument("--concurrency", default="1,4,16", help="comma-separated HTTP concurrency levels")
    p.add_argument("--no-http", action="store_true", help="skip the HTTP part")
    p.add_argument("--encode-only", action="store_true",
                   help="only load and time the encoders on the dataset's queries (no index, no nDCG, no HTTP)")
    p.add_argument("--ray-cpus", type=int, default=2, help="CPUs for the in-process Ray (default 2)")
    p.add_argument("--out", default="eval/results/encoder.md", help="Markdown table to write ('' = none)")
    p.add_argument("--json", default=None, help="also write the raw results here")
    args = p.parse_args(argv)
    encoders = [e for e in args.encoders.split(",") if e]
    if "torch" not in encoders or any(e not in ENCODERS for e in encoders):
        print(f"error: --encoders must include torch and name only {', '.join(ENCODERS)}", file=sys.stderr)
        return 2
    d = Path(args.dataset_dir)
    if not (d / "corpus.jsonl").is_file():
        print(f"error: {d} is not a BEIR dataset folder (no corpus.jsonl)", file=sys.stderr)
        return 2
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import torch

    from quarry.core.embed.factory import EmbedderSpec, build_embedder
    from quarry.core.index.manifest import Counts, EmbedderRecord, IndexManifest
    from quarry.core.index.shards import TenantIndex
    from quarry.eval.beir import ensure_index, load_dataset
    from quarry.serve import launch

    load_before = " ".join(f"{x:.1f}" for x in os.getloadavg())
    ds = load_dataset(d, "test")
    tenant = ds.name.lower()
    queries = [ds.queries[q] for q in list(ds.qrels)][: args.queries]
    index = None
    if not args.encode_only:
        root = launch.absolute_root(args.index_root)
        ensure_index(d, root, tenant, "none", build_embedder("default"), "in-process")  # reused when present
        index = TenantIndex.load(root, tenant)
    manifest = index.manifest if index is not None else IndexManifest(  # no index: the packaged model's record
        tenant=tenant, generation=0, shards=(), counts=Counts(passages=0, parents=0, documents=0),
        embedder=EmbedderRecord(**EmbedderSpec.of(build_embedder("default")).model_dump()))
    enc_rows = measure_encoders(load_encoders(encoders, manifest), queries, index, ds)
    http_rows: list[dict[str, Any]] = []
    if not args.no_http and not args.encode_only:
        levels = [int(x) for x in args.concurrency.split(",") if x]
        reqs = [(tenant, queries[i % len(queries)]) for i in range(args.requests)]
        secret, port = secrets.token_urlsafe(48), launch.free_port()
        nocache = {"query_cache_size": 0}
        one_by_one = {**nocache, "query_encoder": "torch", "encode_batch_size": 1}
        # the baseline: the first measured serving path (torch, one encode per request,
        # standard Serve, through the proxy); then the same encoder in today's default Serve
        # mode, so the rows separate what the Serve mode gives from what the encoders give
        http_rows.append(measure_http("baseline: torch, one encode per request", root, secret, one_by_one, reqs,
                                      levels, port, args.ray_cpus, mode="standard"))
        http_rows.append(measure_http("torch, one encode per request", root, secret, one_by_one, reqs, levels,
                                      port, args.ray_cpus))
        for e in encoders:
            http_rows.append(measure_http(f"{e}, batched encodes", root, secret, {**nocache, "query_encoder": e},
                                          reqs, levels, port, args.ray_cpus))
        best = recommend(enc_rows)
        http_rows.append(measure_http(f"{best}, batched encodes", root, secret, {**nocache, "query_encoder": best},
                                      reqs, levels, port, args.ray_cpus, mode="optimized"))
        repeat = [(tenant, queries[i % (len(reqs) // 2)]) for i in range(len(reqs))]
        http_rows.append(measure_http(f"{best}, batched, cache on (each query twice)", root, secret,
                                      {"query_encoder": best}, repeat, levels[-1:], port, args.ray_cpus))
    meta = {
        "command": "python -m quarry.eval.bench_encoder " + " ".join(argv if argv is not None else sys.argv[1:]),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "load_before": load_before,
        "load_after": " ".join(f"{x:.1f}" for x in os.getloadavg()), "dataset": ds.name,
        "passages": len(index) if index is not None else "no index",
        "n_queries": len(ds.qrels), "timed_queries": len(queries), "torch_threads": torch.get_num_threads(),
        "recommended": recommend(enc_rows),
    }
    md = markdown(enc_rows, http_rows, meta)
    print(md)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(md)
    if args.json:
        Path(args.json).write_text(json.dumps({"encoders": enc_rows, "http": http_rows, "meta": meta}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
