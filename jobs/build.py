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
    build       groupBy(tenant, shard).cogroup(parents).applyInPandas(core.index.build_and_upload_shard)
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
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator
from pyspark import StorageLevel
from pyspark.sql import Window
from pyspark.sql import functions as F

from quarry.cli import main as cli_main
from quarry.core.index import layout
from quarry.core.ingest.chunking import CHUNKER_VERSION
from quarry.core.ingest.contextualize import CostAccount, LLMSettings
from quarry.core.embed.factory import build_embedder
from quarry.core.index.shards import APPROX_THRESHOLD, ShardInfo, TermStats, build_and_upload_shard, make_manifest
from quarry.core.ingest.sources import iter_source_files
from quarry.jobs import stages as st
from quarry.jobs.case_gate import gate_generation
from quarry.jobs.report import BuildReport, Progress, TenantReport, new_run_id, peak_rss_mb
from quarry.jobs.spark import get_spark

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
    llm: LLMSettings | None = None  # when contextualizer == "llm"
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


def list_source_files(source: str | Path) -> list[str]:
    """The files ``core.sources.read_records`` would read, in its (sorted) order."""
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
        spark = get_spark(settings.master, app_name="quarry-build")
    try:
        return _run(settings, spark, files)
    finally:
        if own:
            spark.stop()


@dataclass
class _Job:
    """What the stages of one run share: settings, Spark, and the report they fill in."""

    s: BuildSettings
    spark: Any
    files: list[str]
    run_id: str
    par: int  # partitions for the wide stages
    embedder: Any  # name and dim only: the model is never loaded on the driver
    report: BuildReport
    prog: Progress
    t_start: float = field(default_factory=time.monotonic)
    persisted: list = field(default_factory=list)

    @property
    def root(self) -> str:
        return self.report.index_root

    @property
    def sc(self):
        return self.spark.sparkContext

    def keep(self, df):
        df = df.persist(StorageLevel.MEMORY_AND_DISK)
        self.persisted.append(df)
        return df

    def start(self, name: str) -> None:
        self.prog.start(name)
        self.sc.setJobGroup(f"quarry-{self.run_id}", f"quarry build: {name}")

    def done(self, name: str, **counts) -> None:
        self.report.stages.append(self.prog.done(name, counts))

    def close(self) -> None:
        self.prog.close()
        for df in self.persisted:
            try:
                df.unpersist()
            except Exception:  # noqa: BLE001 - a dead session has nothing left to free
                pass


@dataclass(frozen=True)
class _Validated:
    good: Any  # DataFrame (tenant, doc_id, doc_json): one row per (tenant, doc_id, version)
    rejected: Any  # DataFrame (tenant, record_id, source, reason): bad records and duplicates
    by_tenant_kind: dict[tuple[str, str], int]  # validated rows per (tenant, "doc" | "bad")
    doc_counts: dict[str, int]  # documents per tenant after de-duplication


@dataclass(frozen=True)
class _Built:
    tenants: list[str]
    generations: dict[str, int]
    infos: dict[str, list[ShardInfo]]
    dims: dict[str, int]


def _run(s: BuildSettings, spark, files: list[str]) -> BuildReport:
    job = _new_job(s, spark, files)
    try:
        raw, n_raw = _read(job)
        v = _validate(job, raw, n_raw)
        q_counts = _quarantine(job, v)
        n_shards = _account(job, v, q_counts)
        chunked = _chunk(job, v.good, n_shards)
        ctxd = _contextualize(job, chunked)
        embedded, n_emb = _embed(job, ctxd)
        stats = _stats(job, embedded, n_emb)
        built = _build(job, ctxd, embedded, stats, n_shards)
        _manifest(job, built, stats, n_shards)
        _publish(job, built)
    finally:
        job.close()
    return _finish(job)


