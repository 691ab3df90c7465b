"""The figures over a suite's outcomes: the boundary table, per-split and per-width
summaries (dev and test never blended), the width-invariance check, the isolation gate,
and the counterfactuals' pass counts."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from quarry.core.records import Decision
from quarry.eval.case_model import SPLITS, principal_label
from quarry.eval.case_run import CaseOutcome
from quarry.eval.case_scoring import BOUNDARIES, doc_of

__all__ = ["POOLED_FOR_GATE", "boundary_table", "counterfactual_summary", "summarize", "summarize_suite",
           "width_invariance"]

def boundary_table(outcomes: Sequence[CaseOutcome]) -> list[dict[str, Any]]:
    """Seed §11.12's table over the answerable cases: cases surviving each boundary (and
    every one before it), the rate conditional on the previous boundary, what failure means."""
    ans = [o for o in outcomes if o.answerable]
    rows, prev = [], len(ans)
    alive = list(ans)
    for key, label, meaning in BOUNDARIES:
        alive = [o for o in alive if getattr(o, key)]
        rows.append({"boundary": key, "label": label, "surviving": len(alive), "of": prev,
                     "conditional_rate": (len(alive) / prev) if prev else None, "failure_means": meaning})
        prev = len(alive)
    rows.append({"boundary": "end_to_end", "label": "End-to-end", "surviving": len(alive), "of": len(ans),
                 "conditional_rate": (len(alive) / len(ans)) if ans else None,
                 "failure_means": "product result, not a diagnosis"})
    return rows


def _rate(n: int, d: int) -> float | None:
    return n / d if d else None


def summarize(outcomes: Sequence[CaseOutcome]) -> dict[str, Any]:
    """The figures over a set of outcomes of *one* split (the caller never mixes splits).
    Counts are outcomes (case x width x principal); ``case_count`` counts distinct cases."""
    ans = [o for o in outcomes if o.answerable]
    una = [o for o in outcomes if not o.answerable]
    precisions = [o.precision for o in ans if o.precision is not None]
    recalls = [o.candidate_recall for o in ans if o.candidate_recall is not None]
    honest = sum(1 for o in una if o.abstained)
    leaks = [f"{o.id}: {leak}" for o in outcomes for leak in o.leaks]
    return {
        "cases": len(outcomes),
        "case_count": len({o.case_id for o in outcomes}),
        "answerable": len(ans),
        "unanswerable": len(una),
        "candidate_recall": _rate(sum(o.candidates for o in ans), len(ans)),
        "candidate_recall_mean_fraction": (sum(recalls) / len(recalls)) if recalls else None,
        "second_stage_survival": _rate(sum(o.second_stage for o in ans), len(ans)),
        "delivered": _rate(sum(o.delivered for o in ans), len(ans)),
        "resolution_correct": sum(o.resolution for o in ans),
        "resolution_accuracy": _rate(sum(o.resolution for o in ans), len(ans)),
        "precision_at_k": (sum(precisions) / len(precisions)) if precisions else None,
        "honest_abstention_rate": _rate(honest, len(una)),
        "false_assertion_rate": _rate(len(una) - honest, len(una)),
        "honest_abstentions": honest,
        "false_assertions": len(una) - honest,
        "isolation": "pass" if not leaks else "FAIL",
        "leaks": leaks,
        "boundaries": boundary_table(outcomes),
        "same_at_every_width": width_invariance(outcomes),
        "first_lost": {b: sum(1 for o in ans if o.first_lost == b) for b, _, _ in BOUNDARIES},
        "failing_cases": [{"id": o.id, "case": o.case_id, "width": o.width, "principal": principal_label(o.groups),
                           "failures": list(o.leaks) + list(o.failures)}
                          for o in outcomes if o.failures or o.leaks],
    }


def width_invariance(outcomes: Sequence[CaseOutcome]) -> dict[str, int]:
    """Over (case, principal) run at more than one width: how many give the same
    governing documents, the same rejections (document, reason) and the same unresolved
    groups at every width. Resolution is meant not to depend on width."""
    runs: dict[tuple, dict[int, Decision]] = {}
    for o in outcomes:
        runs.setdefault((o.case_id, o.groups), {})[o.width] = o.decision
    multi = [r for r in runs.values() if len(r) > 1]

    def same(view) -> int:
        return sum(1 for r in multi if len({view(d) for d in r.values()}) == 1)
    return {
        "runs": len(multi),
        "governing": same(lambda d: frozenset(doc_of(x.passage_id) for x in d.governing)),
        "rejected": same(lambda d: frozenset((doc_of(x.passage_id), x.reason) for x in d.rejected)),
        "unresolved": same(lambda d: frozenset(frozenset(doc_of(p) for p in u.passage_ids) for u in d.unresolved)),
    }


# What quarry/eval/case_gate.py reads at the top of the summary (pooled, see summarize_suite).
POOLED_FOR_GATE = ("answerable", "resolution_accuracy", "candidate_recall", "false_assertion_rate")


def summarize_suite(outcomes: Sequence[CaseOutcome], extra_leaks: Sequence[str] = ()) -> dict[str, Any]:
    """Per split (dev and test apart, never blended) and, within each, per width; the
    isolation gate over every run (``extra_leaks``: runs made only for counterfactuals)."""
    leaks = [f"{o.id}: {leak}" for o in outcomes for leak in o.leaks] + list(extra_leaks)
    widths = sorted({o.width for o in outcomes})
    splits: dict[str, Any] = {}
    for sp in SPLITS:
        mine = [o for o in outcomes if o.split == sp]
        if not mine:
            continue
        s = summarize(mine)
        s["widths"] = sorted({o.width for o in mine})
        s["by_width"] = {str(k): summarize([o for o in mine if o.width == k]) for k in s["widths"]}
        splits[sp] = s
    pooled = summarize(outcomes)
    return {
        "isolation": "pass" if not leaks else "FAIL",
        "leaks": leaks,
        # Pooled over every split, only for comparing one case set with itself (the
        # promotion gate, quarry/eval/case_gate.py: new vs live generation); never reported.
        **{k: pooled[k] for k in POOLED_FOR_GATE},
        "outcomes": len(outcomes),
        "cases": len({o.case_id for o in outcomes}),
        "widths": widths,
        "principals": len({(o.case_id, o.groups) for o in outcomes}),
        "splits": splits,
        # rows: width; columns: split (correct / answerable outcomes at that width)
        "resolution_by_width": {str(k): {sp: {"correct": s["by_width"][str(k)]["resolution_correct"],
                                              "of": s["by_width"][str(k)]["answerable"],
                                              "rate": s["by_width"][str(k)]["resolution_accuracy"]}
                                         for sp, s in splits.items() if str(k) in s["by_width"]}
                                for k in widths},
    }


def counterfactual_summary(results) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for r in results:
        s = out.setdefault(r.kind, {"applicable": 0, "passed": 0, "not_applicable": 0, "failing": []})
        if not r.applicable:
            s["not_applicable"] += 1
        elif r.passed:
            s["applicable"] += 1
            s["passed"] += 1
        else:
            s["applicable"] += 1
            s["failing"].append(r.case_id)
    return out
