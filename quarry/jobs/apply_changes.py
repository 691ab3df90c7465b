"""``quarry apply-changes``: the PySpark job that applies a change log (upserts, deletes, ACL
changes) to published indexes as delta generations, without rebuilding any base (DESIGN §3
"Updates", §7).

Stages (executor work delegates to ``quarry.core`` through the build's own stage
functions in ``quarry.jobs.stages``, so an upsert is chunked, contextualized and embedded
exactly as the build would):

    read         change files -> mapInPandas(stages.read_files)            raw records
    validate     mapInPandas(core.changes.log.validate_change)              changes | bad
    quarantine   bad records -> <root>/_quarantine/<run-id>/part-*.jsonl   (field-level reasons)
    fold         driver: core.changes.log.fold per tenant, in ``at`` order per document
    chunk        upserts still live -> stages.chunk_docs
    contextualize stages.contextualize_docs (the base's contextualizer)
    embed        stages.embed_passages (the base's embedder; the manifest is the contract)
    publish      driver: core.changes.delta.publish_delta per tenant: delta shard + state written,
                 checksums verified, then the tenant's DELTA watermark swapped atomically

Change records are small and bounded per run, so the fold runs on the driver; upserted
passages reach the driver only as the (small) delta shard's rows. A run killed at any
point leaves every watermark as it was (a half-written delta folder is never named), and a
re-run is a no-op for every change already applied (``core.changes.log``: per-document order).

``--stream`` runs the same batch function under Spark Structured Streaming over the change
folder (file source, one micro-batch per new file set, checkpointed under the index root);
on a cluster the source is Kafka (``--kafka-bootstrap``/``--kafka-topic``, documented in
``infra/spark/README.md``, not tested here).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import pickle
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError
from pyspark.sql import functions as F

from quarry.core.index import layout
from quarry.core.changes.log import Change, change_reason, change_record_id, lag_summary, validate_change
from quarry.core.changes.delta import DeltaRows, fold_for, publish_delta, upsert_contextualizer
from quarry.core.embed.factory import build_embedder, check_embedder, manifest_spec
from quarry.core.index.lease import DEFAULT_WAIT_S, tenant_lease
from quarry.core.index.manifest import IndexManifest
from quarry.core.ingest.contextualize import CostAccount, LLMSettings
from quarry.core.index.shards import TenantIndex
from quarry.core.records import ParentSection, Passage
from quarry.core.errors import UsageError
from quarry.core.ingest.sources import ERROR_KEY, SOURCE_KEY, list_source_files
from quarry.jobs import stages
from quarry.jobs.report import Progress, new_run_id
from quarry.jobs.spark import get_spark
from quarry.jobs.stages import UNKNOWN_TENANT, tenant_of_raw

CHANGE_SCHEMA = ("kind string, tenant string, change_id string, op string, doc_id string, source string, "
                 "record_id string, reason string, change_json string")


class ApplySettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    changes: str = Field(description="JSONL/Parquet change file or folder")
    index_root: str
    master: str | None = None
    embedder: str = Field(default="auto", description="'auto' = the base manifest's embedder")
    contextualizer: str = Field(default="auto", pattern="^(auto|extractive|llm|none)$")
    # The LLM endpoint for upserts over an llm-contextualized base: ``llm`` when given, else
    # the endpoint the base's manifest records (unless ``use_recorded_llm`` is off).
    llm: LLMSettings | None = None
    llm_api_key: SecretStr | None = None
    use_recorded_llm: bool = True
    batch_size: int = Field(default=64, ge=1)
    chunk_tokens: int = Field(default=200, ge=16)
    partitions: int | None = Field(default=None, ge=1)
    run_id: str | None = None
    quiet: bool = False
    lease_wait_s: float = Field(default=DEFAULT_WAIT_S, ge=0, description="wait for another writer of a tenant")


class TenantApplyReport(BaseModel):
    tenant: str
    changes: int = 0
    applied: int = 0
    stale: int = 0
    quarantined: int = 0
    upserted_passages: int = 0
    delta: int | None = None
    lag: dict[str, Any] = Field(default_factory=dict)
    # how upserts were contextualized ({kind, base, fallback}) and what the contextualizer cost
    contextualizer: dict[str, Any] | None = None
    contextualizer_cost: dict[str, Any] = Field(default_factory=dict)


class ApplyReport(BaseModel):
    run_id: str
    changes_uri: str
    index_root: str
    records: int = 0
    quarantined: int = 0
    quarantine_uri: str | None = None
    tenants: dict[str, TenantApplyReport] = Field(default_factory=dict)
    stages: dict[str, float] = Field(default_factory=dict)
    seconds: float = 0.0


# --------------------------------------------------------------------------- executor side


def validate_changes(batches: Iterator, ) -> Iterator:
    """Raw record -> a validated change (its JSON) or a quarantine row with the reason."""
    for pdf in batches:
        rows = []
        for src, blob in zip(pdf["source"], pdf["raw"]):
            raw = pickle.loads(blob)
            try:
                c = validate_change(raw)
            except ValidationError as e:
                t = tenant_of_raw(raw) if isinstance(raw, dict) else UNKNOWN_TENANT
                rows.append(("bad", t, None, None, None, src, change_record_id(raw), change_reason(e), None))
            else:
                rows.append(("change", c.tenant, c.change_id, c.op, c.doc_id, src, None, None, c.model_dump_json()))
        yield pd.DataFrame(rows, columns=[c.split()[0] for c in CHANGE_SCHEMA.split(", ")])


def upsert_docs(batches: Iterator) -> Iterator:
    """A live upsert's change JSON -> the build's (tenant, doc_id, doc_json) input row."""
    for pdf in batches:
        docs = [Change.model_validate_json(j).document for j in pdf["change_json"]]
        yield pd.DataFrame({"tenant": pdf["tenant"], "doc_id": pdf["doc_id"],
                            "doc_json": [d.model_dump_json() for d in docs]})


# --------------------------------------------------------------------------- the job


def embedder_spec(manifest: IndexManifest, requested: str) -> str:
    """The embedder spec that reproduces the base's embeddings ('auto': from its manifest)."""
    return manifest_spec(manifest) if requested == "auto" else requested


