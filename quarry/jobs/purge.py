"""Purge: remove a document (or a whole tenant) from every copy under the index root.

A delete through ``apply-changes`` is a tombstone: the text stays in the base generation,
in older generations, in delta shards, in quarantine and reconcile files and in replicas'
memory. A purge leaves it in none of them:

``purge_document(root, tenant, doc_id, version=None)`` (under the tenant's writer lease)
  1. folds the live index without the document (``quarry.core.changes.compact``: stored
     passages and embeddings, nothing re-embedded; its parents and evidence rows go with its
     passages) and publishes that as a new generation;
  2. deletes every other generation folder, every delta folder and the ``DELTA`` watermark;
  3. scrubs the JSON-lines files elsewhere under the root (``_quarantine/``, ``_reconcile/``,
     ``_traces/``, streaming checkpoints): a line is dropped when its record belongs to the
     tenant and names the document (its id, or an id built from it). The run store
     (``_serve/``) holds ids only and is left to its actor;
  4. deletes this machine's local copies of the tenant's remote shards;
  5. bumps the tenant's purge epoch (``<root>/<tenant>/PURGED``): every Retriever and
     Reranker replica re-reads it every ``generation_check_ms`` and drops the tenant from
     its memory and its local copies when it moves (docs/operations.md states the bound).

``purge_tenant(root, tenant)`` deletes everything under ``<root>/<tenant>/`` but the new
purge record, drops every line of the tenant from the JSON-lines files elsewhere under the
root, its trace folder and its entries in the run reports (``_runs/``).

``version``: only that version of the document (the other versions stay).
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Iterable
from typing import Any

import numpy as np
from pydantic import BaseModel, Field

from quarry.core.agent.runs import RunState, names_document, tenant_of, without_document
from quarry.core.changes.compact import CompactionInput, compaction_input, publish_compacted, write_compacted
from quarry.core.errors import UsageError
from quarry.core.index import layout
from quarry.core.index.lease import DEFAULT_WAIT_S, tenant_lease
from quarry.core.index.retention import remove
from quarry.core.index.shards import TenantIndex

class PurgeReport(BaseModel):
    tenant: str
    doc_id: str | None = None
    version: str | None = None
    removed_passages: int = 0
    removed_parents: int = 0
    generation: int | None = None  # the generation published without the document
    deleted_generations: list[int] = Field(default_factory=list)
    deleted_deltas: list[int] = Field(default_factory=list)
    scrubbed_files: list[str] = Field(default_factory=list)  # side files a line was dropped from
    deleted_files: list[str] = Field(default_factory=list)
    dropped_local_copies: int = 0
    epoch: int = 0
    seconds: float = 0.0


# --------------------------------------------------------------------------- matching


def _record_tenant(obj: Any) -> str | None:
    if not isinstance(obj, dict):
        return None
    for k in ("tenant",):
        if isinstance(obj.get(k), str):
            return obj[k]
    for nested in ("s", "document", "record"):  # run-store entries, change records, raw records
        t = _record_tenant(obj.get(nested))
        if t is not None:
            return t
    return None


def _scrub_lines(body: bytes, drop) -> tuple[bytes, int]:
    """Drop every line that parses as a JSON object ``drop`` matches; keep every other line as is."""
    out, dropped = [], 0
    for line in body.splitlines(keepends=True):
        s = line.strip()
        if s[:1] == b"{":
            try:
                obj = json.loads(s)
            except ValueError:
                obj = None
            if obj is not None and drop(obj):
                dropped += 1
                continue
        out.append(line)
    return b"".join(out), dropped


def _find(uri: str) -> list[str]:
    """Every file below ``uri``, as URIs (local: paths)."""
    fs, path = layout.fs_and_path(uri)
    if not fs.exists(path):
        return []
    return [f if layout.is_local(uri) else fs.unstrip_protocol(f) for f in fs.find(path)]


# The run store's folder (``ServeSettings.run_state_dir``, default ``<root>/_serve/runs``): its
# lines are runs, not records, so it is rewritten by :func:`scrub_runs`, not :func:`scrub`.
_NOT_SCRUBBED = {"_serve"}


def _run_line(obj: Any, tenant: str, doc_id: str | None, version: str | None) -> Any:
    """A run-store line without the document's ids (None: drop the line, a run of a purged tenant)."""
    if not isinstance(obj, dict) or not isinstance(obj.get("s"), dict):
        return obj
    state = RunState.model_validate(obj["s"])
    if tenant_of(state.principal_key) != tenant:
        return obj
    if doc_id is None:
        return None
    return {**obj, "s": without_document(state, doc_id, version).model_dump(mode="json")}