def _new_job(s: BuildSettings, spark, files: list[str]) -> _Job:
    if s.contextualizer == "llm" and s.llm is None:
        raise BuildError("--contextualizer llm needs --llm-url and --llm-model")
    run_id = s.run_id or new_run_id()
    sc = spark.sparkContext
    embedder = build_embedder(s.embedder, batch_size=s.batch_size)
    report = BuildReport(
        run_id=run_id, source=s.source, index_root=s.index_root.rstrip("/"), master=sc.master,
        contextualizer=s.contextualizer, shard_docs=s.shard_docs,
        embedder={"spec": s.embedder, "name": embedder.name, "dim": int(embedder.dim), "batch_size": s.batch_size},
    )
    return _Job(s=s, spark=spark, files=files, run_id=run_id, par=s.partitions or max(2, sc.defaultParallelism * 2),
                embedder=embedder, report=report, prog=Progress(run_id, spark, quiet=s.quiet))


def _read(job: _Job):
    """Source files -> raw records (core's per-format readers, on the executors)."""
    job.start("read")
    files_df = job.spark.createDataFrame(list(enumerate(job.files)), st.FILES_SCHEMA)
    files_df = files_df.repartition(min(len(job.files), job.par))
    read_root = job.s.source.removeprefix("file://")
    raw = job.keep(files_df.mapInPandas(functools.partial(st.read_files, root=read_root), st.RAW_SCHEMA))
    n_raw = raw.count()
    job.done("read", files=len(job.files), records=n_raw)
    return raw, n_raw


def _validate(job: _Job, raw, n_raw: int) -> _Validated:
    """Validate, keep the requested tenants, and set later copies of a (doc_id, version) aside."""
    s, report = job.s, job.report
    job.start("validate")
    val = job.keep(raw.repartition(job.par).mapInPandas(st.validate_records, st.VALIDATED_SCHEMA))
    by_tenant_kind = {(r["tenant"], r["kind"]): r["count"] for r in val.groupBy("tenant", "kind").count().collect()}
    seen = sorted({t for t, _ in by_tenant_kind} - {st.UNKNOWN_TENANT})
    if s.tenants:
        unknown = [t for t in s.tenants if t not in seen]
        if unknown:
            raise BuildError(f"--tenants names tenant(s) not in the source: {', '.join(unknown)}; "
                             f"tenants found: {', '.join(seen) or '(none)'}")
        val = val.filter(F.col("tenant").isin([*s.tenants, st.UNKNOWN_TENANT]))
    n_in = sum(c for (t, _), c in by_tenant_kind.items() if not s.tenants or t in s.tenants or t == st.UNKNOWN_TENANT)
    report.input_records = n_in
    report.filtered_out = n_raw - n_in
    w = Window.partitionBy("tenant", "doc_id", "version").orderBy("file_idx", "rec_idx")
    ranked = val.filter(F.col("kind") == "doc").withColumn("_rn", F.row_number().over(w))
    good = job.keep(ranked.filter(F.col("_rn") == 1).select("tenant", "doc_id", "doc_json"))
    dups = ranked.filter(F.col("_rn") > 1).select("tenant", "record_id", "source", F.lit("duplicate").alias("reason"))
    bad = val.filter(F.col("kind") == "bad").select("tenant", "record_id", "source", "reason")
    doc_counts = {r["tenant"]: int(r["count"]) for r in good.groupBy("tenant").count().collect()}
    job.done("validate", input=n_in, documents=sum(doc_counts.values()), filtered_out=report.filtered_out)
    return _Validated(good, bad.unionByName(dups), by_tenant_kind, doc_counts)


def _quarantine(job: _Job, v: _Validated) -> dict[str, int]:
    """Rejected records -> <root>/_quarantine/<run-id>/; quarantined records per tenant."""
    report = job.report
    job.start("quarantine")
    q_uri = layout.join(job.root, "_quarantine", job.run_id)
    q_counts = {r["tenant"]: int(r["n"]) for r in v.rejected.coalesce(max(1, min(job.par, 4))).mapInPandas(
        functools.partial(st.write_quarantine, out_uri=q_uri), st.QUARANTINE_OUT).groupBy("tenant")
        .agg(F.sum("n").alias("n")).collect()}
    report.quarantined = sum(q_counts.values())
    report.quarantine_uri = q_uri if report.quarantined else None
    job.done("quarantine", quarantined=report.quarantined, uri=q_uri if report.quarantined else "-")
    return q_counts


