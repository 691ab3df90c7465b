"""The Spark plan of ``quarry build`` (DESIGN §7): the driver side of each stage, from the
source files to every tenant's shards uploaded into its next generation folder.

Each stage is a Spark transformation delegating to ``quarry.core`` through the executor
functions of ``quarry.jobs.stages``; each is materialised once, timed and reported in the
:class:`BuildJob`'s report. Passages and embeddings never reach the driver: it collects
only per-tenant counts, cost sums and statistics totals (never a vocabulary) and
:class:`ShardInfo` rows, all bounded by the number of tenants and shards. Writing manifests and
publishing is ``quarry.jobs.build_publish``; the composition is ``quarry.jobs.build``.
"""

from __future__ import annotations

import functools
import json
import math
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import Window
from pyspark.sql import functions as F

from quarry.core.embed.factory import build_embedder
from quarry.core.errors import UsageError
from quarry.core.index import layout
from quarry.core.index.build import APPROX_THRESHOLD, n_shards_for
from quarry.core.index.lexical import TermStats
from quarry.core.index.manifest import ShardInfo
from quarry.core.ingest.contextualize import CostAccount
from quarry.jobs import stages
from quarry.jobs.build_settings import BuildSettings
from quarry.jobs.report import BuildReport, Progress, TenantReport, new_run_id


@dataclass
class BuildJob:
    """What the stages of one run share: settings, Spark, and the report they fill in."""

    settings: BuildSettings
    spark: Any
    files: list[str]
    run_id: str
    par: int  # partitions for the wide stages (raised with the record count by ``read_sources``)
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
        # On local disk, not in the heap: in local mode the executors are the driver JVM, and
        # cached stage rows (proportional to documents) there starved the aggregations and
        # overflowed the heap at 300,000 documents. Each stage reads its input back once.
        df = df.persist(StorageLevel.DISK_ONLY)
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
class Validated:
    good: Any  # DataFrame (tenant, doc_id, doc_json): one row per (tenant, doc_id, version)
    rejected: Any  # DataFrame (tenant, record_id, source, reason): bad records and duplicates
    by_tenant_kind: dict[tuple[str, str], int]  # validated rows per (tenant, "doc" | "bad")
    doc_counts: dict[str, int]  # documents per tenant after de-duplication


@dataclass(frozen=True)
class BuiltShards:
    tenants: list[str]
    generations: dict[str, int]
    infos: dict[str, list[ShardInfo]]
    dims: dict[str, int]


def new_job(s: BuildSettings, spark, files: list[str]) -> BuildJob:
    if s.contextualizer == "llm" and s.llm is None:
        raise UsageError("--contextualizer llm needs --llm-url and --llm-model")
    run_id = s.run_id or new_run_id()
    sc = spark.sparkContext
    embedder = build_embedder(s.embedder, batch_size=s.batch_size)
    report = BuildReport(
        run_id=run_id, source=s.source, index_root=s.index_root.rstrip("/"), master=sc.master,
        contextualizer=s.contextualizer, shard_docs=s.shard_docs,
        embedder={"spec": s.embedder, "name": embedder.name, "dim": int(embedder.dim), "batch_size": s.batch_size},
    )
    return BuildJob(settings=s, spark=spark, files=files, run_id=run_id,
                    par=s.partitions or max(2, sc.defaultParallelism * 2), embedder=embedder, report=report, prog=Progress(run_id, spark, quiet=s.quiet))


DOCS_PER_PARTITION = 20_000  # records per wide-stage task at most, unless --partitions says otherwise


def partitions_for(n_records: int, base: int) -> int:
    """Partitions for the wide stages: ``base`` (2x cores, or --partitions), raised so that
    no task holds more than :data:`DOCS_PER_PARTITION` records (bounded per-task memory)."""
    return max(base, math.ceil(n_records / DOCS_PER_PARTITION))


def by_tenant_doc(df, par: int):
    """Hash-partition documents by (tenant, doc_id), not doc_id alone: tenants reuse doc ids
    (every tenant may have a ``doc-0``), and hashing the doc id alone put every tenant's
    ``doc-0`` into one task, however many partitions there were."""
    return df.repartition(par, "tenant", "doc_id")


def by_tenant_shard(df, par: int):
    """Hash-partition rows by (tenant, shard): many small tenants share a task, a large
    tenant's shards go to different tasks, and a shard's rows are never split. The shard
    build's groupBy/cogroup on (tenant, shard) then reuses this partitioning."""
    return df.repartition(par, "tenant", "shard")


