"""``quarry eval cases-diff BEFORE AFTER``: what a change did to an evidence-case run.

Compares two ``cases.json`` files written by ``quarry eval cases --out`` (the same suites,
before and after a change) outcome by outcome: per split, answerable outcomes resolved
correctly before and after, the outcomes gained and lost by id, false assertions on
unanswerable cases, and counterfactuals whose verdict flipped. An outcome present in only
one run is counted apart (a case added or removed), never as gained or lost. Dev and test
stay apart, as in the report itself.

    quarry eval cases-diff /tmp/before/cases.json /tmp/after/cases.json [--json]
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict


class SplitDiff(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    split: str
    answerable: int  # outcomes in both runs
    correct_before: int
    correct_after: int
    gained: list[str]
    lost: list[str]
    false_before: int
    false_after: int
    only_before: list[str]  # outcome ids of cases the other run does not have
    only_after: list[str]


class CounterfactualFlip(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    outcome: str
    kind: str
    before: bool
    after: bool
    detail: str  # the after run's detail


class CaseDiff(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    splits: list[SplitDiff]
    counterfactual_flips: list[CounterfactualFlip]


def _outcomes(run: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["id"]: c for c in run["cases"]}


def _false(c: Mapping[str, Any]) -> bool:
    """A false assertion as the report counts it (``case_summary``): unanswerable, not abstained."""
    return not c["answerable"] and not c["abstained"]


def diff(before: Mapping[str, Any], after: Mapping[str, Any]) -> CaseDiff:
    """The outcome-by-outcome difference of two ``cases.json`` documents."""
    a, b = _outcomes(before), _outcomes(after)
    splits = []
    for split in sorted({c["split"] for c in (*a.values(), *b.values())}):
        both = sorted(k for k in a.keys() & b.keys() if a[k]["split"] == split)
        ans = [k for k in both if a[k]["answerable"]]
        splits.append(SplitDiff(
            split=split, answerable=len(ans),
            correct_before=sum(bool(a[k]["resolution"]) for k in ans),
            correct_after=sum(bool(b[k]["resolution"]) for k in ans),
            gained=[k for k in ans if b[k]["resolution"] and not a[k]["resolution"]],
            lost=[k for k in ans if a[k]["resolution"] and not b[k]["resolution"]],
            false_before=sum(_false(a[k]) for k in both), false_after=sum(_false(b[k]) for k in both),
            only_before=sorted(k for k in a.keys() - b.keys() if a[k]["split"] == split),
            only_after=sorted(k for k in b.keys() - a.keys() if b[k]["split"] == split),
        ))

    def verdicts(run):
        return {(x["case_id"], x["kind"]): x for x in run.get("counterfactuals", []) if x["applicable"]}
    ca, cb = verdicts(before), verdicts(after)
    flips = [CounterfactualFlip(outcome=k[0], kind=k[1], before=ca[k]["passed"], after=cb[k]["passed"],
                                detail=cb[k]["detail"])
             for k in sorted(ca.keys() & cb.keys()) if ca[k]["passed"] != cb[k]["passed"]]
    return CaseDiff(splits=splits, counterfactual_flips=flips)


def to_markdown(d: CaseDiff) -> str:
    lines = ["| split | answerable outcomes | correct before | correct after | gained | lost "
             "| false assertions before / after | only in one run |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for s in d.splits:
        lines.append(f"| {s.split} | {s.answerable} | {s.correct_before} | {s.correct_after} | {len(s.gained)} "
                     f"| {len(s.lost)} | {s.false_before} / {s.false_after} "
                     f"| {len(s.only_before)} before, {len(s.only_after)} after |")
    for s in d.splits:
        for title, ids in (("gained", s.gained), ("lost", s.lost)):
            if ids:
                lines += ["", f"{s.split}, {title}:", *(f"- {k}" for k in ids)]
    if d.counterfactual_flips:
        lines += ["", "Counterfactuals that flipped:", ""]
        lines += [f"- {f.kind} {f.outcome}: {'pass' if f.before else 'fail'} -> {'pass' if f.after else 'fail'}"
                  f" ({f.detail[:160]})" for f in d.counterfactual_flips]
    return "\n".join(lines) + "\n"


def add_arguments(p) -> None:
    p.add_argument("before", metavar="BEFORE", help="cases.json of the run before the change")
    p.add_argument("after", metavar="AFTER", help="cases.json of the run after it")
    p.add_argument("--json", action="store_true", help="print the difference as JSON")


def _load(path: str) -> dict[str, Any] | str:
    p = Path(path)
    if p.is_dir():
        p = p / "cases.json"
    try:
        run = json.loads(p.read_text())
    except FileNotFoundError:
        return f"no such file: {p}"
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        return f"{p} is not a cases.json ({type(e).__name__})"
    if not isinstance(run, dict) or not isinstance(run.get("cases"), list):
        return f"{p} is not a cases.json written by `quarry eval cases --out` (no 'cases' list)"
    return run


def run(args) -> int:
    runs = [_load(args.before), _load(args.after)]
    for r in runs:
        if isinstance(r, str):
            print(f"quarry eval cases-diff: {r}", file=sys.stderr)
            return 2
    try:
        d = diff(*runs)
    except (KeyError, TypeError) as e:
        print(f"quarry eval cases-diff: an outcome lacks a field ({e}); both files must come from "
              "`quarry eval cases --out`", file=sys.stderr)
        return 2
    print(d.model_dump_json(indent=2) if args.json else to_markdown(d), end="" if not args.json else "\n")
    return 0