def _is_run_file(f: str) -> bool:
    """The run store's files: ``runs.log``/``runs.snap`` (files or a snapshot object) and, on a
    URI root, the one-object-per-change log ``log/<seq>.json``
    (``quarry.serve.stores.run_checkpoint.ObjectCheckpoint``)."""
    parts = f.rstrip("/").rsplit("/", 2)
    name = parts[-1]
    if name in ("runs.log", "runs.snap"):
        return True
    return len(parts) == 3 and parts[1] == "log" and name.endswith(".json") and name[:-5].isdigit()


def scrub_runs(dirs: Iterable[str], tenant: str, doc_id: str | None = None, version: str | None = None) -> list[str]:
    """Rewrite the actor run store's files (``runs.log``, ``runs.snap``) in ``dirs`` without the
    document's ids in the tenant's runs (``doc_id`` None: without the tenant's runs). A live
    actor is purged through the admin API first (``RunStore.purge``, which rewrites these files
    itself); a file already clean is not written."""
    changed = []
    for d in dirs:
        for f in _find(d):
            if not _is_run_file(f):
                continue
            fs, path = layout.fs_and_path(f)
            with fs.open(path, "rb") as fh:
                lines = fh.read().splitlines(keepends=True)
            out, dirty = [], False
            for line in lines:
                try:
                    obj = json.loads(line)
                except ValueError:  # a torn last line: the store skips it too
                    out.append(line)
                    continue
                new = _run_line(obj, tenant, doc_id, version)
                if new != obj:
                    dirty = True
                    if new is not None:
                        out.append(json.dumps(new, separators=(",", ":")).encode() + b"\n")
                    continue
                out.append(line)
            if dirty:
                if out or not f.endswith(".json"):
                    layout.write_atomic(f, b"".join(out))
                else:  # a per-change log object of a purged run: gone, not an empty entry
                    fs.rm(path)
                changed.append(f)
    return changed


def _run_dirs(root: str, extra_dirs: Iterable[str]) -> list[str]:
    return [layout.join(root, "_serve"), *extra_dirs]


def _side_files(root: str, skip_tenants: Iterable[str]) -> list[str]:
    """Every file under the root outside the named tenants' own folders and the run store."""
    fs, path = layout.fs_and_path(root)
    tenants = set(skip_tenants) | _NOT_SCRUBBED
    out = []
    for entry in fs.ls(path, detail=False):
        name = entry.rstrip("/").rsplit("/", 1)[-1]
        if name not in tenants and fs.isdir(entry):
            out.extend(_find(layout.join(root, name)))
    return out


def scrub(root: str, drop, tenants_to_skip: Iterable[str], extra_dirs: Iterable[str] = ()) -> list[str]:
    """Rewrite each side file (under the root and ``extra_dirs``) without the JSON lines ``drop``
    matches; returns the files changed."""
    files = _side_files(root, tenants_to_skip) + [f for d in extra_dirs for f in _find(d)]
    changed = []
    for f in files:
        fs, path = layout.fs_and_path(f)
        try:
            with fs.open(path, "rb") as fh:
                body = fh.read()
        except (FileNotFoundError, IsADirectoryError):
            continue
        if b"{" not in body:
            continue
        new, n = _scrub_lines(body, drop)
        if n:
            layout.write_atomic(f, new)
            changed.append(f)
    return changed