def _sum_by_tenant(df, cols: list[str]) -> dict[str, dict[str, int]]:
    rows = df.groupBy("tenant").agg(*[F.sum(c).alias(c) for c in cols]).collect()
    return {r["tenant"]: {c: int(r[c] or 0) for c in cols} for r in rows}


DRIVER_THREADS = 16  # tenants written or published at once by the driver (file or object-store round trips)


def for_each_tenant(job: BuildJob, stage: str, tenants: Sequence[str], fn: Callable[[str], Any],
                    threads: int | None = None) -> list[Any]:
    """``[fn(tenant) for tenant in tenants]`` on a pool of driver threads: each tenant's
    manifest, lease and ``CURRENT`` are a few small reads and writes, so with 100,000 tenants
    the round trips, not the bytes, are the cost. A progress line every 15 s; the first error
    is raised once the pool has drained."""
    n, t0, last = len(tenants), time.monotonic(), time.monotonic()
    out: list[Any] = []
    with ThreadPoolExecutor(max_workers=max(1, min(threads or DRIVER_THREADS, n or 1)),
                            thread_name_prefix=f"quarry-{stage}") as pool:
        for i, r in enumerate(pool.map(fn, tenants), 1):
            out.append(r)
            if time.monotonic() - last >= 15.0 and i < n:
                last = time.monotonic()
                job.prog.line(f"{stage:<13} ... tenants {i}/{n}  {last - t0:.0f}s")
    return out


def read_sources(job: BuildJob):
    """Source files -> raw records (core's per-format readers, on the executors)."""
    job.start("read")
    files_df = job.spark.createDataFrame(list(enumerate(job.files)), stages.FILES_SCHEMA)
    files_df = files_df.repartition(min(len(job.files), job.par))
    read_root = job.settings.source.removeprefix("file://")
    raw = job.keep(files_df.mapInPandas(functools.partial(stages.read_files, root=read_root), stages.RAW_SCHEMA))
    n_raw = raw.count()
    if job.settings.partitions is None:
        job.par = partitions_for(n_raw, job.par)
    job.done("read", files=len(job.files), records=n_raw, partitions=job.par)
    return raw, n_raw


def validate(job: BuildJob, raw, n_raw: int) -> Validated:
    """Validate, keep the requested tenants, and set later copies of a (doc_id, version) aside."""
    s, report = job.settings, job.report
    job.start("validate")
    val = job.keep(raw.repartition(job.par).mapInPandas(stages.validate_records, stages.VALIDATED_SCHEMA))
    by_tenant_kind = {(r["tenant"], r["kind"]): r["count"] for r in val.groupBy("tenant", "kind").count().collect()}
    seen = sorted({t for t, _ in by_tenant_kind} - {stages.UNKNOWN_TENANT})
    if s.tenants:
        unknown = [t for t in s.tenants if t not in seen]
        if unknown:
            raise UsageError(f"--tenants names tenant(s) not in the source: {', '.join(unknown)}; "
                             f"tenants found: {', '.join(seen) or '(none)'}")
        val = val.filter(F.col("tenant").isin([*s.tenants, stages.UNKNOWN_TENANT]))
    wanted = set(s.tenants or ())
    n_in = sum(c for (t, _), c in by_tenant_kind.items() if not wanted or t in wanted or t == stages.UNKNOWN_TENANT)
    report.input_records = n_in
    report.filtered_out = n_raw - n_in
    w = Window.partitionBy("tenant", "doc_id", "version").orderBy("file_idx", "rec_idx")
    ranked = val.filter(F.col("kind") == "doc").withColumn("_rn", F.row_number().over(w))
    good = job.keep(ranked.filter(F.col("_rn") == 1).select("tenant", "doc_id", "doc_json"))
    dups = ranked.filter(F.col("_rn") > 1).select("tenant", "record_id", "source", F.lit("duplicate").alias("reason"))
    bad = val.filter(F.col("kind") == "bad").select("tenant", "record_id", "source", "reason")
    doc_counts = {r["tenant"]: int(r["count"]) for r in good.groupBy("tenant").count().collect()}
    job.done("validate", input=n_in, documents=sum(doc_counts.values()), filtered_out=report.filtered_out)
    return Validated(good, bad.unionByName(dups), by_tenant_kind, doc_counts)


