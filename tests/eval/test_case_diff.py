"""quarry eval cases-diff: outcome-by-outcome comparison of two case runs (pure; no index)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from quarry.eval.case_diff import diff, to_markdown

pytestmark = pytest.mark.unit


def _outcome(oid: str, split: str = "dev", answerable: bool = True, ok: bool = True, asserted=()):
    return {"id": oid, "split": split, "answerable": answerable, "resolution": ok if answerable else None,
            "asserted_by": list(asserted), "abstained": None if answerable else not asserted}


def _cf(oid: str, kind: str, passed: bool, applicable: bool = True):
    return {"case_id": oid, "kind": kind, "passed": passed, "applicable": applicable, "detail": f"{kind} {passed}"}


BEFORE = {"cases": [_outcome("a@k2/x"), _outcome("b@k2/x", ok=False), _outcome("c@k2/x", "test"),
                    _outcome("u@k2/x", answerable=False), _outcome("gone@k2/x")],
          "counterfactuals": [_cf("a@k4/x", "insert_rejected", False), _cf("b@k4/x", "swap_dates", True),
                              _cf("c@k4/x", "remove_source", False, applicable=False)]}
AFTER = {"cases": [_outcome("a@k2/x", ok=False), _outcome("b@k2/x"), _outcome("c@k2/x", "test"),
                   _outcome("u@k2/x", answerable=False, asserted=["p1"]), _outcome("new@k2/x")],
         "counterfactuals": [_cf("a@k4/x", "insert_rejected", True), _cf("b@k4/x", "swap_dates", True),
                             _cf("c@k4/x", "remove_source", True)]}


def test_gains_losses_false_assertions_and_flips_per_split():
    d = diff(BEFORE, AFTER)
    dev, test = d.splits
    assert (dev.split, dev.answerable, dev.correct_before, dev.correct_after) == ("dev", 2, 1, 1)
    assert dev.gained == ["b@k2/x"] and dev.lost == ["a@k2/x"]
    assert (dev.false_before, dev.false_after) == (0, 1)
    # a case in only one run is neither gained nor lost
    assert dev.only_before == ["gone@k2/x"] and dev.only_after == ["new@k2/x"]
    assert (test.split, test.correct_before, test.correct_after, test.gained, test.lost) == ("test", 1, 1, [], [])
    # only applicable counterfactuals in both runs, and only those whose verdict changed
    assert [(f.outcome, f.kind, f.before, f.after) for f in d.counterfactual_flips] == [
        ("a@k4/x", "insert_rejected", False, True)]
    md = to_markdown(d)
    assert "| dev | 2 | 1 | 1 | 1 | 1 | 0 / 1 |" in md and "- a@k2/x" in md


def test_cli_reads_folders_and_refuses_other_files_in_one_line(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "cases.json").write_text(json.dumps(BEFORE))
    (tmp_path / "b.json").write_text(json.dumps(AFTER))
    cmd = [sys.executable, "-m", "quarry.cli", "eval", "cases-diff"]
    ok = subprocess.run([*cmd, str(tmp_path / "a"), str(tmp_path / "b.json"), "--json"], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["splits"][0]["lost"] == ["a@k2/x"]
    (tmp_path / "bad.json").write_text('{"summary": {}}')
    for other in (tmp_path / "missing.json", tmp_path / "bad.json"):
        r = subprocess.run([*cmd, str(other), str(tmp_path / "b.json")], capture_output=True, text=True)
        assert r.returncode == 2 and r.stdout == ""
        assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
