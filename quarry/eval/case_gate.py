"""Eval-gated promotion: ``quarry build --gate-cases DIR``.

A new generation of a tenant is published only when, on that tenant's evidence cases
(``quarry.eval.cases``), the tenant-isolation gate holds and resolution accuracy and
candidate recall are no worse than on the live generation. Otherwise CURRENT keeps
naming the live generation and the new one stays unpublished, with the regressed cases
named. Like the second-stage gate (``quarry/core/rank/gate.py``), the decision is recorded in the
generation's manifest as a typed ``CaseGateResult`` under ``case_gate`` (and so in the
tenant's manifest once that generation is published); the full per-case outcomes of both
generations go to ``gen-<n>/case_gate.json``.

The build job takes the gate by injection (``quarry.jobs.build.run_build(case_gate=...)``,
composed by ``quarry.build_cmd``): evaluation sits above jobs, and jobs never import it.

Both generations are evaluated the way serving would answer right after the switch: each
with its own recorded second stage (a fresh build has none until ``train-ranker`` runs).
A tenant without cases, or without a live generation to compare against, is published
when isolation holds.
"""

from __future__ import annotations

import datetime as dt
import functools
from typing import Any

from quarry.core.index import layout
from quarry.core.index.manifest import CaseGateMetrics, CaseGateResult, record_case_gate
from quarry.eval.case_model import load_cases
from quarry.eval.cases import run_suite
from quarry.eval.report_cases import to_json
from quarry.jobs.build_settings import CaseGate

GATE_FILE = "case_gate.json"


def _metrics(run) -> CaseGateMetrics:
    s = run.summary
    return CaseGateMetrics(isolation=s["isolation"], resolution_accuracy=s["resolution_accuracy"],
                           candidate_recall=s["candidate_recall"], cases=s["cases"], answerable=s["answerable"],
                           false_assertion_rate=s["false_assertion_rate"], leaks=s["leaks"][:20])


def _no_worse(new: float | None, old: float | None) -> bool:
    return old is None or (new is not None and new >= old - 1e-12)


def regressed_cases(new_run, live_run) -> list[str]:
    """Cases whose candidates or resolution boundary passed on live and fail on new."""
    live = {o.id: o for o in live_run.outcomes}
    out = []
    for o in new_run.outcomes:
        was = live.get(o.id)
        if was is None or not o.answerable:
            continue
        lost = [b for b in ("candidates", "resolution") if getattr(was, b) and not getattr(o, b)]
        if lost:
            out.append(f"{o.id} ({', '.join(lost)})")
    return out


def gate_generation(root: str, tenant: str, generation: int, cases_dir: str) -> CaseGateResult:
    """Evaluate ``generation`` (built, not yet published) against the live one on the
    tenant's cases; record and return the decision (``publish``: bool)."""
    cases = [c for c in load_cases(cases_dir) if c.tenant == tenant]
    live_gen = layout.current_generation(root, tenant)
    record: dict[str, Any] = {"cases_dir": str(cases_dir), "cases": len(cases), "generation": generation,
                              "live_generation": live_gen,
                              "decided_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")}
    runs: dict[str, Any] = {}
    if not cases:
        record.update(publish=True, reason=f"no evidence cases for tenant {tenant!r} in {cases_dir}")
    else:
        new_run = run_suite(cases, root, generation={tenant: generation}, counterfactuals=False)
        runs["new"] = to_json(new_run)
        new = record["new"] = _metrics(new_run)
        if new.isolation != "pass":
            record.update(publish=False, reason="tenant isolation failed on the new generation", regressed=[])
        elif live_gen is None:
            record.update(publish=True, reason="isolation holds; no live generation to compare against")
        else:
            live_run = run_suite(cases, root, generation={tenant: live_gen}, counterfactuals=False)
            runs["live"] = to_json(live_run)
            live = record["live"] = _metrics(live_run)
            record["regressed"] = regressed_cases(new_run, live_run)
            worse = [m for m in ("resolution_accuracy", "candidate_recall")
                     if not _no_worse(getattr(new, m), getattr(live, m))]
            if worse:
                record.update(publish=False, reason=f"{' and '.join(worse)} worse than live gen-{live_gen}")
            else:
                record.update(publish=True, reason=f"isolation holds; resolution accuracy and candidate recall "
                                                   f"no worse than live gen-{live_gen}")
    result = CaseGateResult(**record)
    gen_dir = layout.generation_dir(root, tenant, generation)
    layout.write_json(layout.join(gen_dir, GATE_FILE), {"decision": result.to_json(), "runs": runs})
    record_case_gate(root, tenant, generation, result)
    return result


def case_gate(cases_dir: str) -> CaseGate:
    """The gate ``run_build`` calls per tenant: :func:`gate_generation` over ``cases_dir``."""
    return functools.partial(gate_generation, cases_dir=cases_dir)