def _account(job: _Job, v: _Validated, q_counts: dict[str, int]) -> dict[str, int]:
    """Per-tenant reports; every input record is a document or quarantined. Returns shards per tenant."""
    n_shards = {t: max(1, math.ceil(n / job.s.shard_docs)) for t, n in v.doc_counts.items()}
    for t in sorted(set(v.doc_counts) | set(q_counts)):
        inp = sum(c for (tt, _), c in v.by_tenant_kind.items() if tt == t)
        job.report.tenants[t] = TenantReport(tenant=t, input_records=inp, documents=v.doc_counts.get(t, 0),
                                             quarantined=q_counts.get(t, 0), shards=n_shards.get(t, 0))
    bad_acct = [t for t, r in job.report.tenants.items() if not r.accounted]
    if bad_acct:
        raise RuntimeError(f"accounting failed for {bad_acct}: input != documents + quarantined")
    job.report.documents = sum(v.doc_counts.values())
    return n_shards


def _chunk(job: _Job, good, n_shards: dict[str, int]):
    """Documents -> passages and parent sections (one row per document, with its shard)."""
    report = job.report
    job.start("chunk")
    chunked = job.keep(good.repartition(job.par, "doc_id").mapInPandas(
        functools.partial(st.chunk_docs, n_shards=n_shards, max_tokens=job.s.chunk_tokens), st.CHUNKED_SCHEMA))
    sums = _sum_by_tenant(chunked.withColumn("_empty", (F.col("n_passages") == 0).cast("long")),
                          ["n_passages", "n_parents", "_empty"])
    for t, c in sums.items():
        report.tenants[t].passages, report.tenants[t].parents = c["n_passages"], c["n_parents"]
        report.tenants[t].documents_without_passages = c["_empty"]
    report.passages = sum(c["n_passages"] for c in sums.values())
    job.done("chunk", documents=report.documents, passages=report.passages,
             parents=sum(c["n_parents"] for c in sums.values()))
    return chunked


def _contextualize(job: _Job, chunked):
    """Derived context per passage; the contextualizer's cost summed per tenant."""
    s, report = job.s, job.report
    job.start("contextualize")
    llm_json = s.llm.model_dump_json() if s.llm is not None else None
    ctxd = job.keep(chunked.mapInPandas(functools.partial(
        st.contextualize_docs, kind=s.contextualizer, llm_json=llm_json, api_key=s.llm_api_key), st.CONTEXT_SCHEMA))
    costs = _sum_by_tenant(ctxd, [f"ctx_{c}" for c in st.COST_COLUMNS])
    price_in = s.llm.price_in_per_1k if s.llm is not None else 0.0
    price_out = s.llm.price_out_per_1k if s.llm is not None else 0.0
    total = CostAccount(price_in, price_out)
    for t, c in costs.items():
        acct = CostAccount(price_in, price_out)
        acct.merge({k.removeprefix("ctx_"): v for k, v in c.items()})
        report.tenants[t].contextualizer_cost = {"kind": s.contextualizer, **acct.snapshot()}
        total.merge(acct)
    report.contextualizer_cost = {"kind": s.contextualizer, **total.snapshot()}
    job.done("contextualize", kind=s.contextualizer, documents=report.documents, requests=total.requests,
             cost=round(total.cost, 6))
    chunked.unpersist()
    return ctxd


