"""Per-tenant writer leases (``quarry.core.index.lease``): exclusive create on a local root and
on an S3 API (a moto server), mutual exclusion under contention, the one-line refusal of a
second writer, and takeover only after expiry."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.unit, pytest.mark.timeout(300)]


def test_second_writer_waits_then_fails_with_one_line(tmp_path):
    from quarry.core.index.lease import LeaseBusy, acquire, read_lease, tenant_lease

    root = str(tmp_path)
    with tenant_lease(root, "acme", "compact") as held:
        rec = read_lease(root, "acme")
        assert rec.owner == held.record.owner and rec.job == "compact"
        t0 = time.monotonic()
        with pytest.raises(LeaseBusy) as e:
            acquire(root, "acme", "apply-changes", wait_s=0.5)
        assert time.monotonic() - t0 >= 0.5
        msg = str(e.value)
        assert msg.startswith("tenant acme is being written by compact (owner ") and "\n" not in msg
        assert rec.owner in msg and "until " in msg
        other = acquire(root, "globex", "apply-changes", wait_s=0)  # another tenant is not blocked
        other.release()
    assert read_lease(root, "acme") is None  # released
    acquire(root, "acme", "apply-changes", wait_s=0).release()


def test_leases_exclude_each_other_under_contention(tmp_path):
    """Eight threads read-modify-write one file under the lease: no increment is lost."""
    from quarry.core.index.lease import tenant_lease

    root, counter = str(tmp_path), tmp_path / "counter"
    counter.write_text("0")
    inside, overlaps = [0], []

    def worker():
        for _ in range(5):
            with tenant_lease(root, "t", "test", wait_s=60):
                inside[0] += 1
                if inside[0] != 1:
                    overlaps.append(inside[0])
                n = int(counter.read_text())
                time.sleep(0.002)
                counter.write_text(str(n + 1))
                inside[0] -= 1

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert counter.read_text() == "40" and not overlaps


def test_renewal_keeps_a_live_lease_and_expiry_allows_takeover(tmp_path):
    from quarry.core.index.lease import LeaseBusy, LeaseLost, acquire, read_lease

    root = str(tmp_path)
    live = acquire(root, "t", "compact", ttl_s=0.6)
    time.sleep(1.5)  # well past one ttl: the renewer kept it alive
    with pytest.raises(LeaseBusy):
        acquire(root, "t", "purge", wait_s=0.2, ttl_s=0.6)
    live.ensure()
    live._stop.set()  # the holder "dies": nothing renews its lease any more
    live._thread.join()
    t0 = time.monotonic()
    taker = acquire(root, "t", "purge", wait_s=10, ttl_s=5)
    assert time.monotonic() - t0 < 5
    assert read_lease(root, "t").owner == taker.record.owner and read_lease(root, "t").job == "purge"
    with pytest.raises(LeaseLost):  # the dead holder must not publish
        live.ensure()
    live.release()  # releasing a lost lease leaves the new holder's lease alone
    assert read_lease(root, "t").owner == taker.record.owner
    taker.release()
    assert read_lease(root, "t") is None
    # what is left: the released top claim only (no temp file, no older claim)
    assert [p.name for p in Path(root, "t").iterdir()] == ["LEASE"]
    assert [p.name for p in Path(root, "t", "LEASE").iterdir()] == [f"{taker.record.seq:012d}.json"]


def test_cli_refuses_a_busy_tenant_with_exit_2(tmp_path, capsys):
    from quarry.cli import main
    from quarry.core.index.lease import tenant_lease
    from quarry.core.ingest.pipeline import build_corpus

    from helpers.freshness import BASE, EMB

    root = str(tmp_path / "idx")
    build_corpus(BASE, root, EMB)
    with tenant_lease(root, "t", "apply-changes"):
        rc = main(["compact", "--tenant", "t", "--index-root", root, "--lease-wait-s", "0.2"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err.startswith("quarry compact: error: tenant t is being written by apply-changes (owner ")
    assert len(err.splitlines()) == 1


@pytest.fixture()
def s3_root(s3_server):
    return s3_server.uri("lease", "idx")  # the session's moto server (tests/helpers/s3.py)


def test_exclusive_create_on_an_s3_api(s3_root):
    from quarry.core.index import layout
    from quarry.core.index.lease import LeaseBusy, acquire, claim_path, read_lease

    first = acquire(s3_root, "t", "compact", ttl_s=30)
    with pytest.raises(LeaseBusy):  # If-None-Match: * refused the second create
        acquire(s3_root, "t", "purge", wait_s=0.3)
    assert read_lease(s3_root, "t").owner == first.record.owner
    first.release()
    second = acquire(s3_root, "t", "purge", wait_s=0)
    second._stop.set()  # dies; its short lease expires and is taken over
    second._thread.join()
    layout.write_atomic(claim_path(s3_root, "t", second.record.seq),
                        second.record.model_copy(update={"expires": time.time() - 1}).model_dump_json().encode())
    third = acquire(s3_root, "t", "gc", wait_s=5)
    assert read_lease(s3_root, "t").owner == third.record.owner
    third.release()
    assert read_lease(s3_root, "t") is None


# --------------------------------------------------------------------------- takeover races


def _expired_leases(root: str, tenants: list[str]) -> None:
    """Each tenant's lease held by a writer that died: its claim expired, nothing renews it."""
    from quarry.core.index.lease import acquire, read_lease

    for t in tenants:
        dead = acquire(root, t, "dead", ttl_s=0.05)
        dead._stop.set()
        dead._thread.join()
    time.sleep(0.2)
    assert all(read_lease(root, t).expires < time.time() for t in tenants)