# --------------------------------------------------------------------------- epoch


def bump_epoch(root: str, tenant: str, generation_floor: int, kind: str) -> int:
    """Write the tenant's next purge record (what replicas watch); returns its epoch."""
    prev = layout.read_purge_record(root, tenant) or {}
    epoch = int(prev.get("epoch", 0)) + 1
    floor = max(int(prev.get("generation_floor", 0)), generation_floor)
    layout.write_json(layout.purge_path(root, tenant),
                      {"epoch": epoch, "at": time.time(), "generation_floor": floor, "kind": kind})
    return epoch


def _drop_local_copies(root: str, tenant: str) -> int:
    if layout.is_local(root):
        return 0
    return len(layout.drop_fetched(tempfile.gettempdir(), layout.tenant_dir(root, tenant)))


# --------------------------------------------------------------------------- purges


def _without(ci: CompactionInput, doc_id: str, version: str | None) -> tuple[CompactionInput, int, int]:
    def gone(env_doc: str, env_version: str) -> bool:
        return env_doc == doc_id and (version is None or env_version == version)

    keep = [i for i, p in enumerate(ci.passages) if not gone(p.doc_id, p.envelope.version)]
    parents = [s for s in ci.parents if not gone(s.envelope.doc_id, s.envelope.version)]
    emb = ci.embeddings[keep] if len(keep) else np.zeros((0, ci.embeddings.shape[1]), np.float32)
    return (CompactionInput(ci.index, [ci.passages[i] for i in keep], parents, emb),
            len(ci.passages) - len(keep), len(ci.parents) - len(parents))


def purge_document(root: str, tenant: str, doc_id: str, version: str | None = None, *,
                   lease_wait_s: float = DEFAULT_WAIT_S, extra_dirs: Iterable[str] = ()) -> PurgeReport:
    """Remove ``doc_id`` (or one ``version`` of it) from every copy under ``root`` (module doc).
    ``extra_dirs``: trace or run-store folders configured outside the root, scrubbed too."""
    t0 = time.monotonic()
    root = str(root).rstrip("/")
    if layout.current_generation(root, tenant) is None:
        raise UsageError(f"no published index for tenant {tenant!r} under {root} (check --tenant and --index-root)")
    report = PurgeReport(tenant=tenant, doc_id=doc_id, version=version)
    with tenant_lease(root, tenant, "purge", wait_s=lease_wait_s) as held:
        index = TenantIndex.load(root, tenant)
        ci, report.removed_passages, report.removed_parents = _without(compaction_input(index), doc_id, version)
        if not ci.passages:
            raise UsageError(f"{tenant}: purging {doc_id!r} would leave the tenant without documents; "
                             f"purge the tenant with --all instead")
        gen = write_compacted(ci)
        held.ensure()
        publish_compacted(index, gen)
        report.generation = gen
        _delete_all_but(root, tenant, gen, report)
        del index, ci
        report.scrubbed_files = scrub(
            root, lambda o: _record_tenant(o) == tenant and names_document(o, doc_id, version),
            [t for t in layout.list_tenants(root)], extra_dirs)
        report.scrubbed_files += scrub_runs(_run_dirs(root, extra_dirs), tenant, doc_id, version)
        report.dropped_local_copies = _drop_local_copies(root, tenant)
        report.epoch = bump_epoch(root, tenant, gen, "document")
    report.seconds = round(time.monotonic() - t0, 3)
    return report


