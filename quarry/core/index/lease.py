"""Per-tenant writer leases: one writer at a time may change a tenant's published index.

    <root>/<tenant>/LEASE    {"owner", "job", "tenant", "acquired", "expires"} (JSON)

Every job that publishes (``apply-changes`` per tenant it publishes, ``compact``,
``reconcile``'s in-process repairs, the build's publish step, ``gc`` and ``purge``) holds the
tenant's lease from the moment it reads the index it will change until it has published:

    with tenant_lease(root, "acme", "compact"):
        ...read, fold, publish...

The lease is taken with create-if-absent semantics: on a local root a complete temporary
file is hard-linked to ``LEASE`` (``link`` fails when the name exists, so two writers cannot
both succeed and a reader never sees a torn file); on an object store it is one exclusive
PUT (fsspec ``mode="xb"``, which s3fs sends as ``If-None-Match: *``). A background thread
renews it every ``ttl_s / 3`` while the job runs; it is released (deleted) at the end. A
lease whose holder died is taken over once ``expires`` has passed: on a local root by an
atomic rename of the expired file (only one taker wins the rename), on an object store by a
delete and a new exclusive create. A second writer waits up to ``wait_s`` for the lease,
then fails with one line (:class:`LeaseBusy`, a ``UsageError``: exit 2 on the command line).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from pydantic import BaseModel, ConfigDict

from quarry.core.errors import UsageError
from quarry.core.index import layout

LEASE = "LEASE"
DEFAULT_TTL_S = 30.0
DEFAULT_WAIT_S = 60.0


class LeaseBusy(UsageError):
    """Another writer holds the tenant's lease past the wait."""


class LeaseLost(RuntimeError):
    """The lease expired and another writer took it over while this job ran."""


class LeaseRecord(BaseModel):
    model_config = ConfigDict(frozen=True, extra="allow")

    owner: str
    job: str
    tenant: str
    acquired: float  # epoch seconds
    expires: float  # epoch seconds

    def until(self) -> str:
        return dt.datetime.fromtimestamp(self.expires, dt.timezone.utc).isoformat(timespec="seconds")


def lease_path(root: str, tenant: str) -> str:
    return layout.join(layout.tenant_dir(root, tenant), LEASE)


def new_owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def read_lease(root: str, tenant: str) -> LeaseRecord | None:
    fs, path = layout.fs_and_path(lease_path(root, tenant))
    try:
        with fs.open(path, "rb") as f:
            body = f.read()
    except FileNotFoundError:
        return None
    try:
        return LeaseRecord.model_validate_json(body)
    except ValueError:  # a foreign or damaged file: treat as expired long ago
        return LeaseRecord(owner="?", job="?", tenant=tenant, acquired=0.0, expires=0.0)


def _create_exclusive(uri: str, body: bytes) -> bool:
    """Create ``uri`` with ``body`` unless it exists; True when this call created it."""
    fs, path = layout.fs_and_path(uri)
    if layout.is_local(uri):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{uuid.uuid4().hex}.tmp"
        with open(tmp, "wb") as f:
            f.write(body)
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, path)  # atomic, fails when the name exists
            return True
        except FileExistsError:
            return False
        finally:
            os.unlink(tmp)
    try:
        with fs.open(path, "xb") as f:
            f.write(body)
        return True
    except FileExistsError:
        return False


def _remove_expired(root: str, tenant: str, seen: LeaseRecord) -> None:
    """Remove the expired lease ``seen`` (and not a newer one another taker just created)."""
    uri = lease_path(root, tenant)
    fs, path = layout.fs_and_path(uri)
    if layout.is_local(uri):
        grave = f"{path}.expired-{uuid.uuid4().hex}"
        try:
            os.rename(path, grave)  # one taker wins; the others see FileNotFoundError
        except FileNotFoundError:
            return
        try:
            got = LeaseRecord.model_validate_json(open(grave, "rb").read())
        except ValueError:
            got = None
        if got is not None and got.owner != seen.owner and got.expires > time.time():
            try:  # we raced a fresh lease away: put it back where it was
                os.link(grave, path)
            except FileExistsError:
                pass
        os.unlink(grave)
        return
    # Object stores: a delete, then the exclusive create decides. Two takers of one expired
    # lease can race here (documented in docs/operations.md); a live lease is never deleted.
    try:
        fs.rm(path)
    except FileNotFoundError:
        pass


