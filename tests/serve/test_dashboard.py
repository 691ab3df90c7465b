"""The Grafana dashboard queries only metrics the code defines, each with the series suffix
its kind exports (Ray's ``ray_`` prefix; counters ``_total``; histograms ``_bucket``,
``_sum``, ``_count``; gauges bare)."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
DASHBOARDS = sorted((REPO / "infra" / "grafana").glob("*.json"))
SUFFIXES = {"Counter": ("_total",), "Histogram": ("_bucket", "_sum", "_count"), "Gauge": ("",)}


def defined_metrics() -> dict[str, str]:
    """name -> kind for every ``Counter``/``Histogram``/``Gauge`` created under quarry/serve
    (the first argument a string, or a module-level constant holding one)."""
    out: dict[str, str] = {}
    for path in (REPO / "quarry" / "serve").rglob("*.py"):
        tree = ast.parse(path.read_text())
        consts: dict[str, str] = {}
        for node in tree.body:
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    names = target.elts if isinstance(target, ast.Tuple) else [target]
                    values = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value]
                    for n, v in zip(names, values):
                        if isinstance(n, ast.Name) and isinstance(v, ast.Constant) and isinstance(v.value, str):
                            consts[n.id] = v.value
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in SUFFIXES \
                    and node.args:
                a = node.args[0]
                name = a.value if isinstance(a, ast.Constant) else consts.get(getattr(a, "id", ""))
                if isinstance(name, str):
                    out[name] = node.func.id
    return out


def queries(dashboard: dict) -> list[str]:
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    exprs += [v["query"] for v in dashboard.get("templating", {}).get("list", []) if v.get("type") == "query"]
    return exprs


def test_the_metric_inventory_is_found():
    m = defined_metrics()
    assert m["quarry_tenant_requests"] == "Counter" and m["quarry_tenant_latency_ms"] == "Histogram"
    assert m["quarry_change_lag_seconds"] == "Gauge" and m["quarry_requests"] == "Counter"


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_every_queried_metric_is_defined_with_its_kinds_suffix(path):
    dash = json.loads(path.read_text())
    metrics = defined_metrics()
    used = set()
    for expr in queries(dash):
        names = re.findall(r"\bray_([a-z_:][a-z0-9_:]*)", expr)
        assert names, f"query names no Quarry metric: {expr}"
        for series in names:
            match = [(base, kind) for base, kind in metrics.items()
                     for sfx in SUFFIXES[kind] if series == base + sfx]
            assert match, f"{path.name}: ray_{series} is not a series of any metric the code defines"
            used.add(match[0][0])
    # the panels cover what operators need per tenant
    assert {"quarry_tenant_requests", "quarry_tenant_latency_ms", "quarry_tenant_errors", "quarry_tenant_limited",
            "quarry_change_lag_seconds"} <= used
    titles = " ".join(p["title"] for p in dash["panels"]).lower()
    for word in ("per second", "p50", "p95", "errors", "429", "lag"):
        assert word in titles
