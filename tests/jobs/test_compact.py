"""``quarry compact``: base + delta + masks folded into a new base generation equal to a full
rebuild from the same final sources (same passage ids, scores to 1e-5); a compaction
killed at any point changes nothing served; a re-run completes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from helpers.build_job import paused_at
from helpers.freshness import BASE, EMB, PRINCIPALS, QUERIES, assert_same_view, ch, doc, final_sources, rebuild

pytestmark = [pytest.mark.unit, pytest.mark.timeout(600)]


def _changes():
    return [
        ch("acl", "d0", 1, acl=["b"]),
        ch("delete", "d1", 2),
        ch("upsert", "d3", 3, document=doc("d3", "1", ["refund", "changed", "text"], ("a", "c"), 2).model_dump()),
        ch("upsert", "d9", 4, document=doc("d9", "1", ["quota", "ledger", "fresh", "marker"], ("a",)).model_dump()),
        ch("upsert", "d2", 5, document=doc("d2", "2", ["cutover", "v2"], ("*",)).model_dump()),
    ]


@pytest.fixture()
def changed_root(tmp_path):
    from quarry.core.changes.delta import apply_local
    from quarry.core.ingest.pipeline import build_corpus

    root = str(tmp_path / "idx")
    build_corpus(BASE, root, EMB)
    apply_local(root, "t", _changes()[:3], EMB)
    apply_local(root, "t", _changes()[3:], EMB)
    return root


def _scores(index, p, q):
    from quarry.core.search.retrieval import dense_leg, lexical_leg

    pid = lambda g: index.shards[g >> 32].passage_ids[g & 0xFFFFFFFF]  # noqa: E731
    m = index.masks(p)
    lex = lexical_leg(index, m, q, 1000, 0.0)
    den = dense_leg(index, m, EMB.encode([q])[0], 1000, -1.0)
    return ({pid(r): s for r, s in zip(lex.rows, lex.scores)}, {pid(r): s for r, s in zip(den.rows, den.scores)})


def test_compaction_equals_a_full_rebuild(changed_root):
    from quarry.core.index import layout
    from quarry.core.changes.compact import compact
    from quarry.core.index.shards import TenantIndex

    want = rebuild(final_sources(BASE, _changes()))
    before = TenantIndex.load(changed_root, "t")
    assert before.delta is not None
    gen = compact(changed_root, "t")
    assert gen == 2 and layout.current_generation(changed_root, "t") == 2
    got = TenantIndex.load(changed_root, "t")
    assert got.delta is None  # the old watermark names gen 1: retired
    assert sorted(got.shards[0].passage_ids) == sorted(want.shards[0].passage_ids)
    assert_same_view(got, want)
    for p in PRINCIPALS:
        for q in QUERIES:
            (gl, gd), (wl, wd) = _scores(got, p, q), _scores(want, p, q)
            assert gl.keys() == wl.keys() and gd.keys() == wd.keys()
            for k in gl:
                assert abs(gl[k] - wl[k]) <= 1e-5
            for k in gd:
                assert abs(gd[k] - wd[k]) <= 1e-5
    # changes keep applying after a compaction; the old log stays applied (idempotent)
    from quarry.core.changes.delta import apply_local

    seq, res = apply_local(changed_root, "t", _changes(), EMB)
    assert seq is None and set(res.outcomes.values()) == {"stale"}
    more = [ch("delete", "d9", 9)]
    apply_local(changed_root, "t", more, EMB)
    assert_same_view(TenantIndex.load(changed_root, "t"), rebuild(final_sources(BASE, _changes() + more)))


def _kill_group(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)


@pytest.mark.slow
@pytest.mark.parametrize("stage", ["build", "publish"])
def test_kill_during_compaction_changes_nothing_served(changed_root, tmp_path, stage):
    from quarry.core.index import layout
    from quarry.core.index.shards import TenantIndex

    served = final_sources(BASE, _changes())
    marker = tmp_path / "paused"
    proc = subprocess.Popen([*paused_at(stage, marker), "quarry", "compact", "--tenant", "t",
                             "--index-root", changed_root], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while not marker.exists():
            assert proc.poll() is None, proc.stdout.read().decode()
            assert time.monotonic() < deadline
            time.sleep(0.1)
    finally:
        _kill_group(proc)
    assert layout.current_generation(changed_root, "t") == 1
    idx = TenantIndex.load(changed_root, "t")
    assert idx.delta is not None
    assert_same_view(idx, rebuild(served))
    # a re-run completes past the crashed generation folder
    out = subprocess.run([sys.executable, "-m", "quarry", "compact", "--tenant", "t", "--index-root", changed_root,
                          "--json"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    # killed at publish, its complete but unpublished gen-2 is never reused: the re-run is gen-3
    assert layout.current_generation(changed_root, "t") == (3 if stage == "publish" else 2)
    assert_same_view(TenantIndex.load(changed_root, "t"), rebuild(served))


def test_compact_cli_bad_tenant_is_one_line(tmp_path, capsys):
    from quarry.cli import main

    assert main(["compact", "--tenant", "nope", "--index-root", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--tenant" in err[0]


def test_reconcile_repairs_drift_through_the_change_path(changed_root, tmp_path, capsys):
    """The source of truth differs from the served index in every way reconcile names;
    after reconcile the index shows exactly the source (in-process apply here; the Spark
    path is the apply-changes job, tested in test_apply_changes)."""
    from quarry.core.index.shards import TenantIndex
    from quarry.core.ingest.sources import write_source_jsonl
    from quarry.jobs.reconcile import reconcile

    truth = final_sources(BASE, _changes())
    truth = [d for d in truth if d.doc_id != "d4"]  # extra in the index
    truth = [d.model_copy(update={"acl": ("c",)}) if d.doc_id == "d5" else d for d in truth]  # stale ACL
    truth = [d.model_copy(update={"text": d.text + " edited"}) if d.doc_id == "d2" and d.version == "1" else d
             for d in truth]  # changed without a version bump
    truth.append(doc("d7", "1", ["missing", "doc"], ("a",)))  # missing
    src = write_source_jsonl(truth, tmp_path / "truth.jsonl")
    dry = reconcile(str(src), changed_root, dry_run=True)["tenants"]["t"]
    assert (dry["missing"], dry["extra"], dry["stale_acl"], dry["changed"]) == (1, 1, 1, 1)
    assert dry["missing_ids"] == ["d7@1"] and dry["extra_ids"] == ["d4@1"] and dry["stale_acl_ids"] == ["d5@1"]
    rep = reconcile(str(src), changed_root, apply="in-process")
    assert rep["repaired"] and rep["tenants"]["t"]["applied"] == 4
    assert_same_view(TenantIndex.load(changed_root, "t"), rebuild(truth))
    again = reconcile(str(src), changed_root, dry_run=True)["tenants"]["t"]
    assert again["repairs"] == 0


def test_status_reports_lag_and_unapplied(changed_root, tmp_path, capsys):
    import datetime as dt

    from quarry.cli import main

    pending = [ch("delete", "d5", 60 * 24 * 400)]  # far in the future of the fixture's clock
    (tmp_path / "log.jsonl").write_text("".join(c.model_dump_json() + "\n" for c in _changes() + pending))
    assert main(["status", "--index-root", changed_root, "--changes", str(tmp_path / "log.jsonl"), "--json"]) == 0
    import json

    r = json.loads(capsys.readouterr().out)["t"]
    assert r["changes_applied"] == 5 and r["lag"]["changes"] == 5 and r["unapplied"] == 1
    expect = dt.datetime.now(dt.timezone.utc).timestamp() - pending[0].at.timestamp()
    assert abs(r["oldest_unapplied_age_s"] - expect) < 60
    assert r["lag"]["max_s"] > 0
