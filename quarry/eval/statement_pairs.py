"""Labelled statement pairs: does ``conflict(statements(a), statements(b))`` agree with the
label? Precision, recall and F1 of the conflict rule, the ids of the pairs it gets wrong, and
the errors counted by each pair's ``why`` tag.

    python -m quarry.eval.statement_pairs eval/statement_pairs/dev.yaml [--out FILE.md]

The file holds ``pairs: [{id, a, b, conflict, why}, ...]``. Bad input (a missing file, bad
YAML, a pair without its fields) is one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from quarry.core.evidence.conflict import conflict
from quarry.core.evidence.statements import DEFAULT_NLP, statements_batch


@dataclass(frozen=True)
class Pair:
    id: str
    a: str
    b: str
    conflict: bool
    why: str = ""


@dataclass(frozen=True)
class Report:
    precision: float
    recall: float
    f1: float
    n: int
    positives: int
    false_positives: tuple[str, ...]
    false_negatives: tuple[str, ...]
    seconds: float
    by_why: tuple[tuple[str, bool, int, int], ...] = ()  # (why, label, pairs, wrong), sorted


def count_by_why(pairs: Sequence[Pair], wrong: set[str]) -> tuple[tuple[str, bool, int, int], ...]:
    """(why, label, pairs, wrong) for each (why, label) group, conflicts first."""
    n: Counter[tuple[str, bool]] = Counter((p.why, p.conflict) for p in pairs)
    w: Counter[tuple[str, bool]] = Counter((p.why, p.conflict) for p in pairs if p.id in wrong)
    return tuple((why, label, n[why, label], w[why, label])
                 for why, label in sorted(n, key=lambda k: (not k[1], k[0])))


def load_pairs(path: str | Path) -> list[Pair]:
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"no such file: {p}")
    try:
        data = yaml.safe_load(p.read_text())
    except yaml.YAMLError as e:
        raise ValueError(f"{p} is not valid YAML: {str(e).splitlines()[0]}") from None
    if not isinstance(data, dict) or not isinstance(data.get("pairs"), list):
        raise ValueError(f"{p} must hold a mapping with a 'pairs' list")
    out, seen = [], set()
    for k, item in enumerate(data["pairs"]):
        if not isinstance(item, dict) or not {"id", "a", "b", "conflict"} <= set(item):
            raise ValueError(f"{p}: pair #{k} needs id, a, b and conflict")
        if not isinstance(item["conflict"], bool):
            raise ValueError(f"{p}: pair {item['id']!r} has conflict={item['conflict']!r}; use true or false")
        if item["id"] in seen:
            raise ValueError(f"{p}: pair id {item['id']!r} appears twice")
        seen.add(item["id"])
        out.append(Pair(str(item["id"]), str(item["a"]), str(item["b"]), item["conflict"], str(item.get("why", ""))))
    return out


def evaluate(pairs: Sequence[Pair], nlp_name: str = DEFAULT_NLP) -> Report:
    t0 = time.perf_counter()
    stated = statements_batch([t for p in pairs for t in (p.a, p.b)], nlp_name=nlp_name, tenant="statement-pairs")
    fp, fn, tp = [], [], 0
    for k, p in enumerate(pairs):
        got = conflict(stated[2 * k], stated[2 * k + 1]) is not None
        if got and p.conflict:
            tp += 1
        elif got:
            fp.append(p.id)
        elif p.conflict:
            fn.append(p.id)
    prec = tp / (tp + len(fp)) if tp + len(fp) else 1.0
    rec = tp / (tp + len(fn)) if tp + len(fn) else 1.0
    f1 = 2 * prec * rec / (prec + rec) if prec + rec else 0.0
    return Report(prec, rec, f1, len(pairs), sum(p.conflict for p in pairs), tuple(fp), tuple(fn),
                  time.perf_counter() - t0, count_by_why(pairs, set(fp) | set(fn)))


def to_markdown(r: Report, source: str) -> str:
    lines = [f"# Statement pairs: {source}", "",
             f"{r.n} pairs, {r.positives} conflicts; {r.seconds:.1f} s", "",
             "| precision | recall | F1 |", "| --- | --- | --- |",
             f"| {r.precision:.3f} | {r.recall:.3f} | {r.f1:.3f} |", "",
             f"False conflicts ({len(r.false_positives)}): {', '.join(r.false_positives) or 'none'}", "",
             f"Missed conflicts ({len(r.false_negatives)}): {', '.join(r.false_negatives) or 'none'}", ""]
    if r.by_why:
        lines += ["## Errors by `why`", "", "| why | label | pairs | wrong |", "| --- | --- | --- | --- |"]
        lines += [f"| {why or '-'} | {'conflict' if label else 'no conflict'} | {n} | {w} |"
                  for why, label, n, w in r.by_why]
        lines.append("")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m quarry.eval.statement_pairs", description=__doc__.splitlines()[0])
    ap.add_argument("pairs", help="a YAML file of labelled pairs")
    ap.add_argument("--out", help="also write the report as Markdown to this file")
    ap.add_argument("--nlp", default=DEFAULT_NLP, help=f"spaCy pipeline name (default {DEFAULT_NLP})")
    args = ap.parse_args(argv)
    try:
        pairs = load_pairs(args.pairs)
        report = evaluate(pairs, nlp_name=args.nlp)
    except ValueError as e:
        print(f"statement_pairs: {e}", file=sys.stderr)
        return 2
    md = to_markdown(report, args.pairs)
    print(md)
    if args.out:
        Path(args.out).write_text(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
