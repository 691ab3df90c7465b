"""How ``quarry build`` scales with the tenant count (a benchmark, not a test).

For each size ``TENANTSxDOCS`` (optionally ``+LARGE``: one more tenant of LARGE documents)
it writes a synthetic corpus (``quarry.eval.synth_tenants``), runs ``quarry build`` on it as
a subprocess (``--embedder hashing --contextualizer none``: the cheapest enrichment, so the
figures are the job's own overhead, not a model's) with default settings otherwise, and
samples the resident memory of the driver's processes every 0.25 s: the Python driver and
its JVM (in local mode the JVM also runs the executor threads; the Python workers are not
counted). ``--code-root`` runs another checkout's code (the before/after comparison).

    python -m quarry.eval.bench_build_scaling --sizes 1000x10,10000x10 \\
        --out eval/results/build_scaling.md --json eval/results/build_scaling.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from quarry.eval.synth_tenants import SynthSpec, write_corpus

REPO = Path(__file__).resolve().parents[2]


@dataclass
class Run:
    size: str
    tenants: int
    documents: int
    code: str
    exit_code: int = 0
    wall_s: float = 0.0
    build_s: float | None = None  # the report's own seconds (Spark session start excluded)
    s_per_1k_docs: float | None = None
    driver_python_rss_peak_mb: float = 0.0
    driver_jvm_rss_peak_mb: float = 0.0
    jvm_heap_peak_mb: float | None = None
    passages: int | None = None
    stage_seconds: dict[str, float] = field(default_factory=dict)
    error: str | None = None


def parse_size(s: str) -> SynthSpec:
    """``1000x10`` or ``1000x10+500000``."""
    base, _, large = s.partition("+")
    n, _, m = base.partition("x")
    try:
        return SynthSpec(int(n), int(m or 10), int(large or 0))
    except ValueError:
        raise SystemExit(f"--sizes: {s!r} is not TENANTSxDOCS[+LARGE]") from None


class RssSampler(threading.Thread):
    """Peak RSS of a process and of its java descendants, sampled until stopped."""

    def __init__(self, pid: int, every_s: float = 0.25):
        super().__init__(daemon=True)
        self.pid, self.every_s = pid, every_s
        self.python_mb = self.jvm_mb = 0.0
        self._halt = threading.Event()

    def run(self) -> None:
        import psutil

        try:
            root = psutil.Process(self.pid)
        except psutil.NoSuchProcess:
            return
        while not self._halt.is_set():
            try:
                self.python_mb = max(self.python_mb, root.memory_info().rss / 2**20)
                jvm = sum(c.memory_info().rss for c in root.children(recursive=True) if c.name() == "java")
                self.jvm_mb = max(self.jvm_mb, jvm / 2**20)
            except psutil.Error:
                pass
            self._halt.wait(self.every_s)

    def stop(self) -> None:
        self._halt.set()
        self.join()


def _last_stage_line(log: Path) -> str:
    """The build's last progress line (``[quarry build ...] <stage> ...``): where a stopped run got to."""
    lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.startswith("[quarry build")]
    return " ".join(lines[-1].split("] ", 1)[-1].split()) if lines else "before the first stage"


def run_one(spec: SynthSpec, size: str, work: Path, code_root: Path, extra: list[str],
            stop_at: float | None = None) -> Run:
    """One build; ``stop_at`` (a ``time.time()``): stop it then (its process group) and record
    how far it got instead of a result."""
    src = work / f"src-{size}"
    if not (src / "part-00000.jsonl").exists():
        write_corpus(spec, src)
    idx = Path(tempfile.mkdtemp(prefix=f"idx-{size}-", dir=work))
    report = idx / "report.json"
    cmd = [sys.executable, "-m", "quarry", "build", "--source", str(src), "--index-root", str(idx),
           "--embedder", "hashing", "--contextualizer", "none", "--report", str(report), *extra]
    env = {**os.environ, "PYTHONPATH": str(code_root)}
    r = Run(size=size, tenants=spec.tenants + bool(spec.large_tenant_docs), documents=spec.documents,
            code=str(code_root))
    log = idx.with_suffix(".log")
    print(f"bench: {size}: {' '.join(cmd)} (log {log})", file=sys.stderr, flush=True)
    t0 = time.monotonic()
    with log.open("w") as fh:
        p = subprocess.Popen(cmd, env=env, stdout=fh, stderr=subprocess.STDOUT, cwd=str(code_root),
                             start_new_session=True)  # its own process group: a stop ends the JVM too
        sampler = RssSampler(p.pid)
        sampler.start()
        try:
            r.exit_code = p.wait(timeout=None if stop_at is None else max(1.0, stop_at - time.time()))
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGTERM)
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
            r.exit_code = -1
            r.error = f"stopped after {time.monotonic() - t0:.0f} s; last progress: {_last_stage_line(log)}"
        sampler.stop()
    r.wall_s = round(time.monotonic() - t0, 1)
    r.driver_python_rss_peak_mb = round(sampler.python_mb, 1)
    r.driver_jvm_rss_peak_mb = round(sampler.jvm_mb, 1)
    if r.exit_code == 0 and report.exists():
        rep = json.loads(report.read_text())
        r.build_s = round(rep["seconds"], 1)
        r.s_per_1k_docs = round(rep["seconds"] / (rep["documents"] / 1000), 2) if rep["documents"] else None
        r.jvm_heap_peak_mb = rep.get("jvm_driver_heap_peak_mb")
        r.passages = rep["passages"]
        r.stage_seconds = {s["name"]: round(s["seconds"], 1) for s in rep["stages"]}
    elif r.error is None:
        lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
        hits = [ln for ln in lines if "Error" in ln or "error:" in ln]
        r.error = (hits[0] if hits else (lines[-1] if lines else "no output"))[:300]
    print(f"bench: {size}: {json.dumps(asdict(r))}", file=sys.stderr, flush=True)
    return r


