"""``quarry plan``: the cost and capacity table for a workload profile, and the Ray Serve
config (and KubeRay RayService) whose deployments autoscale as the plan says."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from quarry.core.capacity.trace_samples import apply_samples, collect_samples, read_trace_records
from quarry.core.capacity.tenant_memory import (
    TenantLoad, TenantMemoryPlan, measure_index_bytes, parse_bytes, plan_tenant_memory, quantile, retriever_replicas)
from quarry.core.capacity.workload import load_profile
from quarry.core.capacity.workload import plan as make_plan
from quarry.core.errors import UsageError
from quarry import plan_manifests as pm

EPILOG = """\
examples:
  quarry plan --profile infra/profiles/seed-11-5.yaml --json
  quarry plan --profile infra/profiles/quarry-local.yaml --out infra/serve/quarry-serve.yaml \\
      --rayservice infra/kuberay/rayservice.yaml
  quarry plan --profile infra/profiles/quarry-local.yaml --from-traces var/traces/

--from-traces reads search traces (JSON lines or Parquet, a file or a folder) and replaces
the profile's candidate, delivered-token, survivor, calls-per-task and service-time
distributions with the measured ones (see quarry/core/capacity/trace_samples.py for the fields).

Tenants: --tenants N --working-set W --replica-memory 16GiB with --index-bytes-per-tenant 40MiB
(or --index-root DIR, which measures each tenant's published shard bytes and plans for the p95
tenant) adds how many tenants a Retriever replica holds hot and sizes Retriever replicas by
memory as well as by Little's law:
  quarry plan --profile infra/profiles/quarry-local.yaml --tenants 10000 --working-set 200 \
      --index-bytes-per-tenant 20MiB --replica-memory 16GiB
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = EPILOG
    p.add_argument("--profile", required=True, help="workload profile YAML (infra/profiles/*.yaml)")
    p.add_argument("--from-traces", default=None, metavar="PATH",
                   help="fill the profile's distributions from search traces under PATH")
    p.add_argument("--out", default=None, metavar="FILE", help="write the Ray Serve config here")
    p.add_argument("--rayservice", default=None, metavar="FILE", help="write a KubeRay RayService manifest here")
    p.add_argument("--json", action="store_true", help="print the plan as one JSON object instead of the table")
    t = p.add_argument_group("tenants (Retriever memory)")
    t.add_argument("--tenants", type=int, default=None, help="tenant count (default: the index root's, if given)")
    t.add_argument("--working-set", type=int, default=None, help="tenants hot at once")
    t.add_argument("--index-bytes-per-tenant", default=None, metavar="SIZE", help="loaded index size of a tenant, e.g. 40MiB")
    t.add_argument("--index-root", default=None, metavar="URI", help="measure index bytes per tenant from this index root")
    t.add_argument("--replica-memory", default=None, metavar="SIZE", help="Retriever replica memory, e.g. 16GiB")
    t.add_argument("--replica-base-memory", default="1.5GiB", metavar="SIZE",
                   help="a replica with no tenant loaded (default 1.5GiB)")


def plan_json(plan) -> dict[str, Any]:
    """The plan as plain JSON; whole numbers print as integers (8800, not 8800.0)."""
    def ints(v: Any) -> Any:
        if isinstance(v, dict):
            return {k: ints(x) for k, x in v.items()}
        if isinstance(v, list):
            return [ints(x) for x in v]
        return int(v) if isinstance(v, float) and v.is_integer() else v

    return ints(json.loads(plan.model_dump_json()))


def _n(x: float) -> str:
    if x == float("inf"):
        return "never"
    if float(x).is_integer():
        return f"{int(x):,}"
    return f"{x:,.4f}".rstrip("0").rstrip(".") if abs(x) < 10 else f"{x:,.1f}"