def _delete_all_but(root: str, tenant: str, generation: int, report: PurgeReport) -> None:
    """Every generation but ``generation``, every delta and the watermark."""
    for g in layout.generations(root, tenant):
        if g != generation:
            remove(layout.generation_dir(root, tenant, g))
            report.deleted_generations.append(g)
    report.deleted_deltas = layout.delta_seqs(root, tenant)
    fs, wm = layout.fs_and_path(layout.watermark_path(root, tenant))
    if fs.exists(wm):
        fs.rm(wm)
    remove(layout.changes_dir(root, tenant))
    remove(layout.join(layout.tenant_dir(root, tenant), "retired"))  # records of the deleted generations


def purge_tenant(root: str, tenant: str, *, lease_wait_s: float = DEFAULT_WAIT_S,
                 extra_dirs: Iterable[str] = ()) -> PurgeReport:
    """Remove everything of ``tenant`` under ``root`` (and ``extra_dirs``); only the purge
    record stays in ``<root>/<tenant>/`` (an epoch, a time, a generation floor)."""
    t0 = time.monotonic()
    root = str(root).rstrip("/")
    fs, tpath = layout.fs_and_path(layout.tenant_dir(root, tenant))
    if not fs.exists(tpath):
        raise UsageError(f"no data for tenant {tenant!r} under {root} (check --tenant and --index-root)")
    report = PurgeReport(tenant=tenant)
    with tenant_lease(root, tenant, "purge", wait_s=lease_wait_s):
        gens = layout.generations(root, tenant)
        report.deleted_generations = gens
        report.deleted_deltas = layout.delta_seqs(root, tenant)
        keep = {"PURGED", "LEASE"}
        current = layout.join(layout.tenant_dir(root, tenant), "CURRENT")
        cfs, cpath = layout.fs_and_path(current)
        if cfs.exists(cpath):  # unpublish first: no new load of the tenant starts
            cfs.rm(cpath)
        for entry in fs.ls(tpath, detail=False):
            if entry.rstrip("/").rsplit("/", 1)[-1] not in keep:
                fs.rm(entry, recursive=True)
        other = [t for t in layout.list_tenants(root) if t != tenant]
        report.scrubbed_files = scrub(root, lambda o: _record_tenant(o) == tenant, [*other, tenant], extra_dirs)
        report.scrubbed_files += scrub_runs(_run_dirs(root, extra_dirs), tenant)
        report.deleted_files = _drop_tenant_side_folders(root, tenant, extra_dirs)
        report.dropped_local_copies = _drop_local_copies(root, tenant)
        report.epoch = bump_epoch(root, tenant, max(gens, default=0), "tenant")
    report.seconds = round(time.monotonic() - t0, 3)
    return report


def _drop_tenant_side_folders(root: str, tenant: str, extra_dirs: Iterable[str]) -> list[str]:
    """The tenant's trace folder (``<trace dir>/<tenant>/``) and its entries in run reports."""
    deleted = []
    for d in [layout.join(root, "_traces"), *extra_dirs]:
        uri = layout.join(str(d), tenant)
        fs, path = layout.fs_and_path(uri)
        if fs.exists(path):
            fs.rm(path, recursive=True)
            deleted.append(uri)
    for uri in _find(layout.join(root, "_runs")):
        try:
            rep = layout.read_json(uri)
        except (ValueError, FileNotFoundError):
            continue
        if isinstance(rep, dict) and isinstance(rep.get("tenants"), dict) and tenant in rep["tenants"]:
            rep["tenants"].pop(tenant)
            layout.write_json(uri, rep)
            deleted.append(f"{uri}#tenants.{tenant}")
    return deleted


# --------------------------------------------------------------------------- CLI helpers


def report_line(rep: PurgeReport) -> str:
    d = rep.model_dump(exclude={"scrubbed_files", "deleted_files"})
    d["scrubbed_files"] = len(rep.scrubbed_files)
    d["deleted_files"] = len(rep.deleted_files)
    return " ".join(f"{k}={v}" for k, v in d.items() if v is not None)


def as_json(rep: PurgeReport) -> str:
    return json.dumps(rep.model_dump(mode="json"), sort_keys=True)
