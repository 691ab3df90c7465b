"""Per-tenant writer leases: one writer at a time may change a tenant's published index.

    <root>/<tenant>/LEASE/<n>.json   {"seq", "owner", "job", "tenant", "acquired", "expires", "released"}

Every job that publishes (``apply-changes`` per tenant it publishes, ``compact``,
``reconcile``'s in-process repairs, the build's publish step, ``gc``, ``purge`` and
``rollback``) holds the tenant's lease from the moment it reads the index it will change
until it has published:

    with tenant_lease(root, "acme", "compact"):
        ...read, fold, publish...

The lease is a numbered series of *claims*; the live claim is the highest number. A writer
takes the lease by creating claim ``n + 1`` exclusively when claim ``n`` is released or
expired (or there is none): on a local root a complete temporary file is hard-linked to the
claim's name (``link`` fails when the name exists), on an object store it is one PUT with
``If-None-Match: *`` (fsspec ``mode="xb"`` in s3fs). Only one of any number of takers can
create ``n + 1``, so a takeover of an expired lease has exactly one winner on every store;
nothing is ever deleted to take a lease over (the old "delete the expired lease, then
create" on object storage let two takers both win). The winner re-lists and holds the lease
only if no higher claim exists; it then deletes the claims below its own.

Only a claim's own writer rewrites it: a background thread renews it (a new ``expires``)
every ``ttl_s / 3`` and checks that no higher claim appeared; :meth:`TenantLease.ensure`,
called before publishing, renews and checks again, so a writer that stalled past its TTL
and was taken over refuses to publish (:class:`LeaseLost`). Release marks the claim
``released`` (the highest claim is never deleted, so numbers never go back and a delayed
taker cannot re-create a number someone already holds). A second writer waits up to
``wait_s``, then fails with one line (:class:`LeaseBusy`, a ``UsageError``: exit 2 on the
command line).
"""

from __future__ import annotations

import datetime as dt
import os
import re
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
_CLAIM = re.compile(r"^(\d{12})\.json$")


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
    seq: int = 0  # the claim's number
    released: bool = False

    def until(self) -> str:
        return dt.datetime.fromtimestamp(self.expires, dt.timezone.utc).isoformat(timespec="seconds")

    def free(self, now: float) -> bool:
        return self.released or self.expires < now


def lease_path(root: str, tenant: str) -> str:
    """The tenant's claim folder."""
    return layout.join(layout.tenant_dir(root, tenant), LEASE)


def claim_path(root: str, tenant: str, seq: int) -> str:
    return layout.join(lease_path(root, tenant), f"{seq:012d}.json")


def new_owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def claims(root: str, tenant: str) -> list[int]:
    """The claim numbers on storage, sorted (a fresh listing: no listing cache)."""
    fs, path = layout.fs_and_path(lease_path(root, tenant))
    try:
        names = fs.ls(path, detail=False, refresh=True)
    except (FileNotFoundError, NotADirectoryError):
        return []
    return sorted(int(m.group(1)) for m in (_CLAIM.match(n.rstrip("/").rsplit("/", 1)[-1]) for n in names) if m)


def _read_claim(root: str, tenant: str, seq: int) -> LeaseRecord | None:
    fs, path = layout.fs_and_path(claim_path(root, tenant, seq))
    try:
        with fs.open(path, "rb") as f:
            body = f.read()
    except FileNotFoundError:
        return None
    try:
        return LeaseRecord.model_validate_json(body)
    except ValueError:  # a foreign or damaged file: treat as expired long ago
        return LeaseRecord(owner="?", job="?", tenant=tenant, acquired=0.0, expires=0.0, seq=seq)


def _top(root: str, tenant: str) -> tuple[int, LeaseRecord | None]:
    """(the highest claim number, 0 when none; its record, None when it vanished meanwhile)."""
    ns = claims(root, tenant)
    if not ns:
        return 0, None
    return ns[-1], _read_claim(root, tenant, ns[-1])


def read_lease(root: str, tenant: str) -> LeaseRecord | None:
    """The live claim, or None when the tenant's lease is free (no claim, or released)."""
    _, rec = _top(str(root).rstrip("/"), tenant)
    return None if rec is None or rec.released else rec


def _create_exclusive(uri: str, body: bytes) -> bool:
    """Create ``uri`` with ``body`` unless it exists; True when this call created it."""
    fs, path = layout.fs_and_path(uri)
    if layout.is_local(uri):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{os.path.dirname(path)}/.{uuid.uuid4().hex}.tmp"
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


def _remove_claims(root: str, tenant: str, seqs: list[int]) -> None:
    for n in seqs:
        fs, path = layout.fs_and_path(claim_path(root, tenant, n))
        try:
            fs.rm(path)
        except FileNotFoundError:
            pass