def to_markdown(runs: list[Run], argv: list[str]) -> str:
    lines = [
        "# Build scaling with the tenant count",
        "",
        f"Measured {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC by `python -m quarry.eval.bench_build_scaling "
        + " ".join(argv) + "`.",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} CPU cores visible (shared with other jobs), Spark `local[*]`. "
        "Each build is `quarry build --embedder hashing --contextualizer none` on a synthetic corpus "
        "(`quarry.eval.synth_tenants`: N tenants x M documents), default settings otherwise, in its own process. "
        "Seconds are the build report's (Spark session start excluded); RSS peaks are sampled every 0.25 s.",
        "",
        "| code | size | tenants | docs | exit | seconds | s / 1k docs | driver Python RSS peak (MB) | driver JVM RSS peak (MB) "
        "| JVM heap peak (MB) | failure |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in runs:
        lines.append(
            f"| {Path(r.code).name} | {r.size} | {r.tenants} | {r.documents} | {r.exit_code} | {r.build_s or '-'} | "
            f"{r.s_per_1k_docs or '-'} | {r.driver_python_rss_peak_mb:.0f} | {r.driver_jvm_rss_peak_mb:.0f} | "
            f"{r.jvm_heap_peak_mb if r.jvm_heap_peak_mb is not None else '-'} | {(r.error or '').replace('|', '/')} |")
    stages = sorted({s for r in runs for s in r.stage_seconds}, key=lambda s: min(
        list(r.stage_seconds).index(s) for r in runs if s in r.stage_seconds))
    if stages:
        lines += ["", "Seconds per stage:", "", "| code | size | " + " | ".join(stages) + " |",
                  "| --- | --- | " + " | ".join("---:" for _ in stages) + " |"]
        for r in runs:
            if r.stage_seconds:
                lines.append(f"| {Path(r.code).name} | {r.size} | "
                             + " | ".join(str(r.stage_seconds.get(s, "-")) for s in stages) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(prog="python -m quarry.eval.bench_build_scaling", description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="1000x10,10000x10", help="comma-separated TENANTSxDOCS[+LARGE]")
    ap.add_argument("--code-root", default=str(REPO), help="checkout whose quarry package runs the builds")
    ap.add_argument("--work-dir", default=None, help="corpora and indexes (default: a temp dir)")
    ap.add_argument("--build-arg", action="append", default=[], help="extra `quarry build` argument (repeatable)")
    ap.add_argument("--out", default=None, help="Markdown table")
    ap.add_argument("--stop-at", default=None, help="UTC time HH:MM: stop the running build then and record how far it got")
    ap.add_argument("--json", dest="json_out", default=None, help="raw figures as JSON (appended to when it exists)")
    a = ap.parse_args(argv)
    work = Path(a.work_dir or tempfile.mkdtemp(prefix="quarry-bench-scaling-"))
    work.mkdir(parents=True, exist_ok=True)
    p = Path(a.json_out) if a.json_out else None
    old = [Run(**r) for r in json.loads(p.read_text())["runs"]] if p is not None and p.exists() else []
    stop_at = _utc_today_at(a.stop_at) if a.stop_at else None
    runs: list[Run] = []
    for s in (s for s in a.sizes.split(",") if s):
        if stop_at is not None and time.time() >= stop_at:
            break
        runs.append(run_one(parse_size(s), s, work, Path(a.code_root).resolve(), a.build_arg, stop_at))
        _write(old + runs, argv, p, Path(a.out) if a.out else None)  # after each run: a long series can be cut short
    print(to_markdown(old + runs, argv))
    return 0 if all(r.exit_code == 0 for r in runs) else 1


def _utc_today_at(hhmm: str) -> float:
    try:
        h, m = (int(x) for x in hhmm.split(":"))
        when = dt.datetime.now(dt.timezone.utc).replace(hour=h, minute=m, second=0, microsecond=0)
    except ValueError:
        raise SystemExit(f"--stop-at: {hhmm!r} is not HH:MM") from None
    return when.timestamp()


def _write(runs: list[Run], argv: list[str], json_out: Path | None, md_out: Path | None) -> None:
    for path, text in ((json_out, lambda: json.dumps({"runs": [asdict(r) for r in runs]}, indent=2) + "\n"),
                       (md_out, lambda: to_markdown(runs, argv))):
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text())


if __name__ == "__main__":
    sys.exit(main())
