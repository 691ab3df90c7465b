"""Labelled statement pairs: does ``conflict(statements(a), statements(b))`` agree with the
label? Precision, recall and F1 of the conflict rule, the ids of the pairs it gets wrong, and
the errors counted by each pair's ``why`` tag.

    python -m quarry.eval.statement_pairs eval/statement_pairs/dev.yaml [--out FILE.md]
        [--embedder default|hashing|DIR] [--part all|tune|holdout] [--sweep]

The file holds ``pairs: [{id, a, b, conflict, why}, ...]``. ``--embedder`` adds the
similarity of the masked sentences under that embedder (:func:`.subjects.same_subject`);
without it the rule is the lemma rule the resolver runs. ``--part`` scores the tuning
two thirds or the held-out third of the file (by a hash of each pair id, :func:`part_of`).
``--sweep`` scores a grid of :class:`.subjects.Thresholds` and names the best by F1 on the
part scored. Bad input (a missing file, bad YAML, a pair without its fields) is one line
on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from quarry.core.evidence.conflict import conflict
from quarry.core.evidence.statement import Statement
from quarry.core.evidence.statements import DEFAULT_NLP, statements_batch
from quarry.core.evidence.subjects import DEFAULT_THRESHOLDS, Thresholds

PARTS = ("all", "tune", "holdout")
_TEXTS = {"clause": None, "subject": lambda s: " ".join((*s.subject, s.predicate))}
SPLIT_SEED = "quarry-statement-pairs-1"


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


def part_of(pair_id: str) -> str:
    """"holdout" for a fixed third of the pair ids (by hash), else "tune"."""
    h = int(hashlib.sha256(f"{SPLIT_SEED}:{pair_id}".encode()).hexdigest()[:8], 16)
    return "holdout" if h % 3 == 0 else "tune"


def select(pairs: Sequence[Pair], part: str) -> list[Pair]:
    if part not in PARTS:
        raise ValueError(f"part must be one of {', '.join(PARTS)}, not {part!r}")
    return [p for p in pairs if part == "all" or part_of(p.id) == part]


def embedder_similarity(stated: Sequence[Sequence[Statement]], spec: str, text=None):
    """The similarity the resolver builds from stored statement vectors
    (:func:`quarry.core.evidence.vectors.clause_similarity`), over the statements' texts
    under embedder ``spec`` (:func:`quarry.core.embed.factory.build_embedder`), float16
    as stored. ``text`` maps a statement to what is encoded (default: its masked clause;
    the clause is still the key the rule looks up)."""
    from quarry.core.embed.factory import build_embedder
    from quarry.core.evidence.graph import PassageFacts
    from quarry.core.evidence.vectors import attach, clause_similarity, encode_facts

    emb = build_embedder(spec)
    facts = [PassageFacts(str(k), tuple(ss)) for k, ss in enumerate(stated)]
    if text is None:
        return clause_similarity(attach(facts, encode_facts(facts, emb.encode)))
    alt = [PassageFacts(f.passage_id, tuple(Statement(**{**s.__dict__, "clause": text(s)}) for s in f.statements))
           for f in facts]
    vecs = encode_facts(alt, emb.encode)
    return clause_similarity(attach(facts, vecs))


def evaluate(pairs: Sequence[Pair], nlp_name: str = DEFAULT_NLP, embedder: str | None = None,
             thresholds: Thresholds = DEFAULT_THRESHOLDS, stated=None, similarity=None, text=None) -> Report:
    t0 = time.perf_counter()
    if stated is None:
        stated = statements_batch([t for p in pairs for t in (p.a, p.b)], nlp_name=nlp_name, tenant="statement-pairs")
    if similarity is None and embedder:
        similarity = embedder_similarity(stated, embedder, text)
    fp, fn, tp = [], [], 0
    for k, p in enumerate(pairs):
        got = conflict(stated[2 * k], stated[2 * k + 1], similarity, thresholds) is not None
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


def sweep(pairs: Sequence[Pair], nlp_name: str = DEFAULT_NLP, embedder: str | None = None, text=None
          ) -> list[tuple[Thresholds, Report]]:
    """Every grid :class:`.subjects.Thresholds` with its report, best F1 first (ties: the
    higher thresholds, which accept fewer pairs)."""
    stated = statements_batch([t for p in pairs for t in (p.a, p.b)], nlp_name=nlp_name, tenant="statement-pairs")
    similarity = embedder_similarity(stated, embedder, text) if embedder else None
    overlaps = [x / 20 for x in range(1, 11)] + [1.01]
    sims = [x / 20 for x in range(8, 21)] + [1.01] if similarity else [1.01]
    mins = [0.0, 0.1, 0.2, 0.3] if similarity else [0.0]
    synonyms = [x / 100 for x in range(70, 100, 3)] + [1.01] if similarity else [1.01]
    out = []
    for o, sm, mo, sy, ms in itertools.product(overlaps, sims, mins, synonyms, (1, 2, 3)):
        th = Thresholds(overlap=o, min_overlap=mo, similarity=sm, synonym=sy, min_shared=ms)
        out.append((th, evaluate(pairs, nlp_name, thresholds=th, stated=stated, similarity=similarity)))
    out.sort(key=lambda x: (-x[1].f1, -x[0].min_shared, -x[0].overlap, -x[0].similarity, -x[0].min_overlap,
                            -x[0].synonym))
    return out


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
    ap.add_argument("pairs", nargs="+", help="YAML files of labelled pairs (scored together)")
    ap.add_argument("--out", help="also write the report as Markdown to this file")
    ap.add_argument("--nlp", default=DEFAULT_NLP, help=f"spaCy pipeline name (default {DEFAULT_NLP})")
    ap.add_argument("--embedder", default=None,
                    help="also accept subjects whose masked sentences are similar under this embedder "
                         "(default, hashing or a model directory); default: the lemma rule only")
    ap.add_argument("--part", default="all", choices=PARTS, help="score all pairs, the tuning part or the held-out third")
    ap.add_argument("--sweep", action="store_true", help="score a grid of thresholds; print the best ten")
    ap.add_argument("--text", default="clause", choices=("clause", "subject"),
                    help="what a statement's vector encodes with --embedder: its masked clause (as the index "
                         "stores) or its subject phrase and predicate")
    args = ap.parse_args(argv)
    try:
        pairs = select([p for f in args.pairs for p in load_pairs(f)], args.part)
        if len({p.id for p in pairs}) != len(pairs):
            raise ValueError("a pair id appears in two of the files")
        if args.sweep:
            for th, r in sweep(pairs, nlp_name=args.nlp, embedder=args.embedder, text=_TEXTS[args.text])[:10]:
                print(f"overlap {th.overlap:.2f} min_overlap {th.min_overlap:.2f} similarity {th.similarity:.2f} "
                      f"synonym {th.synonym:.2f} min_shared {th.min_shared}: "
                      f"P {r.precision:.3f} R {r.recall:.3f} F1 {r.f1:.3f}")
            return 0
        report = evaluate(pairs, nlp_name=args.nlp, embedder=args.embedder, text=_TEXTS[args.text])
    except ValueError as e:
        print(f"statement_pairs: {e}", file=sys.stderr)
        return 2
    label = " + ".join(args.pairs) + ("" if args.part == "all" else f" ({args.part} part)") + (
        f", embedder {args.embedder}" if args.embedder else "")
    md = to_markdown(report, label)
    print(md)
    if args.out:
        Path(args.out).write_text(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
