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
    assert not list(Path(root, "t").iterdir())  # no lease, temp or grave file left


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
    from quarry.core.index.lease import LeaseBusy, acquire, read_lease

    first = acquire(s3_root, "t", "compact", ttl_s=30)
    with pytest.raises(LeaseBusy):  # If-None-Match: * refused the second create
        acquire(s3_root, "t", "purge", wait_s=0.3)
    assert read_lease(s3_root, "t").owner == first.record.owner
    first.release()
    second = acquire(s3_root, "t", "purge", wait_s=0)
    second._stop.set()  # dies; its short lease expires and is taken over
    second._thread.join()
    layout.write_atomic(layout.join(s3_root, "t", "LEASE"),
                        second.record.model_copy(update={"expires": time.time() - 1}).model_dump_json().encode())
    third = acquire(s3_root, "t", "gc", wait_s=5)
    assert read_lease(s3_root, "t").owner == third.record.owner
    third.release()
    assert read_lease(s3_root, "t") is None
