"""``quarry apply-changes`` on real local Spark: quarantine with field-level reasons,
visibility equal to a full rebuild, the same passages and embeddings as the in-process
path, idempotent re-runs, and a kill at any stage that changes nothing served."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from helpers.freshness import BASE, EMB, assert_same_view, ch, doc, final_sources, rebuild

pytestmark = [pytest.mark.spark, pytest.mark.timeout(2400)]  # Spark apps on 2 shared cores


def changes_fixture():
    return [
        ch("acl", "d0", 1, acl=["b"]),
        ch("delete", "d1", 2),
        ch("upsert", "d3", 3, document=doc("d3", "1", ["refund", "changed", "text"], ("a", "c"), 2).model_dump()),
        ch("upsert", "d9", 4, document=doc("d9", "1", ["quota", "ledger", "fresh", "marker"], ("a",)).model_dump()),
        ch("delete", "d4", 5, version="1"),
    ]


BAD = [
    {"op": "upsert", "tenant": "t", "doc_id": "d7", "at": "2026-01-01T00:00:00Z"},  # no document
    {"op": "acl", "tenant": "t", "doc_id": "d2", "at": "not-a-time", "acl": ["a"]},
]


def write_log(path: Path, changes, bad=()) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        for c in changes:
            f.write(c.model_dump_json(exclude_none=True) + "\n")
        for b in bad:
            f.write(json.dumps(b) + "\n")
        f.write("{not json\n")
    return path


@pytest.fixture()
def base_root(tmp_path):
    from quarry.core.ingest.pipeline import build_corpus

    root = tmp_path / "idx"
    build_corpus(BASE, str(root), EMB)
    return root


def test_apply_changes_job(spark, base_root, tmp_path):
    from quarry.core.index import layout
    from quarry.core.changes.delta import apply_local
    from quarry.core.index.shards import TenantIndex
    from quarry.jobs.apply_changes import ApplySettings, run_apply

    changes = changes_fixture()
    log = write_log(tmp_path / "changes" / "part-0.jsonl", changes, BAD)
    s = ApplySettings(changes=str(log.parent), index_root=str(base_root), quiet=True, partitions=2)
    rep = run_apply(s, spark=spark)
    tr = rep.tenants["t"]
    assert (tr.applied, tr.stale, tr.delta) == (5, 0, 1) and tr.upserted_passages > 0
    assert rep.quarantined == 3  # two invalid records and one unreadable line, never dropped silently
    lines = [json.loads(x) for f in Path(rep.quarantine_uri).glob("*.jsonl") for x in f.read_text().splitlines()]
    reasons = " | ".join(x["reason"] for x in lines)
    assert "document" in reasons and "at:" in reasons and "json" in reasons
    got = TenantIndex.load(str(base_root), "t")
    assert_same_view(got, rebuild(final_sources(BASE, changes)))

    # the Spark path and the in-process path give the same delta rows and embeddings
    other = tmp_path / "idx-local"
    from quarry.core.ingest.pipeline import build_corpus

    build_corpus(BASE, str(other), EMB)
    apply_local(str(other), "t", changes, EMB)
    loc = TenantIndex.load(str(other), "t")
    a, b = got.delta.shard, loc.delta.shard
    assert a.passage_ids == b.passage_ids
    assert [a.passage(i) for i in range(len(a))] == [b.passage(i) for i in range(len(b))]
    np.testing.assert_allclose(a.embeddings(), b.embeddings(), atol=1e-6)

    # re-running the same log is a no-op: nothing applied, the watermark unchanged
    wm = layout.read_watermark(str(base_root), "t")
    again = run_apply(s, spark=spark)
    assert (again.tenants["t"].applied, again.tenants["t"].stale, again.tenants["t"].delta) == (0, 5, None)
    assert layout.read_watermark(str(base_root), "t") == wm


def test_kill_at_any_stage_changes_nothing_served(spark, base_root, tmp_path):
    from helpers.build_job import paused_at
    from test_build_kill import _kill_when_paused

    from quarry.core.index import layout
    from quarry.core.index.shards import TenantIndex
    from quarry.jobs.apply_changes import ApplySettings, run_apply

    first = changes_fixture()[:2]
    log1 = write_log(tmp_path / "c1" / "a.jsonl", first)
    run_apply(ApplySettings(changes=str(log1.parent), index_root=str(base_root), quiet=True), spark=spark)
    served = final_sources(BASE, first)
    log2 = write_log(tmp_path / "c2" / "b.jsonl", changes_fixture())
    roots = {}
    for stage in ("embed", "publish"):
        roots[stage] = tmp_path / f"idx-{stage}"
        shutil.copytree(base_root, roots[stage])
    wm = layout.read_watermark(str(base_root), "t")
    for stage, r in roots.items():
        marker, out = tmp_path / f"paused-{stage}", tmp_path / f"apply-{stage}.log"
        cmd = [*paused_at(stage, marker), "quarry", "apply-changes", "--changes", str(log2.parent),
               "--index-root", str(r), "--master", "local[1]"]
        with open(out, "wb") as fh:
            proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
        text = _kill_when_paused(stage, proc, marker, out)
        assert f"paused at stage '{stage}'" in text
        assert layout.read_watermark(str(r), "t") == wm
        assert_same_view(TenantIndex.load(str(r), "t"), rebuild(served))
    # a re-run after the crash applies the rest, and only the rest
    r = roots["publish"]
    rep = run_apply(ApplySettings(changes=str(log2.parent), index_root=str(r), quiet=True), spark=spark)
    assert (rep.tenants["t"].applied, rep.tenants["t"].stale) == (3, 2)
    assert_same_view(TenantIndex.load(str(r), "t"), rebuild(final_sources(BASE, changes_fixture())))


@pytest.mark.slow
def test_stream_applies_new_files_once(spark, base_root, tmp_path):
    """--stream: Structured Streaming over the change folder; a second trigger sees only
    the file added since the checkpoint."""
    from quarry.core.index.shards import TenantIndex
    from quarry.jobs.apply_changes import ApplySettings, run_stream

    d = tmp_path / "stream"
    cs = changes_fixture()
    write_log(d / "a.jsonl", cs[:2])
    s = ApplySettings(changes=str(d), index_root=str(base_root), quiet=True)
    ckpt = str(tmp_path / "ckpt")
    first = run_stream(s, spark, ckpt, once=True)
    assert [r.tenants["t"].applied for r in first] == [2]
    write_log(d / "b.jsonl", cs[2:])
    second = run_stream(s, spark, ckpt, once=True)
    assert [r.tenants["t"].applied for r in second] == [3]
    assert_same_view(TenantIndex.load(str(base_root), "t"), rebuild(final_sources(BASE, cs)))