def _race_threads(root: str, rounds: int, takers: int) -> list[int]:
    """``takers`` threads take over one expired lease at once, ``rounds`` times; the number
    of winners of each round."""
    from quarry.core.index.lease import LeaseBusy, acquire, read_lease

    tenants = [f"r{i}" for i in range(rounds)]
    _expired_leases(root, tenants)
    winners = []
    for t in tenants:
        start, tried, won, errors = threading.Barrier(takers), threading.Barrier(takers), [], []

        def take(t=t, start=start, tried=tried, won=won):
            try:
                start.wait()
                try:
                    held = acquire(root, t, "taker", wait_s=0, ttl_s=30)
                except LeaseBusy:
                    held = None
                if held is not None:
                    won.append(held)
                tried.wait()
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(repr(e))

        threads = [threading.Thread(target=take) for _ in range(takers)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(120)
        assert not errors
        winners.append(len(won))
        if len(won) == 1:
            assert read_lease(root, t).owner == won[0].record.owner
            won[0].ensure()
        for h in won:
            h.release()
    return winners


def _race_processes(root: str, rounds: int, takers: int) -> list[int]:
    import multiprocessing as mp

    from helpers.lease_takers import take_over

    tenants = [f"p{i}" for i in range(rounds)]
    _expired_leases(root, tenants)
    ctx = mp.get_context("spawn")
    barrier, results = ctx.Barrier(takers), ctx.Queue()
    procs = [ctx.Process(target=take_over, args=(root, tenants, barrier, results)) for _ in range(takers)]
    for p in procs:
        p.start()
    got = [results.get(timeout=240) for _ in range(rounds * takers)]
    for p in procs:
        p.join(60)
    assert all(p.exitcode == 0 for p in procs)
    return [sum(1 for t, _, won in got if t == tenant and won) for tenant in tenants]


def test_one_taker_wins_an_expired_lease_on_a_local_root_threads(tmp_path):
    assert _race_threads(str(tmp_path), rounds=20, takers=16) == [1] * 20


def test_one_taker_wins_an_expired_lease_on_s3_threads(s3_server):
    root = s3_server.uri("lease-race-threads", "idx")
    assert _race_threads(root, rounds=20, takers=16) == [1] * 20


def test_one_taker_wins_an_expired_lease_on_a_local_root_processes(tmp_path):
    assert _race_processes(str(tmp_path), rounds=10, takers=6) == [1] * 10


def test_one_taker_wins_an_expired_lease_on_s3_processes(s3_server):
    root = s3_server.uri("lease-race-procs", "idx")
    assert _race_processes(root, rounds=10, takers=6) == [1] * 10


def test_a_delayed_taker_of_an_old_number_never_holds(tmp_path):
    """A taker that looked at claim n, stalled while n+1 was taken, released and n+2 taken
    (n+1 collected), then creates n+1: it sees n+2 and does not hold the lease."""
    from quarry.core.index.lease import LeaseRecord, _create_exclusive, acquire, claim_path, claims, try_acquire

    root = str(tmp_path)
    first = acquire(root, "t", "a")
    first.release()
    second = acquire(root, "t", "b")  # claim 2; claim 1 collected
    assert claims(root, "t") == [2]
    late = LeaseRecord(owner="late", job="late", tenant="t", acquired=0, expires=time.time() + 30, seq=1)
    assert _create_exclusive(claim_path(root, "t", 1), late.model_dump_json().encode())
    assert not isinstance(try_acquire(root, "t", "c"), type(second))  # claim 2 is live: no one else holds
    second.ensure()  # the holder of the top claim still holds it
    second.release()


def test_a_single_file_lease_from_before_numbered_claims(tmp_path):
    """``<tenant>/LEASE`` as one file (left by a writer of the earlier format that died): live,
    it holds the tenant; expired, it gives way to the claim folder."""
    from quarry.core.index.lease import LeaseBusy, LeaseRecord, acquire

    old = tmp_path / "acme" / "LEASE"
    old.parent.mkdir(parents=True)
    now = time.time()
    old.write_text(LeaseRecord(owner="h:1:x", job="compact", tenant="acme", acquired=now, expires=now + 60)
                   .model_dump_json())
    with pytest.raises(LeaseBusy, match="written by compact"):
        acquire(str(tmp_path), "acme", "apply-changes", wait_s=0)
    old.write_text(LeaseRecord(owner="h:1:x", job="compact", tenant="acme", acquired=0, expires=1)
                   .model_dump_json())
    held = acquire(str(tmp_path), "acme", "apply-changes", wait_s=0)
    assert old.is_dir() and held.record.seq == 1
    held.release()
