"""Eval-gated promotion: a new generation is published only when the tenant's evidence
cases hold isolation and do not lose resolution accuracy or candidate recall against the
live generation. In-process builds (hashing embedder) for the decision rules; one Spark
test for ``quarry build --gate-cases`` end to end."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from quarry.core.index import layout
from quarry.core.index.manifest import read_manifest
from quarry.core.embed.embedders import HashingEmbedder

CASES = """
defaults: {tenant: acme, groups: [all-staff, engineering]}
cases:
  - id: sev2
    kinds: [lookup]
    task: SEV2 first response
    queries: [SEV2 first response target]
    valid_at: 2026-02-01
    answerable: true
    minimum_evidence: [incident-response-policy]
  - id: webhook-retries
    kinds: [lookup]
    task: webhook retry window
    queries: [how long are failed webhooks retried]
    valid_at: 2026-02-01
    answerable: true
    minimum_evidence: [webhook-retries-runbook]
  - id: other-tenant
    kinds: [lookup]
    task: a globex case the acme gate ignores
    queries: [refund window days]
    tenant: globex
    valid_at: 2026-02-01
    answerable: true
    minimum_evidence: [globex-refund-policy]
"""


@pytest.fixture
def cases_dir(tmp_path) -> Path:
    d = tmp_path / "cases"
    d.mkdir()
    (d / "acme.yaml").write_text(CASES)
    return d


def _build(root: str, docs, tenant: str, publish: bool) -> int:
    from quarry.core.ingest.chunking import CHUNKER_VERSION
    from quarry.core.embed.embedders import passage_text_for_embedding
    from quarry.core.index.build import build_tenant_index
    from quarry.core.ingest.pipeline import prepare

    emb = HashingEmbedder()
    passages, parents = prepare([d for d in docs if d.tenant == tenant])
    vecs = emb.encode([passage_text_for_embedding(p) for p in passages])
    return build_tenant_index(root, tenant, passages, parents, vecs, embedder_name=emb.name,
                              chunker_version=CHUNKER_VERSION, publish=publish)


@pytest.mark.unit
def test_no_worse_generation_passes_and_is_recorded(tmp_path, sample_docs, cases_dir):
    from quarry.eval.case_gate import gate_generation

    root = str(tmp_path / "idx")
    assert _build(root, sample_docs, "acme", publish=True) == 1
    gen = _build(root, sample_docs, "acme", publish=False)
    rec = gate_generation(root, "acme", gen, str(cases_dir))
    assert rec.publish is True and rec.cases == 2 and rec.live_generation == 1
    assert rec.new.candidate_recall == rec.live.candidate_recall == 1.0
    assert rec.regressed == []
    assert read_manifest(root, "acme", gen).case_gate.publish is True
    assert layout.current_generation(root, "acme") == 1  # the gate decides; the build publishes


@pytest.mark.unit
def test_a_generation_that_loses_evidence_stays_unpublished(tmp_path, sample_docs, cases_dir):
    from quarry.eval.case_gate import GATE_FILE, gate_generation

    root = str(tmp_path / "idx")
    _build(root, sample_docs, "acme", publish=True)
    lossy = [d for d in sample_docs if d.doc_id != "incident-response-policy"]
    gen = _build(root, lossy, "acme", publish=False)
    rec = gate_generation(root, "acme", gen, str(cases_dir))
    assert rec.publish is False and "candidate_recall" in rec.reason
    assert rec.regressed == ["sev2 (candidates, resolution)"]
    assert rec.new.candidate_recall == 0.5 and rec.live.candidate_recall == 1.0
    assert read_manifest(root, "acme", gen).case_gate.regressed == rec.regressed
    report = layout.read_json(layout.join(layout.generation_dir(root, "acme", gen), GATE_FILE))
    assert {o["id"]: o["candidates"] for o in report["runs"]["new"]["cases"]} == {"sev2": False, "webhook-retries": True}


@pytest.mark.unit
def test_isolation_failure_refuses_even_without_a_live_generation(tmp_path, sample_docs, cases_dir, monkeypatch):
    from quarry.eval import case_run
    from quarry.eval.case_gate import gate_generation

    root = str(tmp_path / "idx")
    _build(root, sample_docs, "globex", publish=True)
    gen = _build(root, sample_docs, "acme", publish=False)
    foreign = layout.list_tenants(root)[0]
    assert foreign == "globex"
    real = case_run.run_search

    def leaky(index, principal, request, embedder, settings, second_stage=None):
        res = real(index, principal, request, embedder, settings, second_stage)
        bad = res.candidates[0].model_copy(update={"passage_id": "globex-refund-policy@1#refund-policy.1"})
        return res.model_copy(update={"candidates": (bad, *res.candidates[1:])})

    monkeypatch.setattr(case_run, "run_search", leaky)
    rec = gate_generation(root, "acme", gen, str(cases_dir))
    assert rec.publish is False and rec.live_generation is None and "isolation" in rec.reason
    assert rec.new.leaks


@pytest.mark.spark
@pytest.mark.slow
def test_build_job_gates_publication(spark, tmp_path, cases_dir):
    """``quarry build --gate-cases``: the first build publishes; a rebuild that lost a
    required document is kept unpublished and CURRENT stays on the live generation."""
    from quarry.core.ingest.sources import SAMPLE_CORPUS
    from quarry.eval.case_gate import case_gate
    from quarry.jobs.build import run_build
    from quarry.jobs.build_settings import BuildSettings

    src = tmp_path / "src"
    shutil.copytree(Path(SAMPLE_CORPUS) / "acme", src / "acme")
    root = tmp_path / "idx"

    def build():
        s = BuildSettings(source=str(src), index_root=str(root), embedder="hashing", contextualizer="none", quiet=True)
        return run_build(s, spark=spark, case_gate=case_gate(str(cases_dir)))

    first = build()
    assert first.tenants["acme"].published and layout.current_generation(str(root), "acme") == 1
    (src / "acme" / "policies" / "incident-response-policy.md").unlink()
    second = build()
    assert not second.tenants["acme"].published and not second.published
    assert layout.current_generation(str(root), "acme") == 1
    gate = read_manifest(str(root), "acme", 2).case_gate
    assert gate.publish is False and gate.regressed == ["sev2 (candidates, resolution)"]
    assert layout.read_json(layout.join(str(root), "acme", "manifest.json"))["case_gate"]["publish"] is True


@pytest.mark.unit
def test_build_rejects_an_invalid_case_folder_before_building(tmp_path, capsys):
    from quarry.cli import main
    from quarry.core.ingest.sources import SAMPLE_CORPUS

    rc = main(["build", "--source", str(SAMPLE_CORPUS), "--index-root", str(tmp_path / "idx"),
               "--gate-cases", str(tmp_path / "missing")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "--gate-cases" in err[0] and "no such file or folder" in err[0]
    assert not (tmp_path / "idx").exists()