def run_apply(settings: ApplySettings, spark=None) -> ApplyReport:

    src = Path(settings.changes.removeprefix("file://"))
    if not src.exists():
        raise UsageError(f"--changes {src}: no such file or directory")
    if not layout.list_tenants(settings.index_root):
        raise UsageError(f"--index-root {settings.index_root}: no published index (run `quarry build` first)")
    files = list_source_files(src)
    if not files:
        raise UsageError(f"--changes {src}: no .jsonl, .ndjson or .parquet files found")
    own = spark is None
    if own:
        spark = get_spark(settings.master, app_name="quarry-apply-changes")
    try:
        files_df = spark.createDataFrame(list(enumerate(files)), stages.FILES_SCHEMA)
        par = settings.partitions or max(2, spark.sparkContext.defaultParallelism * 2)
        raw = files_df.repartition(min(len(files), par)).mapInPandas(
            functools.partial(stages.read_files, root=str(src if src.is_dir() else src.parent)), stages.RAW_SCHEMA)
        return apply_raw(settings, spark, raw, str(src))
    finally:
        if own:
            spark.stop()


def apply_records(settings: ApplySettings, records: list[dict[str, Any]], spark=None) -> ApplyReport:
    """Apply change records the driver already holds (``quarry reconcile``'s repairs), with
    ``settings.changes`` naming where they were logged (any URI; it is not read back). They
    are parallelised as raw rows, so no executor needs to read a driver-side file."""
    own = spark is None
    if own:
        spark = get_spark(settings.master, app_name="quarry-apply-changes")
    try:
        rows = [(0, i, f"{settings.changes}:{i + 1}", pickle.dumps({**r, SOURCE_KEY: f"{settings.changes}:{i + 1}"},
                                                                   protocol=pickle.HIGHEST_PROTOCOL))
                for i, r in enumerate(records)]
        par = settings.partitions or max(2, spark.sparkContext.defaultParallelism * 2)
        raw = spark.createDataFrame(rows, stages.RAW_SCHEMA).repartition(max(1, min(len(rows), par)))
        return apply_raw(settings, spark, raw, settings.changes)
    finally:
        if own:
            spark.stop()


