"""``quarry build``: the PySpark job that validates, chunks, contextualizes, embeds and
publishes sharded per-tenant indexes (DESIGN §3, §7).

Stages (each a Spark transformation delegating to ``quarry.core`` via
``quarry.jobs.stages``; each is materialised once, timed and reported):

    read        file list -> mapInPandas(core's per-format readers)      raw records
    validate    mapInPandas(core.sources.validate); duplicates by window  docs | bad
    quarantine  bad records -> <root>/_quarantine/<run-id>/part-*.jsonl   per-tenant counts
    chunk       mapInPandas(core.chunking.chunk_document) + shard_of       one row per doc
    contextualize mapInPandas(contextualizer.contextualize_many)         per document
    embed       explode + mapInPandas(embedder.encode), model cached per worker
    stats       per-partition TermStats, treeReduce -> only stats reach the driver
    build       groupBy(tenant, shard).cogroup(parents).applyInPandas(core.index.build_shard)
                -> upload into <root>/<tenant>/gen-<n>/shard-<k>/; ShardInfo rows back
    manifest    driver: counts checked, core.index.make_manifest + report.json
    publish     core.layout.publish: checksums re-verified, CURRENT switched atomically

Passages and embeddings never reach the driver: it collects only counts, cost sums,
term statistics and ShardInfo rows.

Run it as ``quarry build ...``, ``python -m quarry.jobs.build ...`` or
``spark-submit jobs/build.py ...`` (see infra/spark/README.md).
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import hashlib
import json
import math
import os
import secrets
import sys
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

from quarry.jobs.report import BuildReport, Progress, StageTiming, TenantReport, peak_rss_mb

PAUSE_ENV = "QUARRY_TEST_PAUSE_AT"  # tests: the driver sleeps forever at this stage ...
PAUSE_FILE_ENV = "QUARRY_TEST_PAUSE_FILE"  # ... after writing this marker file
STAGES = ("read", "validate", "quarantine", "chunk", "contextualize", "embed", "stats", "build",
          "manifest", "publish")


class BuildError(Exception):
    """A usage or input problem (bad path, unknown tenant): exit code 2, no traceback."""


class BuildSettings(BaseModel):
    """Everything one build needs, validated once at the edge."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    source: str = Field(description="JSONL/Parquet/Markdown file or folder (a path every executor can read)")
    index_root: str = Field(description="local path or fsspec URI (s3://bucket/prefix)")
    master: str | None = Field(default=None, description="Spark master; None = spark-submit's or local[*]")
    tenants: tuple[str, ...] | None = None
    shard_docs: int = Field(default=50_000, ge=1, description="documents per shard (n_shards = ceil(docs/this))")
    contextualizer: str = Field(default="extractive", pattern="^(extractive|llm|none)$")
    llm: Any = None  # quarry.core.contextualize.LLMSettings when contextualizer == "llm"
    llm_api_key: SecretStr | None = None
    embedder: str = Field(default="default", description="'default' (packaged MiniLM), 'hashing[:dim]' or a model dir")
    batch_size: int = Field(default=64, ge=1)
    chunk_tokens: int = Field(default=200, ge=16, description="chunker max_tokens per passage")
    partitions: int | None = Field(default=None, ge=1, description="partitions for chunk/embed; default 2x cores")
    approx_threshold: int | None = None
    publish: bool = True
    gate_cases: str | None = Field(default=None, description="evidence-case folder gating publication (jobs/case_gate.py)")
    report_path: str | None = None
    run_id: str | None = None
    quiet: bool = False

    @field_validator("tenants")
    @classmethod
    def _tenants(cls, v):
        if v is None:
            return None
        v = tuple(sorted({t.strip() for t in v if t.strip()}))
        return v or None


# --------------------------------------------------------------------------- helpers


def _pause(stage: str) -> None:
    if os.environ.get(PAUSE_ENV) == stage:
        marker = os.environ.get(PAUSE_FILE_ENV)
        if marker:
            Path(marker).write_text(f"{stage} {os.getpid()}\n")
        print(f"[quarry build] paused at stage {stage!r} ({PAUSE_ENV})", file=sys.stderr, flush=True)
        while True:
            time.sleep(1)


