"""Rollback across retired deltas (``quarry.core.index.pointers.rollback``): a generation that
was served with a delta comes back with exactly that delta, or the rollback is refused with
one line when compaction or retention removed the delta; never a different state."""

from __future__ import annotations

import pytest

from helpers.freshness import BASE, EMB, assert_same_view, ch, doc
from quarry.core.changes.compact import compact
from quarry.core.changes.delta import apply_local
from quarry.core.index import layout
from quarry.core.index.pointers import RollbackRefused, rollback
from quarry.core.index.retention import collect
from quarry.core.index.shards import TenantIndex
from quarry.core.ingest.pipeline import build_corpus

pytestmark = pytest.mark.unit

CHANGES = [ch("delete", "d1", 1), ch("acl", "d0", 2, acl=["b"]),
           ch("upsert", "d9", 3, document=doc("d9", "1", ["quota", "ledger", "marker"], ("a",)).model_dump())]


@pytest.fixture()
def served(tmp_path):
    """gen-1 served with delta-1 (a delete, an ACL change, an upsert); returns (root, that view)."""
    root = str(tmp_path / "idx")
    build_corpus(BASE, root, EMB)
    seq, _ = apply_local(root, "t", CHANGES, EMB)
    assert seq == 1
    return root, TenantIndex.load(root, "t")


def test_rollback_after_compaction_restores_the_delta_exactly(served):
    root, before = served
    assert compact(root, "t") == 2
    r = rollback(root, "t", 1)
    assert (r.generation, r.previous, r.restored_delta) == (1, 2, 1)
    assert layout.read_watermark(root, "t").strip() == "delta-1 gen-1"
    after = TenantIndex.load(root, "t")
    assert (after.generation, after.delta_seq) == (1, 1)
    assert_same_view(after, before)  # every principal sees what gen-1 + delta-1 served


def test_rollback_after_a_rebuild_restores_the_delta(served, tmp_path):
    root, before = served
    build_corpus(BASE, root, EMB)  # a rebuild publishes gen-2; the delta over gen-1 is retired
    assert layout.current_generation(root, "t") == 2
    r = rollback(root, "t", 1)
    assert r.restored_delta == 1
    assert_same_view(TenantIndex.load(root, "t"), before)


def _refused(root: str, generation: int) -> str:
    live, wm = layout.current_generation(root, "t"), layout.read_watermark(root, "t")
    with pytest.raises(RollbackRefused) as e:
        rollback(root, "t", generation)
    assert e.value.status == 409 and "\n" not in str(e.value)
    assert (layout.current_generation(root, "t"), layout.read_watermark(root, "t")) == (live, wm)  # nothing changed
    return str(e.value)


def test_rollback_refuses_when_retention_collected_the_delta(served):
    root, _ = served
    assert compact(root, "t") == 2
    assert apply_local(root, "t", [ch("delete", "d2", 9)], EMB)[0] == 2  # delta-2 over gen-2
    rep = collect(root, "t", retain=2)  # keeps gen-1 (one to roll back to), collects delta-1
    assert 1 in rep.kept_generations and 1 in rep.deleted_deltas
    msg = _refused(root, 1)
    assert msg.startswith("gen-1 was served with delta-1, and delta-1 was removed") and "without those changes" in msg


def test_rollback_refuses_after_a_rebuild_when_the_delta_is_gone(served):
    root, _ = served
    build_corpus(BASE, root, EMB)  # gen-2, no compaction record: only the retired record knows
    from quarry.core.index.retention import remove

    remove(layout.delta_dir(root, "t", 1))
    assert "delta-1 was removed" in _refused(root, 1)


def test_rollback_cli_refuses_with_one_line_and_exit_2(served, capsys):
    from quarry.cli import main

    root, _ = served
    assert compact(root, "t") == 2
    apply_local(root, "t", [ch("delete", "d2", 9)], EMB)
    collect(root, "t", retain=2)
    rc = main(["rollback", "--index-root", root, "--tenant", "t", "--generation", "1"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err.startswith("quarry rollback: error: t: gen-1 was served with delta-1") and len(err.splitlines()) == 1
    assert main(["rollback", "--index-root", root, "--tenant", "t", "--generation", "2"]) == 2  # already live