def apply_raw(s: ApplySettings, spark, raw, changes_uri: str) -> ApplyReport:
    """Apply one batch of raw change records (a DataFrame of ``stages.RAW_SCHEMA``)."""
    t0 = time.monotonic()
    root = s.index_root.rstrip("/")
    run_id = s.run_id or new_run_id()
    report = ApplyReport(run_id=run_id, changes_uri=changes_uri, index_root=root)
    sc = spark.sparkContext
    par = s.partitions or max(2, sc.defaultParallelism * 2)
    prog = Progress(run_id, spark, quiet=s.quiet, job="apply-changes")
    stage = prog.start

    def done(name: str) -> None:
        report.stages[name] = round(prog.done(name, {}).seconds, 3)

    stage("validate")
    val = raw.repartition(par).mapInPandas(validate_changes, CHANGE_SCHEMA).persist()
    leases = contextlib.ExitStack()  # each published tenant's writer lease, from its read to its publish
    try:
        report.records = val.count()
        done("validate")

        stage("quarantine")
        q_uri = layout.join(root, "_quarantine", run_id)
        bad = val.filter(F.col("kind") == "bad").select("tenant", "record_id", "source", "reason")
        q_counts = {r["tenant"]: int(r["n"]) for r in bad.coalesce(max(1, min(par, 4))).mapInPandas(
            functools.partial(stages.write_quarantine, out_uri=q_uri), stages.QUARANTINE_OUT).groupBy("tenant")
            .agg(F.sum("n").alias("n")).collect()}
        report.quarantined = sum(q_counts.values())
        report.quarantine_uri = q_uri if report.quarantined else None
        for t, n in q_counts.items():
            report.tenants.setdefault(t, TenantApplyReport(tenant=t)).quarantined = n
        done("quarantine")

        stage("fold")
        changes: dict[str, list[Change]] = {}
        for r in val.filter(F.col("kind") == "change").select("tenant", "change_json").collect():
            changes.setdefault(r["tenant"], []).append(Change.model_validate_json(r["change_json"]))
        published = set(layout.list_tenants(root))
        unknown = sorted(set(changes) - published)
        if unknown:  # a change for a tenant without an index cannot be applied: say so, apply the rest
            print(f"[quarry apply-changes] no published index for tenant(s) {', '.join(unknown)}; "
                  f"their changes were not applied (build them first)", file=sys.stderr)
        plans = {}
        choices = {}
        for t in sorted(set(changes) & published):  # one order for every writer
            held = leases.enter_context(tenant_lease(root, t, "apply-changes", wait_s=s.lease_wait_s))
            index = TenantIndex.load(root, t)
            spec = embedder_spec(index.manifest, s.embedder)
            check_embedder(index.manifest, build_embedder(spec), spec)
            result = fold_for(index, changes[t])
            plans[t] = (index, result, spec, held)
            tr = report.tenants.setdefault(t, TenantApplyReport(tenant=t))
            if result.upserts:
                choices[t] = upsert_contextualizer(index.manifest, s.contextualizer, s.llm, s.use_recorded_llm)
                tr.contextualizer = choices[t].record()
                if choices[t].fallback:  # visible in the report, the delta's manifest and on stderr
                    print(f"[quarry apply-changes] {t}: {choices[t].fallback}", file=sys.stderr)
            tr.changes = len(changes[t])
            tr.applied = sum(o == "applied" for o in result.outcomes.values())
            tr.stale = sum(o == "stale" for o in result.outcomes.values())
        done("fold")

        wanted = {c.change_id for _, res, _, _ in plans.values() for c in res.upserts.values()}
        fresh: dict[str, tuple[list[Passage], list[ParentSection], list[np.ndarray]]] = {t: ([], [], []) for t in plans}
        if wanted:
            specs = {spec for _, _, spec, _ in plans.values()}
            ctx_kinds = {(c.kind, c.llm.model_dump_json() if c.llm else None) for c in choices.values()}
            if len(specs) > 1 or len(ctx_kinds) > 1:  # one embedder/contextualizer per run keeps the stages shared
                raise UsageError("tenants in this change log were built with different embedders or "
                                 "contextualizers; apply their changes in separate runs")
            spec, (kind, llm_json) = specs.pop(), ctx_kinds.pop()
            stage("chunk")
            ups = val.filter((F.col("kind") == "change") & F.col("change_id").isin(sorted(wanted)))
            docs = ups.select("tenant", "doc_id", "change_json").repartition(par, "doc_id").mapInPandas(
                upsert_docs, "tenant string, doc_id string, doc_json string")
            chunked = docs.mapInPandas(functools.partial(
                stages.chunk_docs, n_shards={t: 1 for t in plans}, max_tokens=s.chunk_tokens), stages.CHUNKED_SCHEMA)
            done("chunk")
            stage("contextualize")
            ctxd = chunked.mapInPandas(functools.partial(
                stages.contextualize_docs, kind=kind, llm_json=llm_json, api_key=llm_api_key(s, llm_json)),
                stages.CONTEXT_SCHEMA).persist()
            llm = LLMSettings.model_validate_json(llm_json) if llm_json else None
            cost_cols = [f"ctx_{c}" for c in stages.COST_COLUMNS]
            for r in ctxd.groupBy("tenant").agg(*[F.sum(c).alias(c) for c in cost_cols]).collect():
                acct = CostAccount(llm.price_in_per_1k if llm else 0.0, llm.price_out_per_1k if llm else 0.0)
                acct.merge({c.removeprefix("ctx_"): int(r[c] or 0) for c in cost_cols})
                report.tenants[r["tenant"]].contextualizer_cost = {"kind": kind, **acct.snapshot()}
            done("contextualize")
            stage("embed")
            exploded = ctxd.select("tenant", "shard", "doc_id", F.explode("passages").alias("passage_json"))
            embedded = exploded.repartition(par).mapInPandas(functools.partial(
                stages.embed_passages, spec=spec, batch_size=s.batch_size,
                torch_threads=int(sc.getConf().get("spark.task.cpus", "1"))), stages.EMBEDDED_SCHEMA)
            for r in embedded.select("tenant", "passage_json", "embedding").collect():  # the delta is small
                fresh[r["tenant"]][0].append(Passage.model_validate_json(r["passage_json"]))
                fresh[r["tenant"]][2].append(np.frombuffer(r["embedding"], dtype=np.float32))
            for r in ctxd.select("tenant", F.explode("parents").alias("p")).collect():
                fresh[r["tenant"]][1].append(ParentSection.model_validate_json(r["p"]))
            ctxd.unpersist()
            done("embed")

        stage("publish")
        for t, (index, result, spec, held) in plans.items():
            tr = report.tenants[t]
            if not tr.applied:
                continue
            held.ensure()
            ps, pa, vecs = fresh[t]
            dim = index.manifest.embedder.dim
            emb = np.stack(vecs) if vecs else np.zeros((0, dim), np.float32)
            tr.delta = publish_delta(index, result, DeltaRows(ps, pa, emb), changes[t],
                                     build_embedder(spec).name, tr.contextualizer,
                                     statement_encoder=functools.partial(_statement_encoder, spec, s.batch_size))
            tr.upserted_passages = len(ps)
            tr.lag = lag_summary(TenantIndex.load(root, t).delta.state)
        done("publish")
    finally:
        leases.close()
        prog.close()
        val.unpersist()
    report.seconds = round(time.monotonic() - t0, 3)
    layout.write_json(layout.join(root, "_runs", f"apply-{run_id}.json"), report.model_dump(mode="json"))
    return report