def list_source_files(source: str | Path) -> list[str]:
    """The files ``core.sources.read_records`` would read, in its (sorted) order."""
    from quarry.core.sources import iter_source_files

    root = Path(source)
    if root.is_file():
        if not any(root.name.lower().endswith(x) for x in (".jsonl", ".ndjson", ".parquet", ".md", ".markdown")):
            raise BuildError(f"{root}: unsupported source format (expected .jsonl, .ndjson, .parquet or .md)")
        return [str(root)]
    return [str(f) for f in iter_source_files(root)]


def source_watermark(files: list[str]) -> str:
    """A fingerprint of the input (paths, sizes, mtimes) recorded in the manifest."""
    h = hashlib.sha256()
    latest = 0.0
    for f in files:
        st = os.stat(f)
        latest = max(latest, st.st_mtime)
        h.update(f"{f}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    when = dt.datetime.fromtimestamp(latest, dt.timezone.utc).isoformat(timespec="seconds") if files else "none"
    return f"files={len(files)};latest_mtime={when};sha256={h.hexdigest()[:16]}"


def _check_paths(s: BuildSettings) -> None:
    from quarry.core import layout

    if "://" in s.source and not s.source.startswith("file://"):
        raise BuildError(f"--source {s.source}: the source must be a path every executor can read "
                         "(local disk, NFS, or a mounted bucket); object-store sources are not read directly")
    src = Path(s.source.removeprefix("file://"))
    if not src.exists():
        raise BuildError(f"--source {src}: no such file or directory")
    try:
        fs, path = layout.fs_and_path(s.index_root)
    except (ValueError, ImportError) as e:
        raise BuildError(f"--index-root {s.index_root}: cannot open ({e})") from e
    if layout.is_local(s.index_root):
        p = Path(path)
        if p.exists() and not p.is_dir():
            raise BuildError(f"--index-root {s.index_root}: exists and is not a directory")
        try:
            p.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise BuildError(f"--index-root {s.index_root}: cannot create ({e})") from e
        if not os.access(p, os.W_OK):
            raise BuildError(f"--index-root {s.index_root}: not writable")


def _sum_by_tenant(df, cols: list[str]) -> dict[str, dict[str, int]]:
    from pyspark.sql import functions as F

    rows = df.groupBy("tenant").agg(*[F.sum(c).alias(c) for c in cols]).collect()
    return {r["tenant"]: {c: int(r[c] or 0) for c in cols} for r in rows}


def _jvm_heap_peak_mb(spark) -> float | None:
    try:
        mf = spark._jvm.java.lang.management.ManagementFactory
        total = 0
        for pool in mf.getMemoryPoolMXBeans():
            if str(pool.getType()) == "Heap memory":
                total += pool.getPeakUsage().getUsed()
        return round(total / 2**20, 1)
    except Exception:
        return None


# --------------------------------------------------------------------------- the job


def run_build(settings: BuildSettings, spark=None) -> BuildReport:
    """Run the build; return its report. Raises ``BuildError`` on bad input.

    ``spark``: an existing SparkSession (tests, notebooks); otherwise one is created from
    ``settings.master`` and stopped at the end.
    """
    _check_paths(settings)
    files = list_source_files(settings.source.removeprefix("file://"))
    if not files:
        raise BuildError(f"--source {settings.source}: no .jsonl, .ndjson, .parquet or .md files found")
    own = spark is None
    if own:
        from quarry.jobs.spark import get_spark

        spark = get_spark(settings.master, app_name="quarry-build")
    try:
        return _run(settings, spark, files)
    finally:
        if own:
            spark.stop()


def _run(s: BuildSettings, spark, files: list[str]) -> BuildReport:
    from pyspark import StorageLevel
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from quarry.core import layout
    from quarry.core.chunking import CHUNKER_VERSION
    from quarry.core.contextualize import CostAccount
    from quarry.core.embedder_factory import build_embedder
    from quarry.core.index import APPROX_THRESHOLD, ShardInfo, TermStats, build_shard, make_manifest
    from quarry.jobs import stages as st

    t_start = time.monotonic()
    run_id = s.run_id or dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(3)
    root = s.index_root.rstrip("/")
    sc = spark.sparkContext
    par = s.partitions or max(2, sc.defaultParallelism * 2)
    embedder = build_embedder(s.embedder, batch_size=s.batch_size)  # not loaded on the driver: name and dim only
    approx = s.approx_threshold or APPROX_THRESHOLD
    llm_json = s.llm.model_dump_json() if s.llm is not None else None
    if s.contextualizer == "llm" and s.llm is None:
        raise BuildError("--contextualizer llm needs --llm-url and --llm-model")
    report = BuildReport(
        run_id=run_id, source=s.source, index_root=root, master=sc.master, contextualizer=s.contextualizer,
        embedder={"spec": s.embedder, "name": embedder.name, "dim": int(embedder.dim), "batch_size": s.batch_size},
        shard_docs=s.shard_docs,
    )
    prog = Progress(run_id, spark, quiet=s.quiet)
    persisted: list = []
    mem = StorageLevel.MEMORY_AND_DISK

    def keep(df):
        df = df.persist(mem)
        persisted.append(df)
        return df

    def stage(name: str):
        _pause(name)
        prog.start(name)
        sc.setJobGroup(f"quarry-{run_id}", f"quarry build: {name}")

    def done(name: str, **counts) -> None:
        report.stages.append(prog.done(name, counts))

    try:
        # ---- read
        stage("read")
        files_df = spark.createDataFrame(list(enumerate(files)), st.FILES_SCHEMA)
        files_df = files_df.repartition(min(len(files), par))
        read_root = s.source.removeprefix("file://")
        raw = keep(files_df.mapInPandas(functools.partial(st.read_files, root=read_root), st.RAW_SCHEMA))
        n_raw = raw.count()
        done("read", files=len(files), records=n_raw)

        # ---- validate (+ tenant filter, duplicates)
        stage("validate")
        val = keep(raw.repartition(par).mapInPandas(st.validate_records, st.VALIDATED_SCHEMA))
        by_tenant_kind = {(r["tenant"], r["kind"]): r["count"] for r in val.groupBy("tenant", "kind").count().collect()}
        seen = sorted({t for t, _ in by_tenant_kind} - {st.UNKNOWN_TENANT})
        if s.tenants:
            unknown = [t for t in s.tenants if t not in seen]
            if unknown:
                raise BuildError(f"--tenants names tenant(s) not in the source: {', '.join(unknown)}; "
                                 f"tenants found: {', '.join(seen) or '(none)'}")
            wanted = list(s.tenants) + [st.UNKNOWN_TENANT]
            val_f = val.filter(F.col("tenant").isin(wanted))
        else:
            val_f = val
        n_in = sum(c for (t, _), c in by_tenant_kind.items() if not s.tenants or t in s.tenants or t == st.UNKNOWN_TENANT)
        report.input_records = n_in
        report.filtered_out = n_raw - n_in
        docs = val_f.filter(F.col("kind") == "doc")
        w = Window.partitionBy("tenant", "doc_id", "version").orderBy("file_idx", "rec_idx")
        ranked = docs.withColumn("_rn", F.row_number().over(w))
        good = keep(ranked.filter(F.col("_rn") == 1).select("tenant", "doc_id", "doc_json"))
        dups = ranked.filter(F.col("_rn") > 1).select(
            "tenant", "record_id", "source", F.lit("duplicate").alias("reason"))
        bad = val_f.filter(F.col("kind") == "bad").select("tenant", "record_id", "source", "reason")
        doc_counts = {r["tenant"]: int(r["count"]) for r in good.groupBy("tenant").count().collect()}
        n_docs = sum(doc_counts.values())
        done("validate", input=n_in, documents=n_docs, filtered_out=report.filtered_out)

        # ---- quarantine
        stage("quarantine")
        q_uri = layout.join(root, "_quarantine", run_id)
        q_counts = {r["tenant"]: int(r["n"]) for r in bad.unionByName(dups).coalesce(max(1, min(par, 4))).mapInPandas(
            functools.partial(st.write_quarantine, out_uri=q_uri), st.QUARANTINE_OUT).groupBy("tenant")
            .agg(F.sum("n").alias("n")).collect()}
        report.quarantined = sum(q_counts.values())
        report.quarantine_uri = q_uri if report.quarantined else None
        done("quarantine", quarantined=report.quarantined, uri=q_uri if report.quarantined else "-")

        n_shards = {t: max(1, math.ceil(n / s.shard_docs)) for t, n in doc_counts.items()}
        all_tenants = sorted(set(doc_counts) | set(q_counts))
        for t in all_tenants:
            inp = sum(c for (tt, _), c in by_tenant_kind.items() if tt == t)
            report.tenants[t] = TenantReport(tenant=t, input_records=inp, documents=doc_counts.get(t, 0),
                                             quarantined=q_counts.get(t, 0), shards=n_shards.get(t, 0))
        bad_acct = [t for t, r in report.tenants.items() if not r.accounted]
        if bad_acct:
            raise RuntimeError(f"accounting failed for {bad_acct}: input != documents + quarantined")

        # ---- chunk
        stage("chunk")
        chunked = keep(good.repartition(par, "doc_id").mapInPandas(
            functools.partial(st.chunk_docs, n_shards=n_shards, max_tokens=s.chunk_tokens), st.CHUNKED_SCHEMA))
        chunk_sums = _sum_by_tenant(chunked.withColumn("_empty", (F.col("n_passages") == 0).cast("long")),
                                    ["n_passages", "n_parents", "_empty"])
        for t, c in chunk_sums.items():
            report.tenants[t].passages, report.tenants[t].parents = c["n_passages"], c["n_parents"]
            report.tenants[t].documents_without_passages = c["_empty"]
        report.documents, report.passages = n_docs, sum(c["n_passages"] for c in chunk_sums.values())
        done("chunk", documents=n_docs, passages=report.passages,
             parents=sum(c["n_parents"] for c in chunk_sums.values()))

        # ---- contextualize
        stage("contextualize")
        api_key = s.llm_api_key
        ctxd = keep(chunked.mapInPandas(functools.partial(
            st.contextualize_docs, kind=s.contextualizer, llm_json=llm_json, api_key=api_key), st.CONTEXT_SCHEMA))
        cost_cols = [f"ctx_{c}" for c in st.COST_COLUMNS]
        costs = _sum_by_tenant(ctxd, cost_cols)
        price_in = s.llm.price_in_per_1k if s.llm is not None else 0.0
        price_out = s.llm.price_out_per_1k if s.llm is not None else 0.0
        total = CostAccount(price_in, price_out)
        for t, c in costs.items():
            acct = CostAccount(price_in, price_out)
            acct.merge({k.removeprefix("ctx_"): v for k, v in c.items()})
            report.tenants[t].contextualizer_cost = {"kind": s.contextualizer, **acct.snapshot()}
            total.merge(acct)
        report.contextualizer_cost = {"kind": s.contextualizer, **total.snapshot()}
        done("contextualize", kind=s.contextualizer, documents=n_docs, requests=total.requests,
             cost=round(total.cost, 6))
        chunked.unpersist()

        # ---- embed
        stage("embed")
        exploded = ctxd.select("tenant", "shard", "doc_id", F.explode("passages").alias("passage_json"))
        embedded = keep(exploded.repartition(par).mapInPandas(
            functools.partial(st.embed_passages, spec=s.embedder, batch_size=s.batch_size,
                              torch_threads=int(sc.getConf().get("spark.task.cpus", "1"))), st.EMBEDDED_SCHEMA))
        t_embed = time.monotonic()
        emb_rows = embedded.groupBy("tenant").agg(F.count("*").alias("n"), F.sum("embed_tokens").alias("tok")).collect()
        embed_s = time.monotonic() - t_embed
        workers = embedded.select("worker_pid", "model_loads").groupBy("worker_pid").agg(
            F.max("model_loads").alias("loads")).collect()
        n_emb = 0
        for r in emb_rows:
            report.tenants[r["tenant"]].tokens_embedded = int(r["tok"] or 0)
            n_emb += int(r["n"])
        if n_emb != report.passages:
            raise RuntimeError(f"embedded {n_emb} passages but chunked {report.passages}")
        report.embed = {
            "passages": n_emb, "seconds": round(embed_s, 3),
            "passages_per_s": round(n_emb / embed_s, 1) if embed_s > 0 else None,
            "workers": len(workers), "max_model_loads_per_worker": max((int(w_["loads"]) for w_ in workers), default=0),
            "tokens": sum(t.tokens_embedded for t in report.tenants.values()),
        }
        done("embed", passages=n_emb, tokens=report.embed["tokens"], workers=len(workers),
             passages_per_s=report.embed["passages_per_s"])

        # ---- tenant-wide term statistics (only the stats reach the driver)
        stage("stats")
        stats: dict[str, TermStats] = (
            embedded.select("tenant", "passage_json").rdd.map(tuple)
            .mapPartitions(st.partial_term_stats).treeReduce(st.merge_term_stats, depth=2)
        ) if n_emb else {}
        done("stats", tenants=len(stats), terms=sum(len(v.df) for v in stats.values()))

        # ---- build shards
        stage("build")
        tenants_to_build = sorted(t for t in stats)
        generations = {t: layout.next_generation(root, t) for t in tenants_to_build}
        infos: dict[str, list[ShardInfo]] = {t: [] for t in tenants_to_build}
        dims: dict[str, int] = {}
        if tenants_to_build:
            stats_bc = sc.broadcast(stats)
            parents = ctxd.select("tenant", "shard", F.explode("parents").alias("parent_json"))
            built = (embedded.select("tenant", "shard", "passage_json", "embedding").groupBy("tenant", "shard")
                     .cogroup(parents.groupBy("tenant", "shard"))
                     .applyInPandas(functools.partial(st.build_one_shard, root=root, generations=generations,
                                                      stats_bc=stats_bc, dim=int(embedder.dim),
                                                      approx_threshold=approx), st.SHARD_INFO_SCHEMA)
                     .collect())
            for r in built:
                infos[r["tenant"]].append(ShardInfo(
                    shard=int(r["shard"]), passages=int(r["passages"]), parents=int(r["parents"]),
                    documents=int(r["documents"]), dense_kind=r["dense_kind"], checksums=json.loads(r["checksums"])))
                dims[r["tenant"]] = int(r["dim"])
            stats_bc.unpersist()
        # Hash sharding can leave a shard empty: build it here (no passages touch the driver).
        import tempfile

        import numpy as np

        for t in tenants_to_build:
            have = {i.shard for i in infos[t]}
            for k in range(n_shards[t]):
                if k in have:
                    continue
                with tempfile.TemporaryDirectory(prefix="quarry-shard-") as tmp:
                    local = Path(tmp) / f"shard-{k}"
                    info = build_shard(t, k, [], [], np.zeros((0, int(embedder.dim)), np.float32), stats[t],
                                       local, approx)
                    layout.upload_dir(local, layout.shard_dir(root, t, generations[t], k))
                infos[t].append(info)
        done("build", tenants=len(tenants_to_build), shards=sum(len(v) for v in infos.values()))

        # ---- manifest (counts verified before anything is written)
        stage("manifest")
        watermark = source_watermark(files)
        for t in tenants_to_build:
            tr = report.tenants[t]
            got = sorted(i.shard for i in infos[t])
            if got != list(range(n_shards[t])):
                raise RuntimeError(f"{t}: built shards {got}, expected 0..{n_shards[t] - 1}")
            if sum(i.passages for i in infos[t]) != tr.passages or sum(i.parents for i in infos[t]) != tr.parents:
                raise RuntimeError(f"{t}: shard counts do not match the chunk stage's counts")
            tr.generation = generations[t]
            tr.generation_uri = layout.generation_dir(root, t, generations[t])
        report.peak_driver_rss_mb = round(peak_rss_mb(), 1)
        report.jvm_driver_heap_peak_mb = _jvm_heap_peak_mb(spark)
        report.seconds = time.monotonic() - t_start
        for t in tenants_to_build:
            tr = report.tenants[t]
            tenant_report = _tenant_report_json(report, t)
            layout.write_json(layout.join(tr.generation_uri, "report.json"), tenant_report)
            manifest = make_manifest(t, generations[t], infos[t], stats[t], embedder.name,
                                     dims.get(t, int(embedder.dim)), CHUNKER_VERSION, watermark,
                                     {"run_id": run_id, "contextualizer": s.contextualizer, "report": tenant_report},
                                     encoder=embedder.encoder)
            layout.write_json(layout.manifest_path(root, t, generations[t]), manifest)
        done("manifest", tenants=len(tenants_to_build))

        # ---- publish (layout.publish re-verifies every shard's checksums first)
        stage("publish")
        if s.publish:
            for t in tenants_to_build:
                if s.gate_cases:  # eval-gated promotion: unpublished unless no worse than live
                    from quarry.jobs.case_gate import gate_generation

                    gate = gate_generation(root, t, generations[t], s.gate_cases)
                    prog.line(f"{t}: case gate {'passed' if gate['publish'] else 'REFUSED'}: {gate['reason']}"
                              + (f"; regressed: {', '.join(gate.get('regressed') or [])}" if gate.get("regressed") else ""))
                    if not gate["publish"]:
                        continue
                layout.publish(root, t, generations[t])
                report.tenants[t].published = True
            report.published = all(report.tenants[t].published for t in tenants_to_build)
        done("publish", published=sum(report.tenants[t].published for t in tenants_to_build) if s.publish else 0)
    finally:
        prog.close()
        for df in persisted:
            try:
                df.unpersist()
            except Exception:
                pass

    report.seconds = time.monotonic() - t_start
    report.docs_per_s = round(report.documents / report.seconds, 2) if report.seconds else 0.0
    report.peak_driver_rss_mb = round(peak_rss_mb(), 1)
    report.jvm_driver_heap_peak_mb = _jvm_heap_peak_mb(spark)
    run_json = report.model_dump(mode="json")
    layout.write_json(layout.join(root, "_runs", f"{run_id}.json"), run_json)
    if s.report_path:
        Path(s.report_path).parent.mkdir(parents=True, exist_ok=True)
        Path(s.report_path).write_text(json.dumps(run_json, indent=2, sort_keys=True))
    prog.line(f"finished: {report.documents} documents, {report.quarantined} quarantined, {report.passages} "
              f"passages in {report.seconds:.1f}s ({report.docs_per_s} docs/s); report {root}/_runs/{run_id}.json")
    return report


def _tenant_report_json(report: BuildReport, tenant: str) -> dict[str, Any]:
    tr = report.tenants[tenant]
    return {
        "run_id": report.run_id,
        **tr.model_dump(mode="json", exclude={"published"}),
        "accounting": {"input_records": tr.input_records, "documents": tr.documents,
                       "quarantined": tr.quarantined, "ok": tr.accounted},
        "quarantine_uri": report.quarantine_uri if tr.quarantined else None,
        "embedder": report.embedder,
        "stage_seconds": report.stage_seconds(),  # run-wide: stages process every tenant together
        "run_seconds_so_far": round(report.seconds, 3),
        "docs_per_s": round(report.documents / report.seconds, 2) if report.seconds else None,
    }


# --------------------------------------------------------------------------- sources for other callers


def write_source_jsonl(docs, path: str | Path) -> Path:
    """Write SourceDocuments as a JSONL source the job reads (e.g. a BEIR corpus loaded
    with ``core.sources.load_beir_corpus``, for ``quarry eval beir``)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    with p.open("w", encoding="utf-8") as fh:
        for d in docs:
            fh.write(d.model_dump_json(exclude_defaults=True) + "\n")
    return p


# --------------------------------------------------------------------------- CLI


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--source", required=True, help="JSONL/Parquet file or folder, or a Markdown folder")
    p.add_argument("--index-root", required=True, help="local path or fsspec URI (s3://bucket/prefix)")
    p.add_argument("--master", default=None, help="Spark master (default: spark-submit's, else local[*])")
    p.add_argument("--tenants", default=None, help="comma-separated tenants to build (default: all)")
    p.add_argument("--shard-docs", type=int, default=50_000, help="documents per shard (default 50000)")
    p.add_argument("--contextualizer", choices=("extractive", "llm", "none"), default="extractive")
    g = p.add_argument_group("llm contextualizer (an OpenAI-compatible endpoint)")
    g.add_argument("--llm-url", help="base URL before /chat/completions, e.g. http://vllm:8000/v1")
    g.add_argument("--llm-model", help="served model name")
    g.add_argument("--llm-api-key-env", help="environment variable holding the API key")
    g.add_argument("--llm-price-in", type=float, default=0.0, help="currency per 1k input tokens")
    g.add_argument("--llm-price-out", type=float, default=0.0, help="currency per 1k output tokens")
    g.add_argument("--llm-concurrency", type=int, default=4, help="requests in flight per Python worker")
    p.add_argument("--embedder", default="default",
                   help="'default' (packaged all-MiniLM-L6-v2), 'hashing[:dim]', or a local model directory")
    p.add_argument("--batch-size", type=int, default=64, help="embedding batch size")
    p.add_argument("--chunk-tokens", type=int, default=200, help="max tokens per passage where structure allows (default 200)")
    p.add_argument("--partitions", type=int, default=None, help="partitions for chunk/embed (default 2x cores)")
    p.add_argument("--no-publish", action="store_true", help="build and verify, but leave CURRENT alone")
    p.add_argument("--gate-cases", default=None, metavar="DIR",
                   help="publish a tenant's new generation only if its evidence cases in DIR hold isolation and "
                        "resolution accuracy and candidate recall are no worse than on the live generation")
    p.add_argument("--report", dest="report_path", default=None, help="also write the run report JSON here")
    p.add_argument("--json", action="store_true", help="print the run report as JSON on stdout")
    p.add_argument("--quiet", action="store_true", help="no progress lines")


def settings_from_args(args: argparse.Namespace) -> BuildSettings:
    llm = None
    key = None
    if args.contextualizer == "llm":
        from quarry.core.contextualize import LLMSettings

        if not args.llm_url or not args.llm_model:
            raise BuildError("--contextualizer llm needs --llm-url and --llm-model")
        llm = LLMSettings(base_url=args.llm_url, model=args.llm_model, api_key_env=args.llm_api_key_env,
                          price_in_per_1k=args.llm_price_in, price_out_per_1k=args.llm_price_out,
                          max_concurrency=args.llm_concurrency)
        if args.llm_api_key_env:
            val = os.environ.get(args.llm_api_key_env)
            if not val:
                raise BuildError(f"--llm-api-key-env {args.llm_api_key_env}: the variable is not set")
            key = SecretStr(val)
    if args.shard_docs < 1 or args.batch_size < 1:
        raise BuildError("--shard-docs and --batch-size must be >= 1")
    if args.gate_cases:
        from quarry.eval.cases import CaseError, load_cases

        try:
            load_cases(args.gate_cases)
        except CaseError as e:
            raise BuildError(f"--gate-cases: {e}") from None
    return BuildSettings(
        source=args.source, index_root=args.index_root, master=args.master,
        tenants=tuple(args.tenants.split(",")) if args.tenants else None, shard_docs=args.shard_docs,
        contextualizer=args.contextualizer, llm=llm, llm_api_key=key, embedder=args.embedder,
        batch_size=args.batch_size, chunk_tokens=args.chunk_tokens, partitions=args.partitions, publish=not args.no_publish,
        gate_cases=args.gate_cases, report_path=args.report_path, quiet=args.quiet,
    )


def run(args: argparse.Namespace) -> int:
    try:
        settings = settings_from_args(args)
        report = run_build(settings)
    except BuildError as e:
        print(f"quarry build: error: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(report.model_dump(mode="json"), indent=2, sort_keys=True))
    else:
        for t, tr in sorted(report.tenants.items()):
            print(f"{t}: input={tr.input_records} documents={tr.documents} quarantined={tr.quarantined} "
                  f"passages={tr.passages} shards={tr.shards} gen={tr.generation} published={tr.published}")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="quarry build", description=__doc__.split("\n\n")[0])
    add_arguments(p)
    return run(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
