"""Load validation of the capacity plan: bounded open-loop loopback load at two arrival rates
against the local Serve application deployed with the planned autoscaling, sampling replica
counts (Serve's status API) and in-flight concurrency over time, compared with the plan's
Little's-law figures.

    python -m quarry.eval.load_autoscale [--profile infra/profiles/quarry-local.yaml]
        [--rates 2,8] [--phase-s 60] [--cool-s 60] [--out eval/results/load_autoscale.md]

Phases: idle warm-up, rate 1, rate 2, then idle cool-down so scale-down shows. Arrivals are
Poisson (exponential gaps) and every request is bounded by the phase length × rate and a
per-request timeout; everything stays on 127.0.0.1. It is a benchmark (run it once), not a
test: on a shared 2-core machine the numbers are noisy and the ceiling is low.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

QUERIES = {
    "acme": ["EUR settlement cutoff", "refund window for card payments", "webhook signature errors",
             "incident severity policy", "payout schedule", "ledger-service rollout", "Does the Pro plan include SSO?"],
    "globex": ["EUR settlement cutoff", "refund window", "payout schedule", "incident policy"],
    "initech": ["settlement cutoff", "webhook signature error", "refund policy", "payout timing"],
}
GROUPS = ("all-staff", "support", "engineering")


@dataclass
class Recorder:
    t0: float
    in_flight: int = 0
    samples: list[dict[str, Any]] = field(default_factory=list)   # one per second
    requests: list[dict[str, Any]] = field(default_factory=list)  # one per search
    traces: list[dict[str, Any]] = field(default_factory=list)    # trace-shaped records for --from-traces


async def _search(http, rec: Recorder, phase: str, token: str, run_id: str, query: str, timeout_s: float) -> None:
    rec.in_flight += 1
    start = time.perf_counter()
    status, timing, body = 0, "", {}
    try:
        r = await http.post("/v1/search", json={"query": query},
                            headers={"Authorization": f"Bearer {token}", "X-Quarry-Run": run_id}, timeout=timeout_s)
        status, timing = r.status_code, r.headers.get("server-timing", "")
        body = r.json() if status == 200 else {}
    except Exception as e:  # noqa: BLE001 - a failed request is a counted error, not a crash
        status = f"error:{type(e).__name__}"
    finally:
        rec.in_flight -= 1
    ms = (time.perf_counter() - start) * 1000
    rec.requests.append({"phase": phase, "t": start - rec.t0, "ms": ms, "status": status})
    if status == 200:
        kept = next((s["kept"] for s in body.get("stages", []) if s["name"] == "fuse"), None)
        rec.traces.append({"kind": "search", "run_id": run_id, "candidates": kept,
                           "delivered_tokens": body.get("delivered_tokens"),
                           "delivered": [e["passage_id"] for e in body.get("excerpts", [])],
                           "server_timing": timing})


async def _new_run(http, token: str) -> str:
    r = await http.post("/v1/runs", headers={"Authorization": f"Bearer {token}"})
    r.raise_for_status()
    return r.json()["run_id"]


async def _make_runs(http, tokens: dict[str, str], n: int, rng: random.Random) -> list[tuple[str, str, str]]:
    """``n`` (tenant, query, run id) triples, created before any timed phase so run creation
    is neither in the timed searches nor in the sampled in-flight counts."""
    sem = asyncio.Semaphore(8)
    tenants = sorted(tokens)
    picks = []
    for _ in range(n):
        t = rng.choice(tenants)
        picks.append((t, rng.choice(QUERIES[t])))

    async def one(t: str) -> str:
        async with sem:
            return await _new_run(http, tokens[t])

    runs = await asyncio.gather(*(one(t) for t, _ in picks))
    return [(t, q, r) for (t, q), r in zip(picks, runs)]


async def _phase(http, rec: Recorder, name: str, rate: float, seconds: float, tokens: dict[str, str],
                 work: list[tuple[str, str, str]], rng: random.Random, timeout_s: float) -> None:
    """Open-loop Poisson arrivals at ``rate``/s for ``seconds``; each is one search in a
    fresh run taken from ``work`` (bounded: never more requests than ``work`` holds)."""
    tasks, end = [], time.perf_counter() + seconds
    nxt = time.perf_counter()
    for tenant, query, run_id in work:
        nxt += rng.expovariate(rate)
        if nxt >= end:
            break
        await asyncio.sleep(max(0.0, nxt - time.perf_counter()))
        tasks.append(asyncio.create_task(_search(http, rec, name, tokens[tenant], run_id, query, timeout_s)))
    await asyncio.sleep(max(0.0, end - time.perf_counter()))
    await asyncio.gather(*tasks)


async def _sampler(rec: Recorder, phase_of: dict[str, str], stop: asyncio.Event, app: str) -> None:
    from ray import serve

    try:
        from ray.serve.context import _get_global_client
    except ImportError:  # details are best-effort; replica counts come from serve.status()
        _get_global_client = None
    while not stop.is_set():
        t = time.perf_counter() - rec.t0
        st = await asyncio.to_thread(serve.status)
        row: dict[str, Any] = {"t": round(t, 2), "phase": phase_of["now"], "in_flight": rec.in_flight}
        for name, d in st.applications[app].deployments.items():
            row[f"{name}.running"] = sum(v for k, v in d.replica_states.items() if str(k).endswith("RUNNING"))
        if _get_global_client is not None:
            try:
                det = await asyncio.to_thread(lambda: _get_global_client().get_serve_details())
                for name, d in det["applications"][app]["deployments"].items():
                    row[f"{name}.target"] = d.get("target_num_replicas")
            except Exception:  # noqa: BLE001 - private API: sampling goes on without it
                _get_global_client = None
        rec.samples.append(row)
        try:
            await asyncio.wait_for(stop.wait(), timeout=1.0)
        except asyncio.TimeoutError:
            pass


def _q(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    import numpy as np

    return float(np.percentile(xs, q))


def summarise(rec: Recorder, phases: list[tuple[str, float, float]], plan, profile) -> list[dict[str, Any]]:
    """Per phase: offered and achieved rate, latency, observed mean in-flight (sampled, and
    λ × W from the requests: Little's law on the measurements), the plan's figure at that
    rate, and the replica counts seen."""
    from quarry.core.capacity import arithmetic as cap

    gw = profile.deployments["Gateway"].service_ms
    out = []
    for name, rate, secs in phases:
        reqs = [r for r in rec.requests if r["phase"] == name]
        ok = [r["ms"] for r in reqs if r["status"] == 200]
        samples = [s for s in rec.samples if s["phase"] == name]
        row: dict[str, Any] = {
            "phase": name, "offered_per_s": rate, "seconds": secs, "requests": len(reqs),
            "errors": len(reqs) - len(ok),
            "error_kinds": ", ".join(f"{k}: {v}" for k, v in sorted(Counter(str(r["status"]) for r in reqs
                                                                             if r["status"] != 200).items())) or "-", "achieved_per_s": round(len(reqs) / secs, 2) if secs else 0,
            "p50_ms": round(_q(ok, 50), 1), "p95_ms": round(_q(ok, 95), 1),
            # completions per second of the phase: below the offered rate means saturation
            "ok_per_s": round(len(ok) / secs, 2) if secs else 0,
            "in_flight_sampled_mean": round(statistics.fmean(s["in_flight"] for s in samples), 2) if samples else 0,
            "in_flight_sampled_p50": round(_q([s["in_flight"] for s in samples], 50), 1) if samples else 0,
            "in_flight_sampled_max": max((s["in_flight"] for s in samples), default=0),
            "in_flight_littles_law": round(len(reqs) / secs * statistics.fmean(ok) / 1000, 2) if ok and secs else 0,
            "in_flight_planned": round(cap.in_flight(rate, gw.p50 / 1000), 2),
            "in_flight_planned_p95": cap.poisson_quantile(cap.in_flight(rate, gw.p95 / 1000)) if rate else 0,
        }
        for d in plan.deployments:
            counts = [s.get(f"{d.name}.running", 0) for s in samples]
            row[f"{d.name}_replicas_min_max"] = f"{min(counts, default=0)}-{max(counts, default=0)}"
            sized = cap.size_deployment(d.name, profile.deployments[d.name], rate * profile.deployments[d.name].visits_per_call,
                                        0, profile.autoscaling) if rate else None
            row[f"{d.name}_replicas_planned"] = sized.max_replicas if sized else d.min_replicas
        out.append(row)
    return out


def plot(rec: Recorder, plan, path: Path, phases: list[tuple[str, float, float]], bounds: list[float]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = [s["t"] for s in rec.samples]
    fig, (a1, a2) = plt.subplots(2, 1, figsize=(9, 6.4), sharex=True)
    for d in plan.deployments:
        a1.step(t, [s.get(f"{d.name}.running", 0) for s in rec.samples], where="post", label=f"{d.name} running")
        a1.axhline(d.max_replicas, ls=":", lw=0.8, color=a1.lines[-1].get_color())
    for d, line in zip(plan.deployments, list(a1.lines)[::2]):
        if any(f"{d.name}.target" in x for x in rec.samples):
            a1.step(t, [x.get(f"{d.name}.target", 0) for x in rec.samples], where="post", ls="--", lw=0.7,
                    color=line.get_color())
    a1.set_ylabel("replicas (dashed: autoscaler target,\ndotted: planned max)", fontsize=8)
    a1.legend(loc="upper left", fontsize=8)
    a2.plot(t, [s["in_flight"] for s in rec.samples], lw=0.8, label="in flight (client, sampled 1/s)")
    a2.set_ylabel("requests in flight")
    a2.set_xlabel("seconds")
    for b, (name, rate, _) in zip(bounds, phases):
        for ax in (a1, a2):
            ax.axvline(b, color="grey", lw=0.5)
        a1.annotate(f"{name} {rate:g}/s", (b, 1.0), xycoords=("data", "axes fraction"), xytext=(2, 2),
                    textcoords="offset points", fontsize=7, va="bottom")
    a2.legend(loc="upper right", fontsize=8)
    fig.suptitle("Quarry on loopback: planned autoscaling under two arrival rates (2 shared cores)", y=0.995)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


async def _drive(base: str, secret: str, args, rec: Recorder, phases, phase_of) -> list[float]:
    import httpx

    from quarry.serve.http.auth import mint_token

    from quarry.serve.launch import APP_NAME

    tokens = {t: mint_token(t, "load-agent", GROUPS, secret=secret, ttl_s=3600) for t in QUERIES}
    rng = random.Random(args.seed)
    stop = asyncio.Event()
    bounds = []
    limits = httpx.Limits(max_connections=256, max_keepalive_connections=64)
    async with httpx.AsyncClient(base_url=base, limits=limits, timeout=args.timeout_s) as http:
        work = {name: await _make_runs(http, tokens, int(rate * secs * 1.3) + 5, rng)
                for name, rate, secs in phases if rate}
        # Untimed: one search per tenant loads its index (and the query model) in the first
        # replicas, so the low phase does not measure cold starts.
        for tenant, query, run_id in await _make_runs(http, {t: tokens[t] for t in tokens}, 2 * len(tokens), rng):
            await _search(http, Recorder(t0=0.0), "preload", tokens[tenant], run_id, query, args.timeout_s)
        rec.t0 = time.perf_counter()
        sampler = asyncio.create_task(_sampler(rec, phase_of, stop, APP_NAME))
        for name, rate, secs in phases:
            phase_of["now"] = name
            bounds.append(time.perf_counter() - rec.t0)
            print(f"load_autoscale: phase {name}: {rate:g}/s for {secs:g}s", flush=True)
            if rate:
                await _phase(http, rec, name, rate, secs, tokens, work[name], rng, args.timeout_s)
            else:
                await asyncio.sleep(secs)
        stop.set()
        await sampler
    return bounds


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", default="infra/profiles/quarry-local.yaml")
    ap.add_argument("--rates", default="2,8", help="two arrival rates, searches/s (default 2,8)")
    ap.add_argument("--phase-s", type=float, default=60.0, help="seconds per loaded phase (default 60)")
    ap.add_argument("--warm-s", type=float, default=10.0)
    ap.add_argument("--cool-s", type=float, default=75.0, help="idle seconds after load, to see scale-down")
    ap.add_argument("--timeout-s", type=float, default=30.0, help="per-request timeout")
    ap.add_argument("--embedder", default="hashing",
                    help="index embedder: hashing (default: no model, so 2 shared cores are not swamped by query "
                         "embedding) or default (packaged MiniLM, as in eval/results/serve.md)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="eval/results/load_autoscale.md")
    args = ap.parse_args(argv)
    rates = [float(x) for x in args.rates.split(",")]
    if len(rates) != 2 or min(rates) <= 0:
        ap.error("--rates takes two positive arrival rates, e.g. 2,8")

    # Replicas and handles push autoscaling metrics every 10 s by default; 1 s lets the
    # short look-back window of the local profile see load. Set before Ray starts so the
    # controller and replicas inherit it.
    os.environ.setdefault("RAY_SERVE_REPLICA_AUTOSCALING_METRIC_PUSH_INTERVAL_S", "1")
    os.environ.setdefault("RAY_SERVE_HANDLE_AUTOSCALING_METRIC_PUSH_INTERVAL_S", "1")

    import secrets as pysecrets

    from quarry.core.capacity.workload import plan as make_plan
    from quarry.demo import build
    from quarry.core.capacity.workload import load_profile
    from quarry.plan_manifests import serve_config
    from quarry.serve import launch
    from quarry.serve.serve_cmd import config_args
    from quarry.serve.settings import settings_from_args

    profile = load_profile(args.profile)
    plan = make_plan(profile)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="quarry-load-") as tmp:
        root = str(Path(tmp) / "index")
        build(root, None if args.embedder == "default" else args.embedder, "in-process")
        cfg_path = Path(tmp) / "serve.yaml"
        import yaml

        cfg_path.write_text(yaml.safe_dump(serve_config(plan, profile)))
        secret = pysecrets.token_urlsafe(48)
        # The same path as `quarry serve --config`: the generated config's args and
        # per-deployment autoscaling, through the real app builder.
        settings = settings_from_args({**config_args(str(cfg_path)), "index_root": root, "jwt_secret": secret})
        port = launch.free_port()
        base = launch.start(settings, "127.0.0.1", port, ray_init={"num_cpus": 2, "include_dashboard": False})
        phases = [("warm-up", 0.0, args.warm_s), ("low", rates[0], args.phase_s),
                  ("high", rates[1], args.phase_s), ("cool-down", 0.0, args.cool_s)]
        rec = Recorder(t0=time.perf_counter())
        try:
            bounds = asyncio.run(_drive(base, secret, args, rec, phases, {"now": "warm-up"}))
        finally:
            launch.stop()
    rows = summarise(rec, phases, plan, profile)
    png = out.with_suffix(".png")
    plot(rec, plan, png, phases, bounds)
    raw = out.with_suffix(".json")
    raw.write_text(json.dumps({"phases": rows, "samples": rec.samples}, indent=1))
    traces = out.with_name(out.stem + "_traces.jsonl")
    traces.write_text("".join(json.dumps(t) + "\n" for t in rec.traces))
    load = os.getloadavg()
    cols = list(rows[0])
    md = [f"# Load validation of the capacity plan ({profile.name})", "",
          f"Command: `python -m quarry.eval.load_autoscale --profile {args.profile} --rates {args.rates} --embedder {args.embedder} "
          f"--phase-s {args.phase_s:g} --cool-s {args.cool_s:g}`  ",
          f"Machine: {os.cpu_count()} CPU cores shared with other jobs; load average at the end "
          f"{load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} (noisy).  ",
          f"Plot: `{png.name}`; per-second samples: `{raw.name}`; trace-shaped records for "
          f"`quarry plan --from-traces`: `{traces.name}`.", "",
          "| " + " | ".join(cols) + " |", "| " + " | ".join("---" for _ in cols) + " |"]
    md += ["| " + " | ".join(str(r[c]) for c in cols) + " |" for r in rows]
    out.write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