ROWS = (
    ("cost per retrieval call", None),
    ("reranker token-units (candidates x tokens)", "reranker_token_units"),
    ("delivered tokens after expansion", "delivered_tokens"),
    ("narrow evidence token-turns", "narrow_token_turns"),
    ("wide (unranked) tokens", "wide_tokens"),
    ("wide token-turns", "wide_token_turns"),
    ("token-turns avoided by the funnel", "avoided_token_turns"),
    ("reranking pays (break-even condition)", "reranking_pays"),
    ("break-even remaining turns", "break_even_turns"),
    ("one-turn case: token reduction", "one_turn.reduction"),
    ("one-turn case: reranking pays", "one_turn.reranking_pays"),
    ("per day", None),
    ("retrieval calls", "calls_per_day"),
    ("main-model token-turns avoided", "avoided_token_turns_per_day"),
    ("reranker token-units", "reranker_token_units_per_day"),
    ("per task", None),
    ("calls per task (insufficiency model)", "calls_per_task"),
    ("calls per task at target insufficiency", "calls_per_task_target"),
    ("fall in retrieval calls", "calls_fall"),
    ("one pass ms (retrieve + rerank + judge)", "pass_ms"),
    ("expected retrieval-path ms", "expected_latency_ms"),
    ("expected ms at target repeat rate", "expected_latency_target_ms"),
    ("saved by halving rerank ms", "rerank_halving_saving_ms"),
    ("saved by halving the repeat rate ms", "repeat_halving_saving_ms"),
    ("at peak (Little's law)", None),
    ("active retrieval paths", "active_paths"),
    ("active paths at target repeat rate", "active_paths_target"),
    ("endpoint calls/s", "peak_calls_per_s"),
)


def _get(e, path: str):
    for part in path.split("."):
        e = getattr(e, part)
    return e


def render_table(plan, profile) -> str:
    lines = [f"quarry plan: profile {plan.profile}"
             + (f" (measured on {plan.measured_on})" if plan.measured_on else " (nothing measured: illustrative)")]
    w = 46
    lines.append(f"{'':<{w}} {'p50':>16} {'p95':>16}")
    for label, key in ROWS:
        if key is None:
            lines.append(label)
            continue
        a, b = _get(plan.p50, key), _get(plan.p95, key)
        fa, fb = (("yes" if v else "no") if isinstance(v, bool) else _n(v) for v in (a, b))
        lines.append(f"  {label:<{w - 2}} {fa:>16} {fb:>16}")
    lines.append("")
    lines.append("deployments (Ray Serve autoscaling_config; in-flight mean = calls/s x service time, p95 = Poisson 95th percentile)")
    hdr = ("deployment", "req/s", "service ms p50/p95", "in-flight mean/p95", "replicas p50/p95", "min", "max", "target", "max_ongoing",
           "batch", "cpus", "gpus")
    rows = []
    for d in plan.deployments:
        load = profile.deployments[d.name]
        rows.append((d.name, _n(d.peak_requests_per_s), f"{_n(load.service_ms.p50)}/{_n(load.service_ms.p95)}",
                     f"{_n(d.mean_in_flight.p50)}/{_n(d.in_flight_peak.p95)}",
                     f"{_n(d.replicas_peak.p50)}/{_n(d.replicas_peak.p95)}", str(d.min_replicas),
                     str(d.max_replicas) + (" (capped)" if d.capped else ""), _n(d.target_ongoing_requests),
                     str(d.max_ongoing_requests), str(d.batch_size or "-"), _n(d.num_cpus), _n(d.num_gpus)))
    widths = [max(len(str(r[i])) for r in (hdr, *rows)) for i in range(len(hdr))]
    for r in (hdr, *rows):
        lines.append("  " + "  ".join(str(c).rjust(widths[i]) if i else str(c).ljust(widths[i]) for i, c in enumerate(r)))
    a = profile.autoscaling
    lines.append(f"  look_back_period_s {_n(a.look_back_period_s)}, upscale_delay_s {_n(a.upscale_delay_s)}, "
                 f"downscale_delay_s {_n(a.downscale_delay_s)}; p50/p95 columns are at p50/p95 service time")
    return "\n".join(lines)


def _check(pm, cfg: dict[str, Any] | None, manifest: dict[str, Any] | None) -> str | None:
    """Validate what is about to be written with Ray's Serve schema and the vendored KubeRay
    CRD schema, where those libraries are installed (the serve and dev extras)."""
    try:
        if cfg is not None:
            pm.validate_serve_config(cfg)
        if manifest is not None:
            pm.validate_rayservice(manifest)
    except ImportError:
        return None
    except Exception as e:  # noqa: BLE001 - pydantic or jsonschema ValidationError: report, do not write
        return str(e).splitlines()[0]
    return None