def _statement_encoder(spec: str, batch_size: int):
    """The delta shard's statement encoder: the embed stage's model, loaded on the driver
    once per process (a delta is small; its earlier rows reuse their stored vectors)."""
    return stages.get_embedder(spec, batch_size)[0].encode


def llm_api_key(s: ApplySettings, llm_json: str | None) -> SecretStr | None:
    """The key for the upserts' LLM endpoint: the run's, else the env var the endpoint names."""
    if llm_json is None:
        return None
    if s.llm_api_key is not None:
        return s.llm_api_key
    env = LLMSettings.model_validate_json(llm_json).api_key_env
    return SecretStr(os.environ[env]) if env and os.environ.get(env) else None


def run_stream(settings: ApplySettings, spark, checkpoint: str, once: bool = True,
               kafka: tuple[str, str] | None = None) -> list[ApplyReport]:
    """Structured Streaming: each micro-batch of new change lines runs :func:`apply_raw`.
    The source is the change folder (file source; local default), or Kafka when ``kafka``
    is (bootstrap servers, topic): one JSON change per message value (needs the
    ``spark-sql-kafka`` package on the cluster; not exercised here). ``once``: process
    what is there now and stop (availableNow)."""
    reports: list[ApplyReport] = []

    def batch(df, batch_id: int) -> None:
        if df.isEmpty():
            return
        raw = df.mapInPandas(_lines_to_raw, stages.RAW_SCHEMA)
        reports.append(apply_raw(settings.model_copy(update={"run_id": f"{settings.run_id or 'stream'}-{batch_id}"}),
                                 spark, raw, settings.changes))

    if kafka is not None:
        lines = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", kafka[0])
                 .option("subscribe", kafka[1]).option("startingOffsets", "earliest").load()
                 .select(F.col("value").cast("string").alias("value"),
                         F.concat_ws(":", "topic", "partition", "offset").alias("source")))
    else:
        lines = (spark.readStream.format("text").option("pathGlobFilter", "*.jsonl").load(settings.changes)
                 .withColumn("source", F.input_file_name()))
    q = lines.writeStream.option("checkpointLocation", checkpoint).foreachBatch(batch)
    q = q.trigger(availableNow=True) if once else q.trigger(processingTime="2 seconds")
    q.start().awaitTermination()
    return reports


