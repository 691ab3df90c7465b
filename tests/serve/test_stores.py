"""Run-store contract suite, run against every backend (the actor's table in-process and a
real Redis server), plus the actor's checkpoint and the trace store."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import time
from pathlib import Path

import pytest

from quarry.core.records import Principal
from quarry.core.agent.runs import principal_key
from quarry.serve.stores.runstore import QuotaExceeded, RunNotFound, RunStore
from quarry.serve.stores.runstore_actor import ActorRunStore, RunTable
from quarry.serve.stores.tracestore import TRACE_ID, TraceWriter, find_trace, hour_of, read_traces

pytestmark = pytest.mark.slow  # the contract suite also runs against a real Redis server

REPO = Path(__file__).resolve().parents[2]


def _pk(tenant="acme", subject="u1", groups=("support",)) -> str:
    return principal_key(Principal(tenant=tenant, subject=subject, groups=frozenset(groups)))


class TableStore(ActorRunStore):
    """The actor store's client logic over its ``RunTable`` in this process (no Ray): the
    same table the actor holds, the same conversions the gateway sees."""

    def __init__(self, table: RunTable):
        self.table = table

    async def _call(self, method, *args):
        return getattr(self.table, method)(*args)


@pytest.fixture(scope="module")
def redis_url():
    spec = importlib.util.spec_from_file_location("redis_server", REPO / "scripts" / "redis_server.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    try:
        server = mod.RedisServer()
        url = server.start()
    except FileNotFoundError as e:
        pytest.skip(str(e))
    yield url
    server.stop()


LIMITS = dict(open_per_tenant=6, open_per_subject=4, kept_per_tenant=8)


@pytest.fixture(params=["actor", "redis"])
def make_store(request, tmp_path):
    """A factory: ``make_store(ttl_s=...)`` -> a fresh, empty store of the backend."""
    made = []

    def make(ttl_s: float = 3600, **limits):
        lim = {**LIMITS, **limits}
        if request.param == "actor":
            made.append(None)  # each store its own checkpoint folder
            return TableStore(RunTable(str(tmp_path / f"s{len(made)}"), ttl_s=ttl_s, **lim))
        from quarry.serve.stores.redis_store import RedisRunStore

        store = RedisRunStore(request.getfixturevalue("redis_url"), prefix=f"t{time.time_ns()}", ttl_s=ttl_s, **lim)
        made.append(store)
        return store

    yield make


def arun(coro):
    return asyncio.run(coro)


def test_backends_implement_the_protocol(make_store):
    assert isinstance(make_store(), RunStore)


def test_run_is_bound_to_its_principal(make_store):
    async def go():
        s = make_store()
        v = await s.create(_pk(), 3)
        assert (await s.get(v.run_id, _pk())).searches_left == 3
        for pkey in (_pk(subject="u2"), _pk(groups=("support", "hr")), _pk(tenant="globex")):
            with pytest.raises(RunNotFound):
                await s.get(v.run_id, pkey)
            with pytest.raises(RunNotFound):
                await s.apply_search(v.run_id, pkey, ["a"])
        with pytest.raises(RunNotFound):
            await s.get("00000000-0000-0000-0000-000000000000", _pk())
        # the failed attempts spent nothing
        assert (await s.get(v.run_id, _pk())).used == 0

    arun(go())


def test_budget_and_new_evidence_in_one_decision(make_store):
    async def go():
        s = make_store()
        r = (await s.create(_pk(), 3)).run_id
        d1 = await s.apply_search(r, _pk(), ["a", "b"])
        assert d1.allowed and d1.new_ids == ("a", "b") and d1.view.searches_left == 2
        d2 = await s.apply_search(r, _pk(), ["b", "c"])
        assert d2.allowed and d2.new_ids == ("c",) and d2.view.searches_left == 1
        d3 = await s.apply_search(r, _pk(), ["d"])
        assert d3.allowed and d3.view.searches_left == 0
        d4 = await s.apply_search(r, _pk(), ["e"])
        assert not d4.allowed and d4.newly_finished and d4.view.outcome == "budget_exhausted"
        d5 = await s.apply_search(r, _pk(), ["f"])
        assert not d5.allowed and not d5.newly_finished
        # a search with nothing new (after the first) ends the budget at once
        r2 = (await s.create(_pk(), 3)).run_id
        await s.apply_search(r2, _pk(), ["a"])
        d = await s.apply_search(r2, _pk(), ["a"])
        assert d.allowed and d.new_ids == () and d.view.searches_left == 0
        # the two-step path follows the same rules
        r3 = (await s.create(_pk(), 1)).run_id
        assert (await s.reserve_search(r3, _pk())).allowed
        assert (await s.record_results(r3, _pk(), ["x"])).new_ids == ("x",)
        assert not (await s.reserve_search(r3, _pk())).allowed

    arun(go())


def test_one_exit_and_citable_ids(make_store):
    async def go():
        s = make_store()
        r = (await s.create(_pk(), 3)).run_id
        await s.apply_search(r, _pk(), ["a"])
        await s.record_fetch(r, _pk(), ["doc#p1"])
        start = await s.begin_answer(r, _pk())
        assert start.allowed and set(start.retrieved_ids) == {"a", "doc#p1"}
        assert not (await s.begin_answer(r, _pk())).allowed
        await s.end_answer(r, _pk(), "answered")
        v = await s.get(r, _pk())
        assert v.finished and v.outcome == "answered" and v.searches_left == 0
        assert not (await s.apply_search(r, _pk(), ["z"])).allowed

    arun(go())


def test_concurrent_decisions_on_one_run_are_atomic(make_store):
    async def go():
        s = make_store()
        r = (await s.create(_pk(), 3)).run_id
        out = await asyncio.gather(*[s.apply_search(r, _pk(), [f"id{i}"]) for i in range(24)])
        assert sum(d.allowed for d in out) == 3
        assert sum(d.newly_finished for d in out) == 1
        starts = await asyncio.gather(*[s.begin_answer(r, _pk()) for _ in range(8)])
        assert sum(a.allowed for a in starts) == 0  # the refusal finished the run
        r2 = (await s.create(_pk(), 3)).run_id
        starts = await asyncio.gather(*[s.begin_answer(r2, _pk()) for _ in range(8)])
        assert sum(a.allowed for a in starts) == 1

    arun(go())


def test_open_run_quotas_are_per_tenant_and_per_subject(make_store):
    async def go():
        s = make_store()
        victim = [(await s.create(_pk("globex", "g1"), 3)).run_id for _ in range(2)]
        # one subject: 4 open runs, then 429
        mine = [(await s.create(_pk(subject="flood"), 3)).run_id for _ in range(4)]
        with pytest.raises(QuotaExceeded) as e:
            await s.create(_pk(subject="flood"), 3)
        assert e.value.scope == "subject" and e.value.limit == 4
        # the same subject with another group set is the same subject
        with pytest.raises(QuotaExceeded):
            await s.create(_pk(subject="flood", groups=("hr",)), 3)
        # the tenant: 6 open runs over all its subjects, then 429
        await s.create(_pk(subject="flood2"), 3)
        await s.create(_pk(subject="flood2"), 3)
        with pytest.raises(QuotaExceeded) as e:
            await s.create(_pk(subject="flood3"), 3)
        assert e.value.scope == "tenant"
        # another tenant is untouched: its runs live and it can still create
        for r in victim:
            assert not (await s.get(r, _pk("globex", "g1"))).finished
        await s.create(_pk("globex", "g2"), 3)
        # finishing a run frees an open slot
        await s.begin_answer(mine[0], _pk(subject="flood"))
        await s.end_answer(mine[0], _pk(subject="flood"), "answered")
        await s.create(_pk(subject="flood"), 3)

    arun(go())


def test_eviction_takes_only_the_tenants_own_finished_runs(make_store):
    async def go():
        s = make_store(open_per_tenant=100, open_per_subject=100, kept_per_tenant=5)
        other = (await s.create(_pk("globex"), 3)).run_id
        runs = []
        for i in range(5):
            r = (await s.create(_pk(subject=f"s{i}"), 3)).run_id
            runs.append(r)
            if i < 2:  # two finished, three open
                await s.begin_answer(r, _pk(subject=f"s{i}"))
        for i in range(2):  # at the cap: the oldest finished runs make room
            runs.append((await s.create(_pk(subject=f"n{i}"), 3)).run_id)
        for i in range(2):
            with pytest.raises(RunNotFound):
                await s.get(runs[i], _pk(subject=f"s{i}"))
        for i in range(2, 5):
            assert not (await s.get(runs[i], _pk(subject=f"s{i}"))).finished
        # only open runs left at the cap: refused, nothing evicted
        with pytest.raises(QuotaExceeded):
            await s.create(_pk(subject="late"), 3)
        assert (await s.get(other, _pk("globex"))).searches_left == 3

    arun(go())


def test_runs_expire_by_ttl(make_store):
    async def go():
        s = make_store(ttl_s=1)
        r = (await s.create(_pk(subject="ttl"), 3)).run_id
        await asyncio.sleep(1.3)
        with pytest.raises(RunNotFound):
            await s.get(r, _pk(subject="ttl"))
        # expired runs no longer count as open
        for _ in range(4):
            await s.create(_pk(subject="ttl"), 3)

    arun(go())


# -- the actor's checkpoint ------------------------------------------------------------------

def _table(d, **kw):
    return RunTable(str(d), ttl_s=3600, **{**LIMITS, "open_per_tenant": 1000, "open_per_subject": 1000,
                                           "kept_per_tenant": 1000, **kw})


def test_checkpoint_survives_a_restart_and_never_rolls_back(tmp_path):
    t = _table(tmp_path, compact_every=5)
    runs = [t.create(_pk(subject=f"u{i}"), 3)["run_id"] for i in range(4)]
    for i, r in enumerate(runs):
        t.decide("apply_search", r, _pk(subject=f"u{i}"), [f"a{i}"])
    t.decide("apply_search", runs[0], _pk(subject="u0"), ["b"])
    t.decide("begin_answer", runs[1], _pk(subject="u1"))
    assert (tmp_path / "runs.snap").exists()  # the log was folded into a snapshot at least once
    before = {r: t.decide("get", r, _pk(subject=f"u{i}")) for i, r in enumerate(runs)}
    t.close()
    again = _table(tmp_path, compact_every=5)
    after = {r: again.decide("get", r, _pk(subject=f"u{i}")) for i, r in enumerate(runs)}
    assert after == before and after[runs[0]].used == 2 and after[runs[1]].finished
    # open-run counts are rebuilt too
    assert again.stats()["open_by_tenant"] == {"acme": 3}


def test_checkpoint_on_object_storage_is_read_back_from_another_node(s3_server, tmp_path):
    """A URI state_dir (the moto S3 server): every change is one object, a compaction one
    snapshot object; a table re-created elsewhere (no local file of the first one) reads
    every run back, a second compaction folds the log again, and a crash between the
    snapshot and the deletion of the log objects it folded rolls nothing back."""
    from quarry.serve.stores.run_checkpoint import ObjectCheckpoint

    uri = s3_server.uri("runs-unit", "idx", "_serve", "runs")
    fs = s3_server.fs()
    t = _table(uri, compact_every=5)
    assert isinstance(t._ckpt, ObjectCheckpoint)
    runs = [t.create(_pk(subject=f"u{i}"), 3)["run_id"] for i in range(4)]
    for i, r in enumerate(runs):
        t.decide("apply_search", r, _pk(subject=f"u{i}"), [f"a{i}"])
    t.decide("apply_search", runs[0], _pk(subject="u0"), ["b"])
    t.decide("begin_answer", runs[1], _pk(subject="u1"))
    prefix = f"{s3_server.bucket}/runs-unit/idx/_serve/runs"
    assert fs.exists(f"{prefix}/runs.snap")  # folded at least once
    assert 0 < len(fs.ls(f"{prefix}/log")) < 10  # folded objects deleted, later changes one object each
    before = {r: t.decide("get", r, _pk(subject=f"u{i}")) for i, r in enumerate(runs)}
    t.close()
    assert not list(tmp_path.iterdir())  # nothing on local disk
    again = _table(uri, compact_every=5)
    after = {r: again.decide("get", r, _pk(subject=f"u{i}")) for i, r in enumerate(runs)}
    assert after == before and after[runs[0]].used == 2 and after[runs[1]].finished
    assert again.stats()["open_by_tenant"] == {"acme": 3}
    # a crash after the snapshot PUT, before the folded log objects were deleted
    fs.pipe(f"{prefix}/log/{0:016d}.json", b'{"q":0,"d":"' + runs[0].encode() + b'"}')
    third = _table(uri)
    assert third.decide("get", runs[0], _pk(subject="u0")).used == 2  # a stale entry replays nothing


def test_checkpoint_tolerates_a_torn_last_line(tmp_path):
    t = _table(tmp_path)
    r = t.create(_pk(), 3)["run_id"]
    t.decide("apply_search", r, _pk(), ["a"])
    t.close()
    with open(tmp_path / "runs.log", "a") as f:
        f.write('{"q": 99, "c": 1.0, "s": {"run_id": "x", "princ')
    assert _table(tmp_path).decide("get", r, _pk()).used == 1


# -- traces ----------------------------------------------------------------------------------

def test_a_trace_half_written_by_another_replica_is_waited_for_not_a_server_error(tmp_path):
    w = TraceWriter(str(tmp_path), flush_ms=50)
    tid = w.new_id(time.time())
    w.close()
    line = json.dumps({"trace_id": tid, "kind": "search", "tenant": "acme", "at": 1.0, "delivered": ["p"]},
                      separators=(",", ":"))
    m = TRACE_ID.fullmatch(tid)
    f = tmp_path / "acme" / m.group(1) / f"{m.group(2)}.jsonl"
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_text(line[:-5])  # the writer is part-way through its append
    assert find_trace(str(tmp_path), "acme", tid) is None  # not yet there; no JSONDecodeError
    f.write_text(line + "\n")
    assert find_trace(str(tmp_path), "acme", tid)["trace_id"] == tid


def test_traces_are_appended_read_back_after_restart_and_filtered(tmp_path):
    w = TraceWriter(str(tmp_path), flush_ms=50)
    ids = []
    for tenant in ("acme", "globex"):
        for i in range(3):
            tid = w.new_id(time.time())
            w.append({"trace_id": tid, "kind": "search", "tenant": tenant, "at": time.time(), "delivered": [f"p{i}"]})
            ids.append((tenant, tid))
    w.close()  # a graceful stop writes everything buffered
    w2 = TraceWriter(str(tmp_path), flush_ms=50)  # a restarted replica: a new writer, same folder
    tid = w2.new_id(time.time())
    w2.append({"trace_id": tid, "kind": "answer", "tenant": "acme", "at": time.time()})
    w2.close()
    for tenant, t in ids:
        assert find_trace(str(tmp_path), tenant, t)["trace_id"] == t
        other = "globex" if tenant == "acme" else "acme"
        assert find_trace(str(tmp_path), other, t) is None  # never another tenant's
    assert find_trace(str(tmp_path), "acme", "../../etc/passwd") is None
    assert len(list(read_traces(str(tmp_path)))) == 7
    assert [r["kind"] for r in read_traces(str(tmp_path), "acme", kind="answer")] == ["answer"]
    assert len(list(read_traces(str(tmp_path), "globex"))) == 3


def test_trace_quota_and_retention_are_per_tenant(tmp_path):
    w = TraceWriter(str(tmp_path), per_tenant_hour=5, retention_h=2, flush_ms=50)
    now = time.time()
    keep = w.new_id(now)
    w.append({"trace_id": keep, "kind": "search", "tenant": "globex", "at": now})
    flood = [w.append({"trace_id": w.new_id(now), "kind": "search", "tenant": "acme", "at": now}) for _ in range(50)]
    assert sum(flood) == 5 and w.dropped["acme"] == 45 and w.dropped["globex"] == 0
    late = w.new_id(now)
    assert w.append({"trace_id": late, "kind": "search", "tenant": "globex", "at": now})
    w.flush()
    assert find_trace(str(tmp_path), "globex", keep) and find_trace(str(tmp_path), "globex", late)
    old = tmp_path / "acme" / hour_of(now - 5 * 3600)
    old.mkdir(parents=True)
    (old / "x.jsonl").write_text(json.dumps({"trace_id": "old"}) + "\n")
    assert w.sweep() == 1 and not old.exists()
    assert find_trace(str(tmp_path), "globex", keep)
    w.close()


def test_traces_on_object_storage_are_read_from_any_writer_and_swept(s3_server):
    """A URI root: each flush is one object per writer (no append on S3); a reader holding
    neither writer finds each trace, reads them all, and retention deletes old hour prefixes."""
    root = s3_server.uri("traces-unit")
    now = time.time()
    a, b = TraceWriter(root, flush_ms=10_000, retention_h=2), TraceWriter(root, flush_ms=10_000, retention_h=2)
    ids = []
    for w, tenant in ((a, "acme"), (b, "acme"), (b, "globex")):
        for _ in range(2):  # two flush batches per writer: two objects, no overwrite
            tid = w.new_id(now)
            w.append({"trace_id": tid, "kind": "search", "tenant": tenant, "at": now})
            ids.append((tenant, tid))
            assert w.flush() == 1
    fs = s3_server.fs()
    objs = fs.find(f"{s3_server.bucket}/traces-unit")
    assert len(objs) == 6 and all(o.endswith(".jsonl") and o.rsplit("/", 1)[-1].count("-") == 1 for o in objs)
    for tenant, tid in ids:
        assert find_trace(root, tenant, tid)["trace_id"] == tid
        assert find_trace(root, "globex" if tenant == "acme" else "acme", tid) is None
    assert len(list(read_traces(root))) == 6 and len(list(read_traces(root, "globex"))) == 2
    old = f"{s3_server.bucket}/traces-unit/acme/{hour_of(now - 5 * 3600)}/zz-00000001.jsonl"
    fs.pipe(old, b'{"trace_id": "old"}\n')
    assert a.sweep() == 1 and not fs.exists(old)
    assert find_trace(root, "acme", ids[0][1])
    a.close(), b.close()


def test_store_settings_fail_fast():
    from pydantic import ValidationError

    from quarry.serve.settings import AuthSettings, ServeSettings

    auth = AuthSettings(hs256_secret="x" * 40)
    s = ServeSettings(index_root="/data/idx", auth=auth)
    assert s.trace_root == "/data/idx/_traces" and s.run_state_dir == "/data/idx/_serve/runs"
    for bad in ({"run_store": "redis"}, {"runs_kept_per_tenant": 5}, {"run_store": "valkey"}):
        with pytest.raises(ValidationError):
            ServeSettings(**{"index_root": "/data/idx", "auth": auth, **bad})
    ok = ServeSettings(index_root="s3://bucket/idx", auth=auth, trace_dir="/t", run_store="redis",
                       redis_url="redis://r:6379/0")
    assert ok.trace_root == "/t"
    shared = ServeSettings(index_root="s3://bucket/idx", auth=auth, run_store="redis", redis_url="redis://r:6379/0")
    assert shared.trace_root == "s3://bucket/idx/_traces"  # traces under the root: shared by every node
    actor = ServeSettings(index_root="s3://bucket/idx", auth=auth)  # the actor store on a URI root
    assert actor.run_state_dir == "s3://bucket/idx/_serve/runs"  # its checkpoint too: not node-local


# -- platform quotas: idle timeout, per-tenant overrides, the stated reset -------------------

def test_idle_runs_close_and_free_their_slot(make_store):
    async def go():
        s = make_store(idle_s=1.5, open_per_subject=2)
        pk = _pk(subject="idle")
        kept, idle = (await s.create(pk, 3)).run_id, (await s.create(pk, 3)).run_id
        with pytest.raises(QuotaExceeded):
            await s.create(pk, 3)
        await asyncio.sleep(0.9)
        await s.get(kept, pk)  # a call restarts this run's idle clock
        await asyncio.sleep(0.9)
        # the untouched run closed and freed its slot; the touched one is still open
        fresh = (await s.create(pk, 3)).run_id
        with pytest.raises(RunNotFound):
            await s.apply_search(idle, pk, ["a"])
        assert (await s.apply_search(kept, pk, ["a"])).allowed
        assert not (await s.get(fresh, pk)).finished
        # a finished run is not open, so idleness does not apply to it: it stays readable until its TTL
        await s.begin_answer(kept, pk)
        await s.end_answer(kept, pk, "answered")
        await asyncio.sleep(1.7)
        assert (await s.get(kept, pk)).finished

    arun(go())


def test_open_run_limits_are_overridable_per_tenant_and_state_their_reset(make_store):
    async def go():
        s = make_store(idle_s=100, kept_per_tenant=50, overrides={"platform": (20, 10)})
        agent = _pk("platform", "shared-service-identity")
        for _ in range(10):  # the platform's one service identity holds 10 open runs, not 4
            await s.create(agent, 3)
        with pytest.raises(QuotaExceeded) as e:
            await s.create(agent, 3)
        assert e.value.scope == "subject" and e.value.limit == 10
        assert 90 < e.value.reset_s <= 100  # the first open run closes by idleness within 100 s
        # other tenants keep the defaults (4 per subject)
        for _ in range(4):
            await s.create(_pk("acme", "u9"), 3)
        with pytest.raises(QuotaExceeded) as e:
            await s.create(_pk("acme", "u9"), 3)
        assert e.value.limit == 4 and 90 < e.value.reset_s <= 100
        with pytest.raises(QuotaExceeded) as e:  # with no idle timeout, the reset is the TTL
            s2 = make_store(ttl_s=50, open_per_subject=1)
            await s2.create(agent, 3)
            await s2.create(agent, 3)
        assert e.value.scope == "subject" and 40 < e.value.reset_s <= 50

    arun(go())


def test_purge_removes_a_documents_ids_from_runs_and_the_checkpoint(make_store, tmp_path):
    """A document purge leaves the tenant's runs without any id of the document (other
    tenants' runs untouched); a tenant purge drops the tenant's runs. For the actor, no byte of
    its checkpoint folder names the purged document afterwards."""
    async def go():
        s = make_store()
        a, g = await s.create(_pk(), 3), await s.create(_pk(tenant="globex"), 3)
        await s.apply_search(a.run_id, _pk(), ["zqxdoc@1#p0", "d2@1#p0"])
        await s.record_fetch(a.run_id, _pk(), ["zqxdoc@1#p1"], ["zqxdoc@2#p0"])
        await s.apply_search(g.run_id, _pk(tenant="globex"), ["zqxdoc@1#p0"])  # another tenant's own doc
        assert await s.purge("acme", "zqxdoc") == 1
        got = await s.get(a.run_id, _pk())
        assert got.used == 1 and not got.finished
        table = getattr(s, "table", None)
        if table is not None:
            state = table._tenants["acme"][a.run_id][1]
            assert state.seen_ids == {"d2@1#p0"} and not state.fetched_ids and not state.rejected_ids
            disk = b"".join(p.read_bytes() for p in Path(table._ckpt._dir).iterdir() if p.is_file())
            assert b"zqxdoc@1#p0" in disk  # globex's run, on disk once
            assert disk.count(b"zqxdoc") == 1
        # the run still answers, and a later search may return the id of a new upload again
        await s.apply_search(a.run_id, _pk(), ["d3@1#p0"])
        assert await s.purge("globex") == 1
        with pytest.raises(RunNotFound):
            await s.get(g.run_id, _pk(tenant="globex"))
        assert (await s.get(a.run_id, _pk())).used == 2  # the other tenant's runs stay

    arun(go())