def quarantine(job: BuildJob, v: Validated) -> dict[str, int]:
    """Rejected records -> <root>/quarantine/<run-id>/; quarantined records per tenant."""
    report = job.report
    job.start("quarantine")
    q_uri = layout.join(job.root, "_quarantine", job.run_id)
    q_counts = {r["tenant"]: int(r["n"]) for r in v.rejected.coalesce(max(1, min(job.par, 4))).mapInPandas(
        functools.partial(stages.write_quarantine, out_uri=q_uri), stages.QUARANTINE_OUT).groupBy("tenant")
        .agg(F.sum("n").alias("n")).collect()}
    report.quarantined = sum(q_counts.values())
    report.quarantine_uri = q_uri if report.quarantined else None
    job.done("quarantine", quarantined=report.quarantined, uri=q_uri if report.quarantined else "-")
    return q_counts


def account(job: BuildJob, v: Validated, q_counts: dict[str, int]) -> dict[str, int]:
    """Per-tenant reports; every input record is a document or quarantined. Returns shards per tenant."""
    n_shards = {t: n_shards_for(n, job.settings.shard_docs) for t, n in v.doc_counts.items()}
    inputs: dict[str, int] = {}
    for (tt, _), c in v.by_tenant_kind.items():  # one pass: a per-tenant scan was quadratic in tenants
        inputs[tt] = inputs.get(tt, 0) + c
    for t in sorted(set(v.doc_counts) | set(q_counts)):
        inp = inputs.get(t, 0)
        job.report.tenants[t] = TenantReport(tenant=t, input_records=inp, documents=v.doc_counts.get(t, 0),
                                             quarantined=q_counts.get(t, 0), shards=n_shards.get(t, 0))
    bad_acct = [t for t, r in job.report.tenants.items() if not r.accounted]
    if bad_acct:
        raise RuntimeError(f"accounting failed for {bad_acct}: input != documents + quarantined")
    job.report.documents = sum(v.doc_counts.values())
    return n_shards


def chunk(job: BuildJob, good, n_shards: dict[str, int]):
    """Documents -> passages and parent sections (one row per document, with its shard)."""
    report = job.report
    job.start("chunk")
    chunked = job.keep(by_tenant_doc(good, job.par).mapInPandas(
        functools.partial(stages.chunk_docs, n_shards=n_shards, max_tokens=job.settings.chunk_tokens), stages.CHUNKED_SCHEMA))
    sums = _sum_by_tenant(chunked.withColumn("_empty", (F.col("n_passages") == 0).cast("long")),
                          ["n_passages", "n_parents", "_empty"])
    for t, c in sums.items():
        report.tenants[t].passages, report.tenants[t].parents = c["n_passages"], c["n_parents"]
        report.tenants[t].documents_without_passages = c["_empty"]
    report.passages = sum(c["n_passages"] for c in sums.values())
    job.done("chunk", documents=report.documents, passages=report.passages,
             parents=sum(c["n_parents"] for c in sums.values()))
    return chunked


def contextualize(job: BuildJob, chunked):
    """Derived context per passage; the contextualizer's cost summed per tenant."""
    s, report = job.settings, job.report
    job.start("contextualize")
    llm_json = s.llm.model_dump_json() if s.llm is not None else None
    if s.contextualizer == "none":
        # No preamble: the chunker's passages (context "") pass through as they are, with no
        # Python round trip (which cost 462 s of a 1,000,000-document build).
        ctxd = job.keep(chunked.select("tenant", "doc_id", "shard", "passages", "parents", "n_passages", "n_parents",
                                       *[F.lit(0).cast("long").alias(f"ctx_{c}") for c in stages.COST_COLUMNS]))
    else:
        ctxd = job.keep(chunked.mapInPandas(functools.partial(
            stages.contextualize_docs, kind=s.contextualizer, llm_json=llm_json, api_key=s.llm_api_key),
            stages.CONTEXT_SCHEMA))
    costs = _sum_by_tenant(ctxd, [f"ctx_{c}" for c in stages.COST_COLUMNS])
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


def embed(job: BuildJob, ctxd):
    """One row per passage with its embedding (the model loaded once per Python worker)."""
    report = job.report
    job.start("embed")
    exploded = ctxd.select("tenant", "shard", "doc_id", F.explode("passages").alias("passage_json"))
    embedded = job.keep(by_tenant_shard(exploded, job.par).mapInPandas(
        functools.partial(stages.embed_passages, spec=job.settings.embedder, batch_size=job.settings.batch_size,
                          torch_threads=int(job.sc.getConf().get("spark.task.cpus", "1"))), stages.EMBEDDED_SCHEMA))
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