def _embed(job: _Job, ctxd):
    """One row per passage with its embedding (the model loaded once per Python worker)."""
    report = job.report
    job.start("embed")
    exploded = ctxd.select("tenant", "shard", "doc_id", F.explode("passages").alias("passage_json"))
    embedded = job.keep(exploded.repartition(job.par).mapInPandas(
        functools.partial(st.embed_passages, spec=job.s.embedder, batch_size=job.s.batch_size,
                          torch_threads=int(job.sc.getConf().get("spark.task.cpus", "1"))), st.EMBEDDED_SCHEMA))
    t_embed = time.monotonic()
    rows = embedded.groupBy("tenant").agg(F.count("*").alias("n"), F.sum("embed_tokens").alias("tok")).collect()
    embed_s = time.monotonic() - t_embed
    workers = embedded.select("worker_pid", "model_loads").groupBy("worker_pid").agg(
        F.max("model_loads").alias("loads")).collect()
    n_emb = 0
    for r in rows:
        report.tenants[r["tenant"]].tokens_embedded = int(r["tok"] or 0)
        n_emb += int(r["n"])
    if n_emb != report.passages:
        raise RuntimeError(f"embedded {n_emb} passages but chunked {report.passages}")
    report.embed = {
        "passages": n_emb, "seconds": round(embed_s, 3),
        "passages_per_s": round(n_emb / embed_s, 1) if embed_s > 0 else None,
        "workers": len(workers), "max_model_loads_per_worker": max((int(w["loads"]) for w in workers), default=0),
        "tokens": sum(t.tokens_embedded for t in report.tenants.values()),
    }
    job.done("embed", passages=n_emb, tokens=report.embed["tokens"], workers=len(workers),
             passages_per_s=report.embed["passages_per_s"])
    return embedded, n_emb


def _stats(job: _Job, embedded, n_emb: int) -> dict[str, TermStats]:
    """Tenant-wide term statistics; only the statistics reach the driver."""
    job.start("stats")
    stats: dict[str, TermStats] = (
        embedded.select("tenant", "passage_json").rdd.map(tuple)
        .mapPartitions(st.partial_term_stats).treeReduce(st.merge_term_stats, depth=2)
    ) if n_emb else {}
    job.done("stats", tenants=len(stats), terms=sum(len(v.df) for v in stats.values()))
    return stats


def _build(job: _Job, ctxd, embedded, stats: dict[str, TermStats], n_shards: dict[str, int]) -> _Built:
    """Every (tenant, shard) built and uploaded into the tenant's next generation folder."""
    job.start("build")
    tenants = sorted(stats)
    generations = {t: layout.next_generation(job.root, t) for t in tenants}
    infos: dict[str, list[ShardInfo]] = {t: [] for t in tenants}
    dims: dict[str, int] = {}
    dim = int(job.embedder.dim)
    approx = job.s.approx_threshold or APPROX_THRESHOLD
    if tenants:
        stats_bc = job.sc.broadcast(stats)
        parents = ctxd.select("tenant", "shard", F.explode("parents").alias("parent_json"))
        built = (embedded.select("tenant", "shard", "passage_json", "embedding").groupBy("tenant", "shard")
                 .cogroup(parents.groupBy("tenant", "shard"))
                 .applyInPandas(functools.partial(st.build_one_shard, root=job.root, generations=generations,
                                                  stats_bc=stats_bc, dim=dim, approx_threshold=approx),
                                st.SHARD_INFO_SCHEMA)
                 .collect())
        for r in built:
            infos[r["tenant"]].append(ShardInfo(
                shard=int(r["shard"]), passages=int(r["passages"]), parents=int(r["parents"]),
                documents=int(r["documents"]), dense_kind=r["dense_kind"], checksums=json.loads(r["checksums"])))
            dims[r["tenant"]] = int(r["dim"])
        stats_bc.unpersist()
    for t in tenants:  # hash sharding can leave a shard empty: no passage touches the driver
        have = {i.shard for i in infos[t]}
        for k in (k for k in range(n_shards[t]) if k not in have):
            infos[t].append(build_and_upload_shard(t, k, [], [], np.zeros((0, dim), np.float32), stats[t],
                                                   layout.shard_dir(job.root, t, generations[t], k), approx))
    job.done("build", tenants=len(tenants), shards=sum(len(v) for v in infos.values()))
    return _Built(tenants, generations, infos, dims)


