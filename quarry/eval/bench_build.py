"""Benchmark of the Spark build job (a benchmark, not a test).

Builds BEIR SciFact (5,183 docs) through ``quarry.jobs.build.run_build`` and a 4x
replicated multi-tenant variant (4 tenants, each a copy of the corpus) in one Spark
session, and reports docs/s, time per stage and peak driver memory. In the same run it
embeds the 1x corpus's passages with the same model in this plain process, to compare
embedding throughput inside Spark with outside it (goal >= 0.9), and compares the 4x
build time with the 1x (goal <= 4.4). Writes a Markdown table.

    python -m quarry.eval.bench_build --dataset ../shared/data/beir/scifact \\
        --embedder default --out eval/results/build.md [--limit 1000] [--master local[*]]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEFAULT_DATASET = REPO.parent / "shared" / "data" / "beir" / "scifact"
GOAL_EMBED_RATIO = 0.9
GOAL_SCALE_RATIO = 4.4


def _plain_embed_throughput(docs, spec: str, batch_size: int) -> dict:
    """The same model, same passages, same batch size, in this process (no Spark)."""
    from quarry.core.ingest.chunking import chunk_document
    from quarry.core.ingest.contextualize import with_context
    from quarry.core.ingest.contextualize_extractive import ExtractiveContextualizer
    from quarry.core.embed.embedders import passage_text_for_embedding
    from quarry.core.embed.factory import build_embedder

    ctx = ExtractiveContextualizer()
    texts = []
    for d in docs:
        ps, _ = chunk_document(d)
        texts += [passage_text_for_embedding(p) for p in with_context(ps, ctx.contextualize(d, ps))]
    emb = build_embedder(spec, batch_size=batch_size)
    if hasattr(emb, "load"):
        emb.load()
    emb.encode(texts[: min(len(texts), 2 * batch_size)])  # warm-up, like the workers' first batch
    t0 = time.monotonic()
    emb.encode(texts)
    s = time.monotonic() - t0
    import torch

    return {"passages": len(texts), "seconds": s, "passages_per_s": len(texts) / s, "torch_threads": torch.get_num_threads()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m quarry.eval.bench_build", description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", default=str(DEFAULT_DATASET), help="a BEIR dataset folder (corpus.jsonl)")
    ap.add_argument("--embedder", default="default", help="'default' (packaged MiniLM), 'hashing' or a model dir")
    ap.add_argument("--limit", type=int, default=None, help="use only the first N documents")
    ap.add_argument("--replicas", type=int, default=4, help="tenants in the replicated variant")
    ap.add_argument("--master", default="local[*]")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--contextualizer", default="extractive", choices=("extractive", "none"))
    ap.add_argument("--work-dir", default=None, help="where sources and indexes go (default: a temp dir)")
    ap.add_argument("--out", default=str(REPO / "eval" / "results" / "build.md"))
    ap.add_argument("--json", dest="json_out", default=None, help="also write the raw figures as JSON")
    args = ap.parse_args(argv)

    from quarry.core.ingest.sources import load_beir_corpus
    from quarry.core.ingest.sources import write_source_jsonl
    from quarry.jobs.build import run_build
    from quarry.jobs.build_settings import BuildSettings
    from quarry.jobs.report import peak_rss_mb
    from quarry.jobs.spark import get_spark

    work = Path(args.work_dir or tempfile.mkdtemp(prefix="quarry-bench-build-"))
    docs = load_beir_corpus(args.dataset, tenant="scifact", limit=args.limit)
    one = write_source_jsonl(docs, work / "src-1x" / "corpus.jsonl")
    rep_docs = [d.model_copy(update={"tenant": f"t{i + 1}"}) for i in range(args.replicas) for d in docs]
    many = write_source_jsonl(rep_docs, work / f"src-{args.replicas}x" / "corpus.jsonl")
    print(f"bench: {len(docs)} docs (1x), {len(rep_docs)} docs ({args.replicas}x) under {work}", file=sys.stderr)

    spark = get_spark(args.master, app_name="quarry-bench-build", local_dir=str(work / "spark-local"))
    base = dict(embedder=args.embedder, batch_size=args.batch_size, contextualizer=args.contextualizer)
    # Warm-up: start the Python workers and load the model once (excluded from the figures).
    warm = write_source_jsonl(docs[:20], work / "src-warm" / "corpus.jsonl")
    run_build(BuildSettings(source=str(warm), index_root=str(work / "idx-warm"), quiet=True, **base), spark=spark)
    r1 = run_build(BuildSettings(source=str(one), index_root=str(work / "idx-1x"), **base), spark=spark)
    r4 = run_build(BuildSettings(source=str(many), index_root=str(work / f"idx-{args.replicas}x"), **base),
                   spark=spark)
    cores = spark.sparkContext.defaultParallelism
    spark.stop()
    driver_peak_builds = peak_rss_mb()  # before this process loads the model itself
    plain = _plain_embed_throughput(docs, args.embedder, args.batch_size)

    embed_ratio = r1.embed["passages_per_s"] / plain["passages_per_s"]
    scale_ratio = r4.seconds / r1.seconds
    stages = [s.name for s in r1.stages]
    lines = [
        "# Build job benchmark",
        "",
        f"Measured {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC by `python -m quarry.eval.bench_build "
        + " ".join(a for a in (argv if argv is not None else sys.argv[1:])) + "`.",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} CPU cores visible, Spark `{args.master}` "
        f"({cores} task slots), one Spark session for both builds; a 20-doc warm-up build first (not counted). "
        f"Embedder `{r1.embedder['name']}` (dim {r1.embedder['dim']}, batch {args.batch_size}), "
        f"contextualizer `{args.contextualizer}`. Dataset {Path(args.dataset).name}"
        + (f", first {args.limit} docs" if args.limit else " (full corpus)") + ".",
        "",
        "| build | tenants | docs | passages | seconds | docs/s | embed passages/s | peak driver RSS (MB) | JVM heap peak (MB) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, r in (("1x", r1), (f"{args.replicas}x", r4)):
        lines.append(f"| {name} | {len([t for t in r.tenants if t != '_unknown'])} | {r.documents} | {r.passages} | "
                     f"{r.seconds:.1f} | {r.docs_per_s:.1f} | {r.embed['passages_per_s']:.1f} | "
                     f"{r.peak_driver_rss_mb:.0f} | {r.jvm_driver_heap_peak_mb or float('nan'):.0f} |")
    lines += [
        "",
        "Seconds per stage:",
        "",
        "| build | " + " | ".join(stages) + " |",
        "| --- | " + " | ".join("---:" for _ in stages) + " |",
    ]
    for name, r in (("1x", r1), (f"{args.replicas}x", r4)):
        ss = r.stage_seconds()
        lines.append(f"| {name} | " + " | ".join(f"{ss.get(s, 0):.1f}" for s in stages) + " |")
    ok_e = "meets" if embed_ratio >= GOAL_EMBED_RATIO else "misses"
    ok_s = "meets" if scale_ratio <= GOAL_SCALE_RATIO else "misses"
    lines += [
        "",
        "| ratio | measured | goal | verdict |",
        "| --- | ---: | ---: | --- |",
        f"| embedding throughput, Spark embed stage / plain process ({plain['passages']} passages, plain process "
        f"{plain['passages_per_s']:.1f} passages/s with {plain['torch_threads']} torch threads) | {embed_ratio:.2f} | "
        f">= {GOAL_EMBED_RATIO} | {ok_e} |",
        f"| {args.replicas}x build time / 1x build time | {scale_ratio:.2f} | <= {GOAL_SCALE_RATIO} | {ok_s} |",
        "",
        "The Spark embed stage's time covers the whole stage (reading the cached contextualized rows, the "
        "shuffle that spreads passages over the task slots, JSON parsing and the model), measured on the "
        "driver; the plain figure is `encode` alone over the same passage texts. Peak driver RSS is the "
        f"Python driver's `ru_maxrss` after both builds ({driver_peak_builds:.0f} MB), before the plain-process "
        "model was loaded; the JVM heap peak is the driver JVM's heap pools' peak usage.",
        "",
    ]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines))
    print("\n".join(lines))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({
            "one": r1.model_dump(mode="json"), "many": r4.model_dump(mode="json"), "plain": plain,
            "embed_ratio": embed_ratio, "scale_ratio": scale_ratio}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
