"""Crash safety: SIGKILL the Spark application (the driver Python process and its JVM, one
process group) at three different stages. After each kill the previous generation still
loads and answers; a re-run then publishes; a second re-run changes no passage id.

The build runs as a subprocess (``python -m quarry.jobs.build``) in its own session so
``killpg`` takes the driver and the JVM together; ``pause_at_stage.py`` runs it with the
driver stopped at a stage boundary (after writing a marker file) so the kill lands
deterministically.
The initial build and the re-runs use the shared in-process ``spark`` fixture.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers.build_job import passage_ids, paused_at, principal_for, search

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(900)]

TENANT = "globex"


def _children_map() -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = Path(f"/proc/{d}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        out.setdefault(ppid, []).append(int(d))
    return out


def _descendants(pid: int) -> set[int]:
    kids, todo, seen = _children_map(), [pid], set()
    while todo:
        p = todo.pop()
        for c in kids.get(p, []):
            if c not in seen:
                seen.add(c)
                todo.append(c)
    return seen


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _start(stage: str, root: Path, tmp: Path) -> tuple[subprocess.Popen, Path, Path]:
    from quarry.core.ingest.sources import SAMPLE_CORPUS

    marker = tmp / f"paused-{stage}"
    log = tmp / f"build-{stage}.log"
    cmd = [*paused_at(stage, marker), "quarry", "build", "--source", str(SAMPLE_CORPUS), "--index-root", str(root),
           "--tenants", TENANT, "--embedder", "hashing", "--master", "local[1]", "--partitions", "1"]
    with open(log, "wb") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
    return proc, marker, log


def _kill_when_paused(stage: str, proc: subprocess.Popen, marker: Path, log: Path) -> str:
    try:
        deadline = time.monotonic() + 400
        while not marker.exists():
            assert proc.poll() is None, f"build exited ({proc.returncode}) before {stage}:\n{log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"never reached {stage}:\n{log.read_text()[-3000:]}"
            time.sleep(0.2)
        family = _descendants(proc.pid)
        java = [p for p in family if "java" in Path(f"/proc/{p}/cmdline").read_bytes().decode(errors="replace")]
        assert java, "expected the driver JVM among the build's child processes"
        os.killpg(proc.pid, signal.SIGKILL)  # the whole Spark application: driver + JVM
        proc.wait(timeout=30)
        deadline = time.monotonic() + 30
        while any(_alive(p) for p in family) and time.monotonic() < deadline:
            time.sleep(0.2)
        lingering = [p for p in family if _alive(p)]
        assert not lingering, f"processes outlived the kill: {lingering}"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return log.read_text()


def test_kill_at_three_stages_then_rerun(spark, tmp_path, sample_docs):
    from quarry.core.index import layout
    from quarry.core.embed.embedders import HashingEmbedder
    from quarry.core.index.shards import TenantIndex
    from quarry.core.ingest.sources import SAMPLE_CORPUS
    from quarry.jobs.build import run_build
    from quarry.jobs.build_settings import BuildSettings

    root = tmp_path / "idx"
    settings = BuildSettings(source=str(SAMPLE_CORPUS), index_root=str(root), tenants=(TENANT,),
                             embedder="hashing", partitions=1)
    first = run_build(settings, spark=spark)
    assert first.tenants[TENANT].generation == 1
    ids = passage_ids(str(root), TENANT)
    p, emb = principal_for(sample_docs, TENANT), HashingEmbedder(256)
    baseline = [e.passage_id for e in search(TenantIndex.load(str(root), TENANT), p, "incident", emb).excerpts]
    assert baseline

    # Three builds run at once (each on its own copy of the published root, so their
    # generation numbers cannot collide), each killed at a different stage.
    cases = {"embed": (False, False), "manifest": (True, False), "publish": (True, True)}
    roots = {}
    for stage in cases:
        roots[stage] = tmp_path / f"idx-{stage}"
        shutil.copytree(root, roots[stage])
    procs = {stage: _start(stage, roots[stage], tmp_path) for stage in cases}
    try:
        for stage, (expect_gen_dir, expect_manifest) in cases.items():
            r = str(roots[stage])
            out = _kill_when_paused(stage, *procs[stage])
            assert f"paused at stage '{stage}'" in out
            # the previous generation still serves
            assert layout.current_generation(r, TENANT) == 1
            res = search(TenantIndex.load(r, TENANT), p, "incident", emb)
            assert res.generation == 1 and [e.passage_id for e in res.excerpts] == baseline
            new = [g for g in layout.generations(r, TENANT) if g != 1]
            assert bool(new) == expect_gen_dir, (stage, new)
            if new:
                gdir = Path(layout.generation_dir(r, TENANT, new[0]))
                assert (gdir / "shard-0").is_dir()
                assert (gdir / "manifest.json").exists() == expect_manifest  # complete or not: never published
    finally:
        for proc, _, _ in procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()

    # on the root with the most crash debris, a re-run completes and publishes a fresh
    # generation past every crashed one
    root = roots["publish"]
    settings = settings.model_copy(update={"index_root": str(root)})
    gens = layout.generations(str(root), TENANT)
    assert gens == [1, 2]
    again = run_build(settings, spark=spark)
    g = again.tenants[TENANT].generation
    assert g == 3 and layout.current_generation(str(root), TENANT) == g
    assert passage_ids(str(root), TENANT) == ids
    res = search(TenantIndex.load(str(root), TENANT), p, "incident", emb)
    assert res.generation == g and [e.passage_id for e in res.excerpts] == baseline
    # a second re-run on the same input changes no passage id
    third = run_build(settings, spark=spark)
    assert third.tenants[TENANT].generation == g + 1
    assert passage_ids(str(root), TENANT) == ids