class TenantLease:
    """A held claim; renews itself in a daemon thread until :meth:`release`."""

    def __init__(self, root: str, tenant: str, record: LeaseRecord, ttl_s: float):
        self.root, self.tenant, self.record, self.ttl_s = root, tenant, record, ttl_s
        self.lost: str | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._renew_loop, name=f"quarry-lease-{tenant}", daemon=True)
        self._thread.start()

    def _renew_loop(self) -> None:
        while not self._stop.wait(self.ttl_s / 3):
            try:
                self.renew()
            except Exception as e:  # noqa: BLE001 - surfaced by ensure()
                self.lost = f"{type(e).__name__}: {e}"

    def _check(self) -> None:
        """Mark the lease lost when a higher claim exists (or this one vanished)."""
        top, rec = _top(self.root, self.tenant)
        if top != self.record.seq:
            who = f"{rec.job} ({rec.owner})" if rec is not None and top > self.record.seq else None
            self.lost = f"taken over by {who}" if who else "the lease claim disappeared"
            self._stop.set()

    def renew(self) -> None:
        """Push ``expires`` one TTL ahead, then check that nobody took the lease over."""
        with self._lock:
            if self.lost is not None:
                return
            if self.record.expires < time.time():  # stalled past the TTL: another writer may hold it now
                self._check()
                if self.lost is None:
                    self.lost = "it expired before it was renewed"
                    self._stop.set()
                return
            self.record = self.record.model_copy(update={"expires": time.time() + self.ttl_s})
            layout.write_atomic(claim_path(self.root, self.tenant, self.record.seq),
                                self.record.model_dump_json().encode())
            self._check()

    def ensure(self) -> None:
        """Raise :class:`LeaseLost` unless this writer still holds the lease (call before
        publishing): renews the claim and checks no higher claim exists."""
        if self.lost is None:
            self.renew()
        if self.lost is not None:
            raise LeaseLost(f"{self.tenant}: the {self.record.job} writer lease was lost ({self.lost}); "
                            f"nothing more was published, run it again")

    def release(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        with self._lock:
            if self.lost is None:
                self._check()
            if self.lost is None:
                self.record = self.record.model_copy(update={"released": True, "expires": time.time()})
                layout.write_atomic(claim_path(self.root, self.tenant, self.record.seq),
                                    self.record.model_dump_json().encode())
            self.lost = self.lost or "released"


def _single_file_lease(root: str, tenant: str, now: float) -> LeaseRecord | None:
    """A lease written before claims were numbered (``<tenant>/LEASE`` as one file, left by a
    writer that died): still live, it holds the tenant; expired or unreadable, it is removed so
    the claim folder can take its name."""
    path = lease_path(root, tenant)
    if not (layout.is_local(path) and os.path.isfile(path)):
        return None
    try:
        rec = LeaseRecord.model_validate_json(open(path, "rb").read())
    except ValueError:
        rec = None
    if rec is not None and rec.expires >= now:
        return rec
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    return None


def try_acquire(root: str, tenant: str, job: str, *, ttl_s: float = DEFAULT_TTL_S,
                owner: str | None = None) -> TenantLease | LeaseRecord | None:
    """One attempt: the held lease, or the live claim that holds it, or None when the attempt
    raced another taker (look again)."""
    root = str(root).rstrip("/")
    if (held := _single_file_lease(root, tenant, time.time())) is not None:
        return held
    top, cur = _top(root, tenant)
    if top and cur is None:
        return None  # the top claim vanished between list and read: a higher one exists now
    now = time.time()
    if cur is not None and not cur.free(now):
        return cur
    seq = top + 1
    rec = LeaseRecord(owner=owner or new_owner(), job=job, tenant=tenant, acquired=now, expires=now + ttl_s, seq=seq)
    if not _create_exclusive(claim_path(root, tenant, seq), rec.model_dump_json().encode()):
        return None  # another taker created claim seq first
    ns = claims(root, tenant)
    if ns and ns[-1] != seq:  # a delayed create of a number below the top: not a holder
        _remove_claims(root, tenant, [seq])
        return None
    _remove_claims(root, tenant, [n for n in ns if n < seq])
    return TenantLease(root, tenant, rec, ttl_s)


def acquire(root: str, tenant: str, job: str, *, wait_s: float = DEFAULT_WAIT_S, ttl_s: float = DEFAULT_TTL_S,
            owner: str | None = None, poll_s: float = 0.1) -> TenantLease:
    """Take the tenant's writer lease, waiting up to ``wait_s`` for another holder to release
    it or for its lease to expire; raise :class:`LeaseBusy` past that."""
    deadline = time.monotonic() + wait_s
    while True:
        got = try_acquire(root, tenant, job, ttl_s=ttl_s, owner=owner)
        if isinstance(got, TenantLease):
            return got
        if got is None:
            continue  # raced: look at the new top claim at once
        if time.monotonic() >= deadline:
            raise LeaseBusy(f"tenant {tenant} is being written by {got.job} (owner {got.owner}) until {got.until()}; "
                            f"waited {wait_s:g}s (raise --lease-wait-s, or retry when it finishes)")
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
