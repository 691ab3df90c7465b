"""Distributions for a workload profile from search traces (``quarry plan --from-traces``).

The trace store is append-only and stores ids, counts and timings, never text (DESIGN §6).
Its on-disk format is being settled elsewhere, so everything that knows about it is here:
``read_trace_records`` reads JSON-lines (``*.jsonl``, ``*.json``) or Parquet files, one
trace per line/row, from a file or a folder (recursively). What is used, per trace:

- ``kind``: only ``"search"`` traces count;
- ``run_id``: searches per run give calls per task;
- ``candidates``: a list (its length) or a count — fused candidates for the second stage;
- ``delivered_tokens`` (or an integer ``delivered``): tokens delivered after expansion;
- ``stages``: ``[{name, kept, ...}]``; ``rerank.kept`` gives survivors (else ``len(delivered)``
  when ``delivered`` is a list of ids);
- ``timings`` / ``timings_ms`` (stage -> ms), or ``server_timing`` (a Server-Timing header
  value, ``name;dur=ms, ...``): ``total`` is the Gateway's time, ``retrieve`` the Retriever
  call, ``rerank`` the second stage.

Fields that are absent are skipped; a profile field is replaced only where samples exist.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from quarry.core.errors import UsageError
from quarry.core.capacity.arithmetic import Dist
from quarry.core.capacity.workload import WorkloadProfile

_SUFFIXES = (".jsonl", ".json", ".parquet")


def read_trace_records(path: str | Path) -> Iterator[dict[str, Any]]:
    """Trace records from a JSON-lines/Parquet file or every such file under a folder."""
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"{p}: no trace file or folder there")
    files = sorted(f for f in p.rglob("*") if f.suffix in _SUFFIXES) if p.is_dir() else [p]
    if not files:
        raise UsageError(f"{p}: no *.jsonl, *.json or *.parquet trace files found")
    for f in files:
        if f.suffix == ".parquet":
            import pyarrow.parquet as pq

            yield from pq.read_table(f).to_pylist()
            continue
        with f.open() as fh:
            for n, line in enumerate(fh, 1):
                if line.strip():
                    try:
                        yield json.loads(line)
                    except json.JSONDecodeError as e:
                        raise UsageError(f"{f}:{n}: not a JSON trace record ({e.msg})") from e


class TraceSamples(BaseModel):
    model_config = ConfigDict(frozen=True)

    searches: int
    runs: int
    candidates: tuple[float, ...] = ()
    delivered_tokens: tuple[float, ...] = ()
    survivors: tuple[float, ...] = ()
    total_ms: tuple[float, ...] = ()
    retrieve_ms: tuple[float, ...] = ()
    rerank_ms: tuple[float, ...] = ()
    calls_per_task: float | None = None


def parse_server_timing(value: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for part in value.split(","):
        name, _, rest = part.strip().partition(";")
        for param in rest.split(";"):
            k, _, v = param.strip().partition("=")
            if name and k == "dur":
                out[name] = float(v)
    return out


def _count(v: Any) -> float | None:
    if isinstance(v, (list, tuple)):
        return float(len(v))
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v)
    return None


def collect_samples(records: Iterable[dict[str, Any]]) -> TraceSamples:
    cols: dict[str, list[float]] = {k: [] for k in
                                    ("candidates", "delivered_tokens", "survivors", "total_ms", "retrieve_ms", "rerank_ms")}
    per_run: Counter[str] = Counter()
    searches = 0
    for r in records:
        if r.get("kind") != "search":
            continue
        searches += 1
        if r.get("run_id"):
            per_run[str(r["run_id"])] += 1
        if (c := _count(r.get("candidates"))) is not None:
            cols["candidates"].append(c)
        tok = r.get("delivered_tokens")
        if tok is None and not isinstance(r.get("delivered"), (list, tuple)):
            tok = r.get("delivered")
        if (t := _count(tok)) is not None:
            cols["delivered_tokens"].append(t)
        kept = next((s.get("kept") for s in r.get("stages") or [] if isinstance(s, dict) and s.get("name") == "rerank"), None)
        if kept is None and isinstance(r.get("delivered"), (list, tuple)):
            kept = len(r["delivered"])
        if (k := _count(kept)) is not None:
            cols["survivors"].append(k)
        timings = dict(r.get("timings") or r.get("timings_ms") or {})
        if not timings and r.get("server_timing"):
            timings = parse_server_timing(str(r["server_timing"]))
        for key, col in (("total", "total_ms"), ("retrieve", "retrieve_ms"), ("rerank", "rerank_ms")):
            if isinstance(timings.get(key), (int, float)):
                cols[col].append(float(timings[key]))
    cpt = sum(per_run.values()) / len(per_run) if per_run else None
    return TraceSamples(searches=searches, runs=len(per_run), calls_per_task=cpt,
                        **{k: tuple(v) for k, v in cols.items()})


def apply_samples(profile: WorkloadProfile, s: TraceSamples, source: str) -> WorkloadProfile:
    """The profile with every distribution the traces measured replaced, and provenance
    saying so. ``calls_per_task`` is only taken when it is at least 1 (complete runs)."""
    if s.searches == 0:
        raise UsageError(f"{source}: no search traces (kind == 'search') to measure")
    note = f"measured: {s.searches} search traces in {source}"
    prov = dict(profile.provenance)
    funnel_up: dict[str, Dist] = {}
    for field in ("candidates", "delivered_tokens", "survivors"):
        if getattr(s, field):
            funnel_up[field] = Dist.from_samples(getattr(s, field))
            prov[f"funnel.{field}"] = note
    latency_up: dict[str, Dist] = {}
    if s.retrieve_ms:
        latency_up["retrieve_ms"] = Dist.from_samples(s.retrieve_ms)
        prov["latency.retrieve_ms"] = note
    if s.rerank_ms:
        latency_up["rerank_ms"] = Dist.from_samples(s.rerank_ms)
        prov["latency.rerank_ms"] = note
    deps = dict(profile.deployments)
    for name, col in (("Gateway", s.total_ms), ("Retriever", s.retrieve_ms), ("Reranker", s.rerank_ms)):
        if col and name in deps:
            deps[name] = deps[name].model_copy(update={"service_ms": Dist.from_samples(col)})
            prov[f"deployments.{name}.service_ms"] = note
    update: dict[str, Any] = {
        "funnel": profile.funnel.model_copy(update=funnel_up),
        "latency": profile.latency.model_copy(update=latency_up),
        "deployments": deps, "provenance": prov,
    }
    if s.calls_per_task is not None and s.calls_per_task >= 1:
        update["calls_per_task"] = s.calls_per_task
        prov["calls_per_task"] = f"measured: {s.searches} searches over {s.runs} runs in {source}"
    # Re-validate: a measured distribution must satisfy the same rules as a written one.
    return WorkloadProfile.model_validate({**profile.model_dump(), **{k: _dump(v) for k, v in update.items()}})


def _dump(v: Any) -> Any:
    if isinstance(v, BaseModel):
        return v.model_dump()
    if isinstance(v, dict):
        return {k: _dump(x) for k, x in v.items()}
    return v