@dataclass(frozen=True)
class TenantStats:
    """Tenant-wide term statistics as the build holds them: the per-tenant rows stay on the
    executors (``frame``: tenant, n_docs, total_len, terms, stats); the driver keeps only each
    tenant's totals (``totals``: ``TermStats`` with ``df`` left empty), bounded by the tenant count."""

    frame: Any  # DataFrame, or None when nothing was embedded
    totals: dict[str, TermStats]


def term_statistics(job: BuildJob, embedded, n_emb: int) -> TenantStats:
    """Tenant-wide term statistics on the executors: partial per (partition, tenant), merged
    per tenant by ``groupBy(tenant)``. Only (tenant, n_docs, total_len, terms) reach the driver."""
    job.start("stats")
    if not n_emb:
        job.done("stats", tenants=0, terms=0)
        return TenantStats(None, {})
    partial = embedded.select("tenant", "passage_json").mapInPandas(stages.partial_term_stats,
                                                                    stages.PARTIAL_STATS_SCHEMA)
    frame = job.keep(partial.repartition(job.par, "tenant").sortWithinPartitions("tenant")
                     .mapInPandas(stages.merge_sorted_term_stats, stages.TENANT_STATS_SCHEMA))
    rows = frame.select("tenant", "n_docs", "total_len", "terms").collect()
    totals = {r["tenant"]: TermStats(int(r["n_docs"]), int(r["total_len"])) for r in rows}
    job.done("stats", tenants=len(totals), terms=sum(int(r["terms"]) for r in rows))
    return TenantStats(frame, totals)


def build_shards(job: BuildJob, ctxd, embedded, stats: TenantStats, n_shards: dict[str, int]) -> BuiltShards:
    """Every (tenant, shard) built and uploaded into the tenant's next generation folder.

    One frame holds every shard's rows (its tenant's statistics, joined on the executors, its
    parent sections, its passages with their embeddings), partitioned by (tenant, shard) and
    sorted within each partition, so one Python call per partition builds its shards one
    after another and returns one ShardInfo row each."""
    job.start("build")
    tenants = sorted(stats.totals)
    generations = dict(zip(tenants, for_each_tenant(job, "build", tenants,
                                                   lambda t: layout.next_generation(job.root, t))))
    infos: dict[str, list[ShardInfo]] = {t: [] for t in tenants}
    dims: dict[str, int] = {}
    dim = int(job.embedder.dim)
    approx = job.settings.approx_threshold or APPROX_THRESHOLD
    if tenants:
        shard_counts = job.spark.createDataFrame([(t, n_shards[t]) for t in tenants], "tenant string, n_shards int")
        stats_rows = (stats.frame.select("tenant", "stats").join(shard_counts, "tenant")
                      .select("tenant", F.explode(F.sequence(F.lit(0), F.col("n_shards") - 1)).alias("shard"),
                              F.lit(stages.SHARD_KIND_STATS).alias("kind"), F.lit(None).cast("string").alias("payload"),
                              F.lit(None).cast("binary").alias("embedding"), "stats"))
        parents = ctxd.select("tenant", "shard", F.lit(stages.SHARD_KIND_PARENT).alias("kind"),
                              F.explode("parents").alias("payload"), F.lit(None).cast("binary").alias("embedding"),
                              F.lit(None).cast("binary").alias("stats"))
        passages = embedded.select("tenant", "shard", F.lit(stages.SHARD_KIND_PASSAGE).alias("kind"),
                                   F.col("passage_json").alias("payload"), "embedding",
                                   F.lit(None).cast("binary").alias("stats"))
        stats_rows = stats_rows.withColumn("shard", F.col("shard").cast("int"))
        rows = by_tenant_shard(passages.unionByName(parents).unionByName(stats_rows), job.par)
        built = (rows.sortWithinPartitions("tenant", "shard", "kind")
                 .mapInPandas(functools.partial(stages.build_sorted_shards, root=job.root, generations=generations,
                                                dim=dim, approx_threshold=approx, spec=job.settings.embedder,
                                                batch_size=job.settings.batch_size,
                                                torch_threads=int(job.sc.getConf().get("spark.task.cpus", "1"))),
                              stages.SHARD_INFO_SCHEMA)
                 .collect())
        for r in built:
            infos[r["tenant"]].append(ShardInfo(
                shard=int(r["shard"]), passages=int(r["passages"]), parents=int(r["parents"]),
                documents=int(r["documents"]), dense_kind=r["dense_kind"], checksums=json.loads(r["checksums"]),
                sizes=json.loads(r["sizes"])))
            dims[r["tenant"]] = int(r["dim"])
    job.done("build", tenants=len(tenants), shards=sum(len(v) for v in infos.values()))
    return BuiltShards(tenants, generations, infos, dims)
