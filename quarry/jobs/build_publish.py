"""The end of ``quarry build``: counts verified, each tenant's report and manifest written,
generations published (behind an optional case gate), and the run's report.

A case gate (``quarry.jobs.build_settings.CaseGate``) decides per tenant whether its new
generation may be published; ``quarry build --gate-cases`` passes the evidence-case gate of
``quarry.eval.case_gate``. Jobs never import evaluation code.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from quarry.core.index import layout
from quarry.core.index.lease import tenant_lease
from quarry.core.index.retention import collect
from quarry.core.index.lexical import TermStats
from quarry.core.index.manifest import make_manifest, write_manifest
from quarry.core.index.manifest import publish as publish_generation
from quarry.core.ingest.chunking import CHUNKER_VERSION
from quarry.core.rank.carry_over import carry_over
from quarry.jobs.build_plan import BuildJob, BuiltShards, for_each_tenant
from quarry.jobs.build_settings import CaseGate, source_watermark
from quarry.jobs.report import BuildReport, peak_rss_mb


def write_manifests(job: BuildJob, b: BuiltShards, stats: dict[str, TermStats], n_shards: dict[str, int]) -> None:
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
    measure(job)

    def write_one(t: str) -> None:
        tenant_report = tenant_report_json(report, t)
        layout.write_json(layout.join(report.tenants[t].generation_uri, "report.json"), tenant_report)
        write_manifest(job.root, make_manifest(
            t, b.generations[t], b.infos[t], n_docs=stats[t].n_docs, avgdl=stats[t].avgdl,
            embedder_name=job.embedder.name, dim=b.dims.get(t, int(job.embedder.dim)), chunker_version=CHUNKER_VERSION,
            source_watermark=watermark, encoder=job.embedder.encoder,
            run_id=job.run_id, contextualizer=job.settings.contextualizer, report=tenant_report,
            **({"contextualizer_llm": job.settings.llm.model_dump(mode="json")}
               if job.settings.contextualizer == "llm" and job.settings.llm is not None else {})))

    for_each_tenant(job, "manifest", b.tenants, write_one)
    job.done("manifest", tenants=len(b.tenants))


def publish(job: BuildJob, b: BuiltShards, case_gate: CaseGate | None = None) -> None:
    """CURRENT switched per tenant (``manifest.publish`` checks every shard file present at the
    size its task wrote and verified; no shard byte is read here); with a ``case_gate``, only
    where it allows the new generation."""
    s, report = job.settings, job.report
    job.start("publish")
    if s.publish:
        def publish_one(t: str) -> None:
            if case_gate is not None:
                gate = case_gate(job.root, t, b.generations[t])
                job.prog.line(f"{t}: case gate {'passed' if gate.publish else 'REFUSED'}: {gate.reason}"
                              + (f"; regressed: {', '.join(gate.regressed)}" if gate.regressed else ""))
                if not gate.publish:
                    return
            with tenant_lease(job.root, t, "build", wait_s=s.lease_wait_s) as held:
                carried = carry_over(job.root, t, layout.current_generation(job.root, t), b.generations[t])
                if carried is not None:  # the live generation's learned ranker, re-gated on the new one
                    job.prog.line(f"{t}: second stage {carried.reason}")
                held.ensure()
                publish_generation(job.root, t, b.generations[t])
                report.tenants[t].published = True
                collect(job.root, t, s.retain_generations)  # old generations past retention

        # The case gate runs the resolver in-process: one tenant at a time.
        for_each_tenant(job, "publish", b.tenants, publish_one, threads=1 if case_gate is not None else None)
        report.published = all(report.tenants[t].published for t in b.tenants)
    job.done("publish", published=sum(report.tenants[t].published for t in b.tenants) if s.publish else 0)


def measure(job: BuildJob) -> None:
    r = job.report
    r.seconds = time.monotonic() - job.t_start
    r.peak_driver_rss_mb = round(peak_rss_mb(), 1)
    r.jvm_driver_heap_peak_mb = jvm_heap_peak_mb(job.spark)


def jvm_heap_peak_mb(spark) -> float | None:
    try:
        mf = spark._jvm.java.lang.management.ManagementFactory
        total = 0
        for pool in mf.getMemoryPoolMXBeans():
            if str(pool.getType()) == "Heap memory":
                total += pool.getPeakUsage().getUsed()
        return round(total / 2**20, 1)
    except Exception:
        return None


def finish(job: BuildJob) -> BuildReport:
    """The run's report: under <root>/_runs/ and, when asked, at ``report_path``."""
    report, root = job.report, job.root
    measure(job)
    report.docs_per_s = round(report.documents / report.seconds, 2) if report.seconds else 0.0
    run_json = report.model_dump(mode="json")
    layout.write_json(layout.join(root, "_runs", f"{job.run_id}.json"), run_json)
    if job.settings.report_path:
        Path(job.settings.report_path).parent.mkdir(parents=True, exist_ok=True)
        Path(job.settings.report_path).write_text(json.dumps(run_json, indent=2, sort_keys=True))
    job.prog.line(f"finished: {report.documents} documents, {report.quarantined} quarantined, {report.passages} "
                  f"passages in {report.seconds:.1f}s ({report.docs_per_s} docs/s); "
                  f"report {root}/_runs/{job.run_id}.json")
    return report


def tenant_report_json(report: BuildReport, tenant: str) -> dict[str, Any]:
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