class TenantLease:
    """A held lease; renews itself in a daemon thread until :meth:`release`."""

    def __init__(self, root: str, tenant: str, record: LeaseRecord, ttl_s: float):
        self.root, self.tenant, self.record, self.ttl_s = root, tenant, record, ttl_s
        self.lost: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._renew_loop, name=f"quarry-lease-{tenant}", daemon=True)
        self._thread.start()

    def _renew_loop(self) -> None:
        while not self._stop.wait(self.ttl_s / 3):
            try:
                self.renew()
            except Exception as e:  # noqa: BLE001 - surfaced by ensure()
                self.lost = f"{type(e).__name__}: {e}"

    def renew(self) -> None:
        cur = read_lease(self.root, self.tenant)
        if cur is None or cur.owner != self.record.owner:
            self.lost = f"taken over by {cur.job} ({cur.owner})" if cur else "the lease file disappeared"
            self._stop.set()
            return
        self.record = self.record.model_copy(update={"expires": time.time() + self.ttl_s})
        layout.write_atomic(lease_path(self.root, self.tenant), self.record.model_dump_json().encode())

    def ensure(self) -> None:
        """Raise :class:`LeaseLost` unless this writer still holds the lease (call before publishing)."""
        if self.lost is None:
            cur = read_lease(self.root, self.tenant)
            if cur is None or cur.owner != self.record.owner:
                self.lost = f"taken over by {cur.job} ({cur.owner})" if cur else "the lease file disappeared"
        if self.lost is not None:
            raise LeaseLost(f"{self.tenant}: the {self.record.job} writer lease was lost ({self.lost}); "
                            f"nothing more was published, run it again")

    def release(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        cur = read_lease(self.root, self.tenant)
        if cur is not None and cur.owner == self.record.owner:
            fs, path = layout.fs_and_path(lease_path(self.root, self.tenant))
            try:
                fs.rm(path)
            except FileNotFoundError:
                pass


def acquire(root: str, tenant: str, job: str, *, wait_s: float = DEFAULT_WAIT_S, ttl_s: float = DEFAULT_TTL_S,
            owner: str | None = None, poll_s: float = 0.1) -> TenantLease:
    """Take the tenant's writer lease, waiting up to ``wait_s`` for another holder to release
    it or for its lease to expire; raise :class:`LeaseBusy` past that."""
    root = str(root).rstrip("/")
    owner = owner or new_owner()
    deadline = time.monotonic() + wait_s
    while True:
        now = time.time()
        rec = LeaseRecord(owner=owner, job=job, tenant=tenant, acquired=now, expires=now + ttl_s)
        if _create_exclusive(lease_path(root, tenant), rec.model_dump_json().encode()):
            return TenantLease(root, tenant, rec, ttl_s)
        cur = read_lease(root, tenant)
        if cur is not None and cur.expires < time.time():
            _remove_expired(root, tenant, cur)
            continue
        if time.monotonic() >= deadline:
            who = f"{cur.job} (owner {cur.owner}) until {cur.until()}" if cur else "another writer"
            raise LeaseBusy(f"tenant {tenant} is being written by {who}; waited {wait_s:g}s "
                            f"(raise --lease-wait-s, or retry when it finishes)")
        time.sleep(poll_s)


@contextmanager
def tenant_lease(root: str, tenant: str, job: str, *, wait_s: float = DEFAULT_WAIT_S,
                 ttl_s: float = DEFAULT_TTL_S) -> Iterator[TenantLease]:
    """Hold the tenant's writer lease for the block (released even when it raises)."""
    held = acquire(root, tenant, job, wait_s=wait_s, ttl_s=ttl_s)
    try:
        yield held
    finally:
        held.release()
