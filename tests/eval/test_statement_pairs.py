"""The labelled statement-pair scorer: input checks, exit status 2 on bad input, errors counted
by `why`, and the shipped pair files load (unique ids, boolean labels)."""

from __future__ import annotations

from pathlib import Path

import pytest

from quarry.eval import statement_pairs as sp

ROOT = Path(__file__).resolve().parents[2]


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "pairs.yaml"
    p.write_text(text)
    return p


@pytest.mark.parametrize("text, message", [
    ("pairs: [{id: x, a: 'A.', b: 'B.'}]", "needs id, a, b and conflict"),
    ("pairs: [{id: x, a: 'A.', b: 'B.', conflict: maybe}]", "use true or false"),
    ("pairs: [{id: x, a: 'A.', b: 'B.', conflict: true}, {id: x, a: 'C.', b: 'D.', conflict: false}]",
     "appears twice"),
    ("pairs: {id: x}", "'pairs' list"),
    ("pairs: [", "not valid YAML"),
])
def test_bad_files_are_refused(tmp_path, text, message):
    with pytest.raises(ValueError, match=message):
        sp.load_pairs(_write(tmp_path, text))


def test_cli_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    assert sp.main([str(tmp_path / "missing.yaml")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("statement_pairs: no such file")


def test_count_by_why_groups_by_tag_and_label():
    pairs = [sp.Pair("a", "x", "y", True, "paraphrase"), sp.Pair("b", "x", "y", True, "paraphrase"),
             sp.Pair("c", "x", "y", False, "disjoint scope"), sp.Pair("d", "x", "y", False, "paraphrase")]
    rows = sp.count_by_why(pairs, wrong={"b", "c"})
    assert rows == (("paraphrase", True, 2, 1), ("disjoint scope", False, 1, 1), ("paraphrase", False, 1, 0))


def test_report_counts_every_error_once_by_why(tmp_path):
    """On a small real run, the by-why table's wrong counts add up to the listed errors."""
    path = _write(tmp_path, """pairs:
  - {id: p1, a: "Passwords expire after 90 days.", b: "Passwords expire after 30 days.", conflict: true, why: "paraphrase"}
  - {id: p2, a: "Passwords expire after 90 days.", b: "Passwords expire after 3 months.", conflict: false, why: "units equal"}
  - {id: p3, a: "Refunds take 5 days.", b: "Support tickets are answered within 2 days.", conflict: false, why: "different subject"}
""")
    r = sp.evaluate(sp.load_pairs(path))
    assert sum(n for _, _, n, _ in r.by_why) == r.n == 3
    assert sum(w for _, _, _, w in r.by_why) == len(r.false_positives) + len(r.false_negatives)
    md = sp.to_markdown(r, str(path))
    assert "## Errors by `why`" in md and "| units equal | no conflict | 1 |" in md


@pytest.mark.parametrize("name", ["dev.yaml", "dev2.yaml"])
def test_shipped_dev_files_load(name):
    pairs = sp.load_pairs(ROOT / "eval" / "statement_pairs" / name)
    assert len({p.id for p in pairs}) == len(pairs) > 100
    assert 0 < sum(p.conflict for p in pairs) < len(pairs)


def test_the_holdout_third_is_fixed_by_pair_id():
    part_of, select = sp.part_of, sp.select
    ids = [f"p{k}" for k in range(300)]
    held = [i for i in ids if part_of(i) == "holdout"]
    assert held == [i for i in ids if part_of(i) == "holdout"]  # the same split every run
    assert 70 < len(held) < 130
    pairs = [sp.Pair(i, "a", "b", False) for i in ids]
    assert len(select(pairs, "tune")) + len(select(pairs, "holdout")) == len(select(pairs, "all")) == 300
