"""``quarry purge`` and ``quarry gc`` on storage: a purged document's text is in no byte under
the index root (old generations, delta shards, quarantine, reconcile logs, traces), the rest
of the tenant serves exactly as a rebuild without it; a tenant purge leaves only its purge
record; retention keeps what it promises; and apply-changes, compact and purge running at
once on one tenant (real jobs, under the writer lease) lose no change."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pandas as pd
import pytest

from helpers.freshness import BASE, EMB, assert_same_view, ch, doc, rebuild
from quarry.core.records import Principal

pytestmark = [pytest.mark.timeout(900)]

MARKER = "zqxpurgemarker"  # in every version of the purged document's text, nowhere else
PRINCIPAL_A = Principal(tenant="t", subject="u", groups=frozenset({"a"}))


def marked(version: str, n: int):
    return doc("dm", version, ["glacier", "logbook", "expedition", f"{MARKER}{n}"], ("a",))


def files_containing(root: str, needle: bytes) -> list[str]:
    from quarry.core.index import layout

    fs, path = layout.fs_and_path(root)
    out = []
    for f in fs.find(path):
        with fs.open(f, "rb") as fh:
            if needle in fh.read():
                out.append(f)
    return out


def quarantine(root: str, rows: list[tuple[str, str]]) -> None:
    """A real quarantine part file (``stages.write_quarantine``) of (tenant, record_id) rows."""
    from quarry.core.index import layout
    from quarry.jobs.stages import write_quarantine

    pdf = pd.DataFrame({"tenant": [t for t, _ in rows], "record_id": [r for _, r in rows],
                        "source": ["changes.jsonl"] * len(rows), "reason": ["document: Field required"] * len(rows)})
    list(write_quarantine(iter([pdf]), layout.join(root, "_quarantine", "run-1")))


def traces(root: str, tenant: str, delivered: list[list[str]]) -> Path:
    d = Path(root, "_traces", tenant, "2026010100")
    d.mkdir(parents=True, exist_ok=True)
    f = d / "w0.jsonl"
    f.write_text("".join(json.dumps({"trace_id": f"x{i}", "kind": "search", "tenant": tenant, "query": "glacier",
                                     "delivered": ids}) + "\n" for i, ids in enumerate(delivered)))
    return f


def history_with_marker(root: str, tmp_path: Path) -> list:
    """A tenant whose purged document is everywhere: base (v1), a compacted generation (v2),
    a live delta (v3 via reconcile, whose repair log holds its text), quarantine and traces."""
    from quarry.core.changes.compact import compact
    from quarry.core.changes.delta import apply_local
    from quarry.core.ingest.pipeline import build_corpus
    from quarry.jobs.reconcile import reconcile

    build_corpus(BASE + [marked("1", 1)], root, EMB)
    apply_local(root, "t", [ch("upsert", "dm", 1, document=marked("2", 2).model_dump()), ch("delete", "d1", 2)], EMB)
    compact(root, "t")
    apply_local(root, "t", [ch("acl", "dm", 3, acl=["a", "b"])], EMB)
    live = [d for d in BASE if d.doc_id != "d1"]
    src = tmp_path / "source.jsonl"
    src.write_text("".join(d.model_dump_json() + "\n" for d in live + [marked("3", 3)]))
    rep = reconcile(str(src), root, apply="in-process")
    assert rep["repaired"] and rep["tenants"]["t"]["applied"] >= 1
    quarantine(root, [("t", "dm@4"), ("t", "d2@9"), ("u", "dm@1")])
    traces(root, "t", [["dm@3#part-0", "d2@1#part-0"], ["d2@1#part-0"]])
    changes_and_checkpoint(root)
    run_store(root, "t", ["dm@3#part-0", "d2@1#part-0"])
    return live


def changes_and_checkpoint(root: str) -> None:
    """An admin-API change file under ``<root>/_changes/t/`` (an upsert carrying the text) and a
    streaming apply-changes checkpoint naming it (Spark's file-source log: paths and offsets)."""
    from quarry.core.changes.log import change_lines
    from quarry.core.index import layout

    f = layout.join(root, "_changes", "t", "20260101T000000000000Z-abcd1234.jsonl")
    layout.write_atomic(f, change_lines([ch("upsert", "dm", 5, document=marked("5", 5).model_dump()),
                                         ch("delete", "d2", 6)]))
    cp = Path(root, "_checkpoints", "apply-changes")
    (cp / "sources" / "0").mkdir(parents=True)
    (cp / "sources" / "0" / "0").write_text('v1\n' + json.dumps({"path": f"file://{f}", "timestamp": 1, "batchId": 0}) + "\n")
    (cp / "offsets").mkdir()
    (cp / "offsets" / "0").write_text('v1\n{"batchWatermarkMs":0}\n{"logOffset":0}\n')


def run_store(root: str, tenant: str, seen: list[str]) -> None:
    """The actor run store's checkpoint (``<root>/_serve/runs``, a real ``RunTable``; files on a
    local root, one object per change on a URI root) with a run of the tenant that saw ``seen``."""
    from quarry.core.agent.runs import principal_key
    from quarry.serve.stores.runstore_actor import RunTable

    state = f"{root}/_serve/runs" if "://" in root else str(Path(root, "_serve", "runs"))
    table = RunTable(state, ttl_s=3600, open_per_tenant=10, open_per_subject=10,
                     kept_per_tenant=10)
    pk = principal_key(Principal(tenant=tenant, subject="u", groups=frozenset({"a"})))
    run = table.create(pk, 3)["run_id"]
    table.decide("apply_search", run, pk, seen)
    table.decide("record_fetch", run, pk, seen[:1], [])
    table.close()


@pytest.mark.unit
def test_document_purge_leaves_no_copy_under_a_local_root(tmp_path):
    from quarry.core.index import layout
    from quarry.core.index.shards import TenantIndex
    from quarry.jobs.purge import purge_document

    root = str(tmp_path / "idx")
    live = history_with_marker(root, tmp_path)
    assert len(files_containing(root, MARKER.encode())) >= 4  # gens, delta shard, reconcile log
    assert TenantIndex.load(root, "t").document("dm", PRINCIPAL_A)

    assert files_containing(str(Path(root, "_changes")), MARKER.encode())
    assert files_containing(str(Path(root, "_serve")), b"dm@3#part-0")

    rep = purge_document(root, "t", "dm")

    assert files_containing(root, MARKER.encode()) == []  # change files included
    # its ids are gone too, but from tenant u's quarantine line ("dm@1" of another tenant)
    assert [Path(f).parent.name for f in files_containing(root, b"dm@")] == ["run-1"]
    assert layout.generations(root, "t") == [rep.generation] and layout.current_generation(root, "t") == rep.generation
    assert layout.read_watermark(root, "t") is None and not Path(root, "t", "changes").exists()
    assert rep.removed_passages >= 1 and rep.epoch == 1 and rep.deleted_generations
    q = Path(root, "_quarantine", "run-1", next(Path(root, "_quarantine", "run-1").iterdir()).name).read_text()
    assert [json.loads(x)["record_id"] for x in q.splitlines()] == ["d2@9", "dm@1"]  # another tenant's dm is kept
    t = [json.loads(x)["trace_id"] for x in Path(root, "_traces", "t", "2026010100", "w0.jsonl").read_text().splitlines()]
    assert t == ["x1"]
    # the change file keeps the other change; the run keeps its other id (the run itself stays)
    left = [json.loads(x) for x in Path(root, "_changes", "t").joinpath(
        "20260101T000000000000Z-abcd1234.jsonl").read_text().splitlines()]
    assert [(c["op"], c["doc_id"]) for c in left] == [("delete", "d2")]
    runs = Path(root, "_serve", "runs", "runs.log").read_text()
    assert "d2@1#part-0" in runs and "dm@" not in runs
    # the rest of the tenant serves exactly as a rebuild from the sources without the document
    assert_same_view(TenantIndex.load(root, "t"), rebuild(live))
    assert json.loads(layout.read_purge_epoch(root, "t"))["epoch"] == 1
    assert "dm" not in layout.read_purge_epoch(root, "t")


@pytest.mark.unit
def test_purging_one_version_keeps_the_others(tmp_path):
    from quarry.core.index.shards import TenantIndex
    from quarry.core.ingest.pipeline import build_corpus
    from quarry.jobs.purge import purge_document

    root = str(tmp_path / "idx")
    build_corpus(BASE + [marked("1", 1), marked("2", 2)], root, EMB)
    purge_document(root, "t", "dm", version="1")
    assert files_containing(root, f"{MARKER}1".encode()) == []
    assert files_containing(root, f"{MARKER}2".encode())
    assert {p.envelope.version for p in TenantIndex.load(root, "t").document("dm", PRINCIPAL_A)} == {"2"}


@pytest.mark.unit
def test_a_purge_after_a_compaction_is_not_taken_for_a_concurrent_change(tmp_path):
    """After a compaction the DELTA pointer still names the generation compacted away (the
    applied-change state is rebased from it). That stale pointer is no change applied during
    the purge: the purge publishes. A change applied to the live generation still refuses."""
    from quarry.core.changes.compact import compact, compaction_input, publish_compacted, write_compacted
    from quarry.core.changes.delta import apply_local
    from quarry.core.errors import UsageError
    from quarry.core.index import layout
    from quarry.core.index.shards import TenantIndex
    from quarry.core.ingest.pipeline import build_corpus
    from quarry.jobs.purge import purge_document

    root = str(tmp_path / "idx")
    build_corpus(BASE + [marked("1", 1)], root, EMB)
    apply_local(root, "t", [ch("delete", "d1", 1)], EMB)
    gen = compact(root, "t")
    assert layout.parse_watermark(layout.read_watermark(root, "t"))[1] != gen  # stale, by design
    rep = purge_document(root, "t", "dm")
    assert layout.current_generation(root, "t") == rep.generation and files_containing(root, MARKER.encode()) == []

    index = TenantIndex.load(root, "t")
    apply_local(root, "t", [ch("delete", "d2", 2)], EMB)
    index2 = TenantIndex.load(root, "t")
    apply_local(root, "t", [ch("delete", "d3", 3)], EMB)
    for stale in (index, index2):  # read before a change that then landed: refused, nothing published
        with pytest.raises(UsageError, match="applied during compaction"):
            publish_compacted(stale, write_compacted(compaction_input(stale)))
    assert layout.current_generation(root, "t") == rep.generation


@pytest.mark.unit
def test_tenant_purge_leaves_only_the_purge_record(tmp_path):
    from quarry.cli import main
    from quarry.core.index import layout
    from quarry.core.index.lease import read_lease
    from quarry.core.index.shards import TenantIndex
    from quarry.core.ingest.pipeline import build_corpus

    root = str(tmp_path / "idx")
    other = [d.model_copy(update={"tenant": "u"}) for d in BASE]
    build_corpus(BASE + [marked("1", 1)] + other, root, EMB)
    build_corpus(BASE + [marked("2", 2)], root, EMB)  # a second generation of t
    quarantine(root, [("t", "dm@4"), ("u", "d2@9")])
    traces(root, "t", [["dm@1#part-0"]])
    traces(root, "u", [["d2@1#part-0"]])
    changes_and_checkpoint(root)
    run_store(root, "t", ["dm@1#part-0"])
    run_store(root, "u", ["d2@1#part-0"])
    layout.write_json(layout.join(root, "_runs", "r1.json"), {"tenants": {"t": {"documents": 7}, "u": {"documents": 6}}})
    last = max(layout.generations(root, "t"))

    assert main(["purge", "--index-root", root, "--tenant", "t", "--all"]) == 0

    assert sorted(p.name for p in Path(root, "t").iterdir()) == ["LEASE", "PURGED"]
    assert read_lease(root, "t") is None  # the released claim: owner and job ids, no text
    assert files_containing(root, MARKER.encode()) == []
    assert all(f.read_text() == "" for f in Path(root, "_changes", "t").iterdir())  # every change was t's
    runs = Path(root, "_serve", "runs", "runs.log").read_text()
    assert "dm@1" not in runs and '"principal_key":"t/' not in runs and "d2@1#part-0" in runs  # u's run stays
    assert layout.list_tenants(root) == ["u"] and len(TenantIndex.load(root, "u")) > 0
    assert not Path(root, "_traces", "t").exists() and Path(root, "_traces", "u").exists()
    q = next(Path(root, "_quarantine", "run-1").iterdir()).read_text()
    assert [json.loads(x)["tenant"] for x in q.splitlines()] == ["u"]
    assert layout.read_json(layout.join(root, "_runs", "r1.json")) == {"tenants": {"u": {"documents": 6}}}
    # a rebuilt tenant never reuses a purged generation number (replica caches key on it)
    assert build_corpus(BASE, root, EMB)["t"] > last


@pytest.mark.unit
def test_retention_keeps_current_previous_in_progress_and_the_live_delta(tmp_path):
    from quarry.cli import main
    from quarry.core.changes.delta import apply_local
    from quarry.core.index import layout
    from quarry.core.index.retention import collect
    from quarry.core.index.shards import TenantIndex
    from quarry.core.ingest.pipeline import build_corpus

    root = str(tmp_path / "idx")
    for _ in range(3):
        build_corpus(BASE, root, EMB)
    Path(layout.generation_dir(root, "t", 0)).mkdir()  # a crashed build below CURRENT
    apply_local(root, "t", [ch("upsert", "d9", 1, document=doc("d9", "1", ["quota", "fresh"], ("a",)).model_dump())], EMB)
    apply_local(root, "t", [ch("acl", "d0", 2, acl=["b"])], EMB)  # delta-2 reuses delta-1's shard
    Path(layout.generation_dir(root, "t", 4)).mkdir()  # a build writing right now
    before = TenantIndex.load(root, "t")
    ref = layout.read_json(layout.join(layout.delta_dir(root, "t", 2), "manifest.json"))["shard"]
    assert ref == "delta-1/shard"

    rep = collect(root, "t", retain=2)
    assert rep.current == 3 and rep.deleted_generations == [0, 1] and rep.kept_generations == [2, 3, 4]
    assert rep.deleted_deltas == []  # delta-2 is live and reads delta-1's shard
    assert_same_view(TenantIndex.load(root, "t"), before)

    assert main(["gc", "--index-root", root, "--all", "--retain-generations", "1"]) == 0
    assert layout.generations(root, "t") == [3, 4]
    with pytest.raises(ValueError):
        collect(root, "t", retain=0)


@pytest.mark.unit
def test_document_purge_on_an_s3_root(s3_server, tmp_path):
    from quarry.core.changes.delta import apply_local
    from quarry.core.index import layout
    from quarry.core.ingest.pipeline import build_corpus
    from quarry.jobs.purge import purge_document

    from quarry.core.index.shards import TenantIndex
    from quarry.serve.deployments.purges import drop_unpublished_copies

    replica_cache = tmp_path / "replica-cache"  # what a serving replica copied from the bucket

    def cached_marker() -> bool:
        return any(MARKER.encode() in p.read_bytes() for p in replica_cache.rglob("*") if p.is_file())

    root = s3_server.uri("purge-doc", "idx")  # the session's moto server (tests/helpers/s3.py)
    build_corpus(BASE + [marked("1", 1)], root, EMB)
    apply_local(root, "t", [ch("upsert", "dm", 1, document=marked("2", 2).model_dump())], EMB)
    TenantIndex.load(root, "t", cache_dir=str(replica_cache))
    run_store(root, "t", ["dm@2#part-0"])  # the actor store's objects under <root>/_serve/runs/log/
    assert files_containing(root, MARKER.encode()) and cached_marker()
    assert files_containing(f"{root}/_serve", b"dm@2#part-0")
    rep = purge_document(root, "t", "dm")
    assert files_containing(root, MARKER.encode()) == []
    assert files_containing(f"{root}/_serve", b"dm@") == []
    assert layout.generations(root, "t") == [rep.generation]
    # the replica's side (purges.py): copies no longer published go, the live one stays
    assert drop_unpublished_copies(root, "t", str(replica_cache)) >= 2 and not cached_marker()
    TenantIndex.load(root, "t", cache_dir=str(replica_cache))
    assert drop_unpublished_copies(root, "t", str(replica_cache)) == 0
    assert len(layout.fetched_copies(replica_cache, layout.tenant_dir(root, "t"))) == 1


@pytest.mark.unit
def test_tenant_purge_on_an_s3_root(s3_server):
    """The whole tenant on an ``s3://`` root (the session's moto server): its generations and
    its run-store objects go; the other tenant's stay and still load."""
    from quarry.core.index import layout
    from quarry.core.index.shards import TenantIndex
    from quarry.core.ingest.pipeline import build_corpus
    from quarry.jobs.purge import purge_tenant

    root = s3_server.uri("purge-tenant", "idx")
    other = [d.model_copy(update={"tenant": "u"}) for d in BASE]
    build_corpus(BASE + [marked("1", 1)] + other, root, EMB)
    run_store(root, "t", ["dm@1#part-0"])
    run_store(root, "u", ["d2@1#part-0"])
    assert files_containing(root, MARKER.encode())
    purge_tenant(root, "t")
    assert files_containing(root, MARKER.encode()) == []
    assert files_containing(f"{root}/_serve", b"dm@1") == []
    assert files_containing(f"{root}/_serve", b"d2@1#part-0")  # u's run stays
    assert layout.list_tenants(root) == ["u"] and len(TenantIndex.load(root, "u")) > 0
    from quarry.serve.stores.runstore_actor import RunTable

    reloaded = RunTable(f"{root}/_serve/runs", ttl_s=3600, open_per_tenant=10, open_per_subject=10,
                        kept_per_tenant=10)  # an actor re-created after the purge reads what is left
    assert set(reloaded._tenants) == {"u"}


@pytest.mark.spark
@pytest.mark.slow
def test_apply_compact_and_purge_at_once_lose_no_change(spark, tmp_path):
    """Real jobs on three threads over one tenant: the Spark apply-changes job, compaction in
    a loop and a purge. Each holds the tenant's lease from its read to its publish, so every
    applied change is visible after all finish and the purged document is gone."""
    from quarry.core.index import layout
    from quarry.core.index.shards import TenantIndex
    from quarry.core.ingest.pipeline import build_corpus
    from quarry.jobs.apply_changes import ApplySettings, run_apply
    from quarry.jobs.compact import compact_tenant
    from quarry.jobs.purge import purge_document

    from helpers.freshness import final_sources

    root = str(tmp_path / "idx")
    build_corpus(BASE + [marked("1", 1)], root, EMB)
    changes = [
        ch("delete", "d1", 1),
        ch("upsert", "d9", 2, document=doc("d9", "1", ["quota", "ledger", "fresh"], ("a",)).model_dump()),
        ch("acl", "d0", 3, acl=["b"]),
        ch("upsert", "d3", 4, document=doc("d3", "2", ["refund", "changed"], ("a", "c")).model_dump()),
    ]
    log = tmp_path / "changes" / "c.jsonl"
    log.parent.mkdir()
    log.write_text("".join(c.model_dump_json(exclude_none=True) + "\n" for c in changes))
    errors, done = [], threading.Event()
    compactions = []

    def guard(fn):
        def run():
            try:
                fn()
            except Exception as e:  # noqa: BLE001 - reported by the assertion below
                errors.append(e)
        return run

    def apply():
        try:
            run_apply(ApplySettings(changes=str(log), index_root=root, quiet=True, lease_wait_s=600), spark=spark)
        finally:
            done.set()

    def compact_loop():
        while not done.is_set():
            compactions.append(compact_tenant(root, "t", lease_wait_s=600)["compacted"])
            time.sleep(0.2)

    def purge():
        time.sleep(2)
        purge_document(root, "t", "dm", lease_wait_s=600)

    threads = [threading.Thread(target=guard(f)) for f in (apply, compact_loop, purge)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    compact_tenant(root, "t")
    want = rebuild(final_sources([d for d in BASE], changes))
    assert_same_view(TenantIndex.load(root, "t"), want)
    assert files_containing(root, MARKER.encode()) == []
    from quarry.core.index.lease import read_lease

    assert read_lease(root, "t") is None and compactions
