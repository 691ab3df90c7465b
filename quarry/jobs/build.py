"""``quarry build``: the PySpark job that validates, chunks, contextualizes, embeds and
publishes sharded per-tenant indexes (DESIGN §3, §7).

Stages (each a Spark transformation delegating to ``quarry.core`` via
``quarry.jobs.stages``; each is materialised once, timed and reported):

    read        file list -> mapInPandas(core's per-format readers)      raw records
    validate    mapInPandas(core.ingest.sources.validate); duplicates      docs | bad
    quarantine  bad records -> <root>/_quarantine/<run-id>/part-*.jsonl   per-tenant counts
    chunk       mapInPandas(core.ingest.chunking.chunk_document) + shard_of one row per doc
    contextualize mapInPandas(contextualizer.contextualize_many)         per document
    embed       explode + mapInPandas(embedder.encode), model cached per worker
    stats       per-(partition, tenant) TermStats, merged per tenant on the executors (sorted by tenant);
                only each tenant's totals (n_docs, total_len, terms) reach the driver
    build       (passages + parents + the tenant's stats row) by (tenant, shard), sorted; mapInPandas(
                core.index.build.build_and_upload_shard)
                -> upload into <root>/<tenant>/gen-<n>/shard-<k>/; ShardInfo rows back
    manifest    driver: counts checked, core.index.manifest.make_manifest + report.json
    publish     core.index.manifest.publish: each shard present at the size its task wrote and verified, CURRENT switched atomically

Passages and embeddings never reach the driver: it collects only per-tenant counts, cost sums,
statistics totals and ShardInfo rows. Each stage's rows are persisted on local disk
(``DISK_ONLY``), never in the JVM heap (in local mode the executors' heap is the driver's);
the wide stages have at least one partition per 20,000 records, documents are partitioned by
(tenant, doc_id) and passages by (tenant, shard), so many small tenants share a task and a
large tenant's shards go to different tasks.

The stages' driver side is ``quarry.jobs.build_plan``, the manifest and publish steps
``quarry.jobs.build_publish``, the settings ``quarry.jobs.build_settings``; this module
composes them. Run it as ``quarry build ...`` (``quarry.build_cmd``), ``python -m quarry
build ...`` or ``spark-submit quarry/cli.py build ...`` (see infra/spark/README.md).
"""

from __future__ import annotations

from quarry.core.errors import UsageError
from quarry.core.ingest.sources import list_source_files
from quarry.jobs import build_plan as plan
from quarry.jobs.build_publish import CaseGate, finish, publish, write_manifests
from quarry.jobs.build_settings import BuildSettings, check_paths
from quarry.jobs.report import BuildReport
from quarry.jobs.spark import get_spark


def run_build(settings: BuildSettings, spark=None, case_gate: CaseGate | None = None) -> BuildReport:
    """Run the build; return its report. Raises ``UsageError`` on bad input.

    ``spark``: an existing SparkSession (tests, notebooks); otherwise one is created from
    ``settings.master`` and stopped at the end. ``case_gate``: publish a tenant's new
    generation only where it says so (``quarry.eval.case_gate.case_gate``).
    """
    check_paths(settings)
    files = list_source_files(settings.source.removeprefix("file://"))
    if not files:
        raise UsageError(f"--source {settings.source}: no .jsonl, .ndjson, .parquet or .md files found")
    own = spark is None
    if own:
        spark = get_spark(settings.master, app_name="quarry-build")
    try:
        return _run(settings, spark, files, case_gate)
    finally:
        if own:
            spark.stop()


def _run(settings: BuildSettings, spark, files: list[str], case_gate: CaseGate | None) -> BuildReport:
    job = plan.new_job(settings, spark, files)
    try:
        raw, n_raw = plan.read_sources(job)
        validated = plan.validate(job, raw, n_raw)
        q_counts = plan.quarantine(job, validated)
        n_shards = plan.account(job, validated, q_counts)
        chunked = plan.chunk(job, validated.good, n_shards)
        contextualized = plan.contextualize(job, chunked)
        embedded, n_emb = plan.embed(job, contextualized)
        stats = plan.term_statistics(job, embedded, n_emb)
        built = plan.build_shards(job, contextualized, embedded, stats, n_shards)
        write_manifests(job, built, stats.totals, n_shards)
        publish(job, built, case_gate)
    finally:
        job.close()
    return finish(job)