def _manifest(job: _Job, b: _Built, stats: dict[str, TermStats], n_shards: dict[str, int]) -> None:
    """Counts verified against the chunk stage, then each tenant's report and manifest written."""
    report = job.report
    job.start("manifest")
    watermark = source_watermark(job.files)
    for t in b.tenants:
        tr = report.tenants[t]
        got = sorted(i.shard for i in b.infos[t])
        if got != list(range(n_shards[t])):
            raise RuntimeError(f"{t}: built shards {got}, expected 0..{n_shards[t] - 1}")
        if sum(i.passages for i in b.infos[t]) != tr.passages or sum(i.parents for i in b.infos[t]) != tr.parents:
            raise RuntimeError(f"{t}: shard counts do not match the chunk stage's counts")
        tr.generation = b.generations[t]
        tr.generation_uri = layout.generation_dir(job.root, t, b.generations[t])
    _measure(job)
    for t in b.tenants:
        tenant_report = _tenant_report_json(report, t)
        layout.write_json(layout.join(report.tenants[t].generation_uri, "report.json"), tenant_report)
        manifest = make_manifest(t, b.generations[t], b.infos[t], stats[t], job.embedder.name,
                                 b.dims.get(t, int(job.embedder.dim)), CHUNKER_VERSION, watermark,
                                 {"run_id": job.run_id, "contextualizer": job.s.contextualizer,
                                  "report": tenant_report},
                                 encoder=job.embedder.encoder)
        layout.write_json(layout.manifest_path(job.root, t, b.generations[t]), manifest)
    job.done("manifest", tenants=len(b.tenants))


def _publish(job: _Job, b: _Built) -> None:
    """CURRENT switched per tenant (``layout.publish`` re-verifies every shard's checksums
    first); with ``gate_cases``, only where the evidence cases are no worse than live."""
    s, report = job.s, job.report
    job.start("publish")
    if s.publish:
        for t in b.tenants:
            if s.gate_cases:
                gate = gate_generation(job.root, t, b.generations[t], s.gate_cases)
                job.prog.line(f"{t}: case gate {'passed' if gate['publish'] else 'REFUSED'}: {gate['reason']}"
                              + (f"; regressed: {', '.join(gate['regressed'])}" if gate.get("regressed") else ""))
                if not gate["publish"]:
                    continue
            layout.publish(job.root, t, b.generations[t])
            report.tenants[t].published = True
        report.published = all(report.tenants[t].published for t in b.tenants)
    job.done("publish", published=sum(report.tenants[t].published for t in b.tenants) if s.publish else 0)


def _measure(job: _Job) -> None:
    r = job.report
    r.seconds = time.monotonic() - job.t_start
    r.peak_driver_rss_mb = round(peak_rss_mb(), 1)
    r.jvm_driver_heap_peak_mb = _jvm_heap_peak_mb(job.spark)


def _finish(job: _Job) -> BuildReport:
    """The run's report: under <root>/_runs/ and, when asked, at ``report_path``."""
    report, root = job.report, job.root
    _measure(job)
    report.docs_per_s = round(report.documents / report.seconds, 2) if report.seconds else 0.0
    run_json = report.model_dump(mode="json")
    layout.write_json(layout.join(root, "_runs", f"{job.run_id}.json"), run_json)
    if job.s.report_path:
        Path(job.s.report_path).parent.mkdir(parents=True, exist_ok=True)
        Path(job.s.report_path).write_text(json.dumps(run_json, indent=2, sort_keys=True))
    job.prog.line(f"finished: {report.documents} documents, {report.quarantined} quarantined, {report.passages} "
                  f"passages in {report.seconds:.1f}s ({report.docs_per_s} docs/s); "
                  f"report {root}/_runs/{job.run_id}.json")
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
        from quarry.eval.case_model import CaseError, load_cases  # eval is not a dependency of jobs

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
    """``python -m quarry.jobs.build``: the ``quarry build`` command, with the CLI's error reporting."""
    return cli_main(["build", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