def _lines_to_raw(batches: Iterator) -> Iterator:
    """Streamed text lines -> the raw-record rows the batch path reads."""
    for pdf in batches:
        rows = []
        for i, (line, src) in enumerate(zip(pdf["value"], pdf["source"])):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
                if not isinstance(rec, dict):
                    raise ValueError(f"expected an object, got {type(rec).__name__}")
            except ValueError as e:
                rec = {ERROR_KEY: ("json", str(e))}
            rec[SOURCE_KEY] = src
            rows.append((0, i, str(src), pickle.dumps(rec)))
        yield pd.DataFrame(rows, columns=["file_idx", "rec_idx", "source", "raw"])


# --------------------------------------------------------------------------- CLI


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--changes", required=True, help="JSONL/Parquet change file or folder")
    p.add_argument("--index-root", required=True, help="the published index root")
    p.add_argument("--master", default=None, help="Spark master (default: spark-submit's, else local[*])")
    p.add_argument("--embedder", default="auto", help="'auto' (the base manifest's), 'default', 'hashing[:dim]' or a model dir")
    p.add_argument("--contextualizer", choices=("auto", "extractive", "llm", "none"), default="auto",
                   help="'auto' = the base's, the LLM included (its recorded endpoint, or --llm-url/--llm-model)")
    p.add_argument("--llm-url", default=None, help="OpenAI-compatible endpoint for upserts (overrides the recorded one)")
    p.add_argument("--llm-model", default=None, help="model name at --llm-url")
    p.add_argument("--llm-api-key-env", default=None, help="env var holding the endpoint's key")
    p.add_argument("--no-llm", action="store_true",
                   help="do not call the base's recorded LLM endpoint; upserts fall back to 'none' (recorded in the "
                        "delta manifest and the report)")
    p.add_argument("--chunk-tokens", type=int, default=200, help="must match the build's (default 200)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--stream", action="store_true", help="Structured Streaming over the change folder (file source)")
    p.add_argument("--once", action="store_true", help="with --stream: process what is there now, then stop")
    p.add_argument("--checkpoint", default=None, help="with --stream: checkpoint URI (default <index-root>/_stream)")
    p.add_argument("--kafka-bootstrap", default=None, help="with --stream: read changes from Kafka (servers)")
    p.add_argument("--kafka-topic", default=None, help="with --stream and --kafka-bootstrap: the change topic")
    p.add_argument("--lease-wait-s", type=float, default=DEFAULT_WAIT_S,
                   help=f"wait this long for another writer of a tenant (default {DEFAULT_WAIT_S:g})")
    p.add_argument("--json", action="store_true", help="print the run report as JSON")
    p.add_argument("--quiet", action="store_true")


def run(args: argparse.Namespace) -> int:
    if bool(args.llm_url) != bool(args.llm_model):
        raise UsageError("--llm-url and --llm-model go together")
    llm = LLMSettings(base_url=args.llm_url, model=args.llm_model, api_key_env=args.llm_api_key_env) \
        if args.llm_url else None
    key = os.environ.get(args.llm_api_key_env) if args.llm_api_key_env else None
    s = ApplySettings(changes=args.changes, index_root=args.index_root, master=args.master, embedder=args.embedder,
                      contextualizer=args.contextualizer, chunk_tokens=args.chunk_tokens, batch_size=args.batch_size,
                      quiet=args.quiet, lease_wait_s=args.lease_wait_s, llm=llm, llm_api_key=key,
                      use_recorded_llm=not args.no_llm)
    if args.stream:
        kafka = (args.kafka_bootstrap, args.kafka_topic) if args.kafka_bootstrap else None
        if kafka and not args.kafka_topic:
            raise UsageError("--kafka-bootstrap needs --kafka-topic")
        if not kafka and not Path(args.changes).is_dir():
            raise UsageError(f"--changes {args.changes}: --stream needs a folder of change files")
        spark = get_spark(args.master, app_name="quarry-apply-changes-stream")
        try:
            reports = run_stream(s, spark, args.checkpoint or layout.join(args.index_root, "_stream"), args.once, kafka)
        finally:
            spark.stop()
    else:
        reports = [run_apply(s)]
    for rep in reports:
        if args.json:
            print(json.dumps(rep.model_dump(mode="json"), indent=2, sort_keys=True))
            continue
        for t, tr in sorted(rep.tenants.items()):
            print(f"{t}: changes={tr.changes} applied={tr.applied} stale={tr.stale} quarantined={tr.quarantined} "
                  f"upserted_passages={tr.upserted_passages} delta={tr.delta} lag_p95_s={tr.lag.get('p95_s')}")
    return 0