def tenant_load(args: argparse.Namespace) -> TenantLoad | None:
    """The tenant options as a :class:`TenantLoad`, or None when none was given."""
    given = [args.tenants, args.working_set, args.index_bytes_per_tenant, args.index_root, args.replica_memory]
    if all(v is None for v in given):
        return None
    if args.index_bytes_per_tenant is not None and args.index_root is not None:
        raise UsageError("give --index-bytes-per-tenant or --index-root, not both")
    tenants, per_tenant, measured = args.tenants, None, None
    if args.index_root is not None:
        sizes = measure_index_bytes(args.index_root)
        if not sizes:
            raise UsageError(f"--index-root {args.index_root}: no published tenant there")
        per_tenant, measured = float(quantile(list(sizes.values()), 0.95)), args.index_root
        tenants = tenants or len(sizes)
    elif args.index_bytes_per_tenant is not None:
        per_tenant = parse_bytes(args.index_bytes_per_tenant)
    missing = [n for n, v in (("--tenants", tenants), ("--working-set", args.working_set),
                              ("--index-bytes-per-tenant or --index-root", per_tenant),
                              ("--replica-memory", args.replica_memory)) if v is None]
    if missing:
        raise UsageError(f"tenant sizing needs {', '.join(missing)}")
    if tenants < 1 or args.working_set < 1:
        raise UsageError("--tenants and --working-set must be at least 1")
    if per_tenant <= 0:
        raise UsageError("index bytes per tenant must be more than 0")
    return TenantLoad(tenants=tenants, working_set=args.working_set, index_bytes_per_tenant=per_tenant,
                      replica_memory_bytes=parse_bytes(args.replica_memory),
                      replica_base_bytes=parse_bytes(args.replica_base_memory), measured_from=measured)


def _gib(b: float) -> str:
    return f"{b / 2**30:,.2f} GiB" if b >= 2**30 else f"{b / 2**20:,.1f} MiB"


def render_tenants(m: TenantMemoryPlan, littles: int) -> str:
    fits = ("yes" if m.working_set_fits_each_replica else
            f"NO: each replica would need {_gib(m.replica_memory_for_working_set)}, or tenant-affine routing")
    return "\n".join([
        "tenants (Retriever memory; Serve routes without tenant affinity, so each replica sees the whole working set)",
        f"  tenants {m.tenants:,}, working set {m.working_set:,}, index per tenant {_gib(m.index_bytes_per_tenant)}"
        + (f" (p95 measured under {m.measured_from})" if m.measured_from else ""),
        f"  replica memory {_gib(m.replica_memory_bytes)}: holds {m.tenants_hot_per_replica:,} tenants hot",
        f"  working set fits each replica: {fits}",
        f"  replica memory for the working set: {_gib(m.replica_memory_for_working_set)}",
        f"  Retriever replicas: Little's law p95 {littles}, by memory if partitioned {m.replicas_if_partitioned}, "
        f"planned {retriever_replicas(littles, m)}",
        f"  lru_tenants per replica: {m.lru_tenants}; all tenants loaded once: {_gib(m.all_tenants_bytes)}",
    ])


def run(args: argparse.Namespace) -> int:
    load = tenant_load(args)

    profile = load_profile(args.profile)
    if args.from_traces:
        if not Path(args.from_traces).exists():
            raise UsageError(f"{args.from_traces}: no trace file or folder there")
        samples = collect_samples(read_trace_records(args.from_traces))
        profile = apply_samples(profile, samples, args.from_traces)
    plan = make_plan(profile)
    cfg = pm.serve_config(plan, profile)
    header = (f"# Generated by `quarry plan --profile {args.profile}"
              + (f" --from-traces {args.from_traces}" if args.from_traces else "")
              + "`; do not edit by hand: change the profile and regenerate.\n"
              "# Every deployment autoscales with the planned settings (quarry.core.capacity.arithmetic).\n"
              "# The HS256 secret is not written here: set QUARRY_JWT_SECRET in the runtime env, or\n"
              "# point jwt_public_key_file at the identity provider's RS256 public key.\n")
    manifest = pm.rayservice(plan, profile, cfg) if args.rayservice else None
    problem = _check(pm, cfg if args.out or args.rayservice else None, manifest)
    if problem:
        raise UsageError(f"the generated files would not deploy: {problem}")
    for path, data in ((args.out, cfg), (args.rayservice, manifest)):
        if path:
            try:
                Path(path).parent.mkdir(parents=True, exist_ok=True)
                Path(path).write_text(pm.dump_yaml(data, header))
            except OSError as e:
                raise UsageError(f"cannot write {path}: {e.strerror}") from None
    mem = plan_tenant_memory(load) if load is not None else None
    littles = int(plan.deployment("Retriever").replicas_peak.p95)
    if args.json:
        out = plan_json(plan)
        if mem is not None:
            out["tenants"] = {**mem.model_dump(mode="json"), "retriever_replicas_littles_law": littles,
                              "retriever_replicas": retriever_replicas(littles, mem)}
        print(json.dumps(out))
    else:
        print(render_table(plan, profile))
        if mem is not None:
            print(render_tenants(mem, littles))
        for path, what in ((args.out, "Serve config"), (args.rayservice, "RayService manifest")):
            if path:
                print(f"wrote {what} {path}")
    return 0
