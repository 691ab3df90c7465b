"""Evidence cases: the split / governing / also_groups fields, the width x principal sweep,
dev and test kept apart, governing-vs-supporting and related scoring, the one resolve()
call (with ``query=``), several --build sources, and the CLI's one-line errors."""

from __future__ import annotations

import argparse
import datetime as dt
import subprocess
import sys
from pathlib import Path

import pytest

from quarry.core.records import Decision, RejectedEvidence, RelatedEvidence, SelectedEvidence
from quarry.eval import case_model, case_run, case_scoring, case_summary
from quarry.eval import cases as C
from quarry.eval import report_cases as R

pytestmark = [pytest.mark.unit]

SUITE = Path(__file__).resolve().parents[2] / "eval" / "cases" / "sample"
DAY = dt.date(2026, 1, 19)


def _case(**kw) -> case_model.EvidenceCase:
    base = dict(id="t", kinds=["lookup"], task="task", queries=["q"], tenant="acme", valid_at="2026-01-19",
                answerable=True, minimum_evidence=["policy"])
    return case_model.EvidenceCase.model_validate({**base, **kw})


def _sel(pid: str, reason: str = "governs") -> SelectedEvidence:
    return SelectedEvidence(passage_id=pid, reason=reason)


# --------------------------------------------------------------------------- the new fields


def test_new_fields_default_and_load():
    c = _case()
    assert c.split == "dev" and c.governing is None and c.also_groups == () and c.expected_governing == ()
    c = _case(split="test", governing=["policy"], groups=["all-staff"], also_groups=[["all-staff", "support"], []])
    assert c.split == "test" and c.governing == ("policy",)
    assert c.principal_groups == (("all-staff",), ("all-staff", "support"), ())
    assert c.principal(groups=("support",)).groups == frozenset({"support"})
    assert case_model.outcome_id("x", 2, ("all-staff", "support")) == "x@k2/all-staff+support"
    assert case_model.outcome_id("x", 4, ()) == "x@k4/no-groups"


def test_sample_cases_are_the_dev_split():
    assert {c.split for c in case_model.load_cases(SUITE)} == {"dev"}


HEAD = ("cases:\n  - id: x\n    kinds: [lookup]\n    task: abc\n    queries: [q]\n    tenant: acme\n"
        "    groups: [all-staff]\n    valid_at: 2026-01-01\n    answerable: true\n    minimum_evidence: [a]\n")


@pytest.mark.parametrize("extra, needle", [
    ("    split: prod\n", "split"),
    ("    split: [dev]\n", "split"),
    ("    governing: a\n", "governing"),
    ("    also_groups: support\n", "also_groups"),
    ("    also_groups: [[support, 3]]\n", "also_groups"),
    ("    also_groups: [['  ']]\n", "non-blank"),
    ("    also_groups: [[all-staff]]\n", "repeats a principal"),
    ("    also_groups: [[support], [support]]\n", "repeats a principal"),
    ("    governing: [b]\n    rejected: [{id: b, reason: superseded_by}]\n", "both selected and rejected"),
])
def test_bad_new_fields_raise_one_line(tmp_path, extra, needle):
    f = tmp_path / "bad.yaml"
    f.write_text(HEAD + extra)
    with pytest.raises(case_model.CaseError) as e:
        case_model.load_cases(f)
    msg = str(e.value)
    assert needle in msg and "\n" not in msg and "bad.yaml" in msg and "'x'" in msg


def test_unanswerable_case_has_no_governing_ids():
    with pytest.raises(ValueError, match="governing"):
        _case(kinds=["unanswerable"], answerable=False, minimum_evidence=[], decisive_terms=["CAD"],
              governing=["policy"])


# --------------------------------------------------------------------------- scoring with the new record


def test_expected_governing_fails_when_only_supporting():
    case = _case(minimum_evidence=["policy", "deploy"], governing=["policy"])
    good = Decision(valid_at=DAY, governing=(_sel("policy@3#a"),), supporting=(_sel("deploy@1#s", "proves"),))
    assert case_scoring.resolution_failures(case, good) == []
    swapped = Decision(valid_at=DAY, governing=(_sel("deploy@1#s"),), supporting=(_sel("policy@3#a", "x"),))
    assert case_scoring.resolution_failures(case, swapped) == ["policy: expected governing, got supporting"]
    # without `governing`, supporting is enough for `selected`
    assert case_scoring.resolution_failures(_case(minimum_evidence=["policy", "deploy"]), swapped) == []


def test_related_is_neither_selected_nor_rejected():
    case = _case(minimum_evidence=["policy"], not_selected=["faq"])
    related = Decision(valid_at=DAY, governing=(_sel("policy@3#a"),),
                       related=(RelatedEvidence(passage_id="faq@1#a"),))
    assert case_scoring.resolution_failures(case, related) == ["faq: expected rejected or unresolved, got related"]
    outdated = related.model_copy(update={"related": (RelatedEvidence(passage_id="faq@1#a",
                                                                      outdated="superseded_by"),)})
    assert case_scoring.resolution_failures(case, outdated) == []  # outdated related: never citable, counts as rejected
    only_related = Decision(valid_at=DAY, related=(RelatedEvidence(passage_id="policy@3#a"),))
    # a case naming governing (or selected) evidence needs it governing or supporting; a
    # case written before the record had those fields meant "kept" by selected
    assert case_scoring.resolution_failures(_case(governing=["policy"]), only_related) == [
        "policy: expected governing, got related", "policy: expected selected, got related"]
    assert case_scoring.resolution_failures(_case(selected=["policy"]), only_related) == ["policy: expected selected, got related"]
    assert case_scoring.resolution_failures(_case(), only_related) == []
    # a must-reject id needs a real rejection with its code
    must = _case(rejected=[{"id": "faq", "reason": "superseded_by"}])
    assert case_scoring.resolution_failures(must, outdated) == [
        "faq: expected rejected (superseded_by), got related(outdated:superseded_by)"]
    assert case_scoring.decision_verdicts(outdated) == {"policy@3#a": "governing", "faq@1#a": "related"}


def test_verdict_precedence_matches_the_record():
    d = Decision(valid_at=DAY, governing=(_sel("a@1#x"),), supporting=(_sel("a@1#x", "s"), _sel("b@1#x", "s")),
                 rejected=(RejectedEvidence(passage_id="b@1#x", reason="superseded_by"),),
                 related=(RelatedEvidence(passage_id="c@1#x"), RelatedEvidence(passage_id="a@1#x")))
    v = case_scoring.decision_verdicts(d)
    assert v == {p: d.verdict(p) for p in v} == {"a@1#x": "governing", "b@1#x": "rejected", "c@1#x": "related"}


# --------------------------------------------------------------------------- the one resolve() call


def test_resolve_helper_passes_the_joined_queries(monkeypatch):
    seen = {}

    def new(passages, principal, valid_at=None, authority=None, *, query=None, facts=None, relevance=None):
        seen["query"] = query
        return Decision(valid_at=valid_at)

    monkeypatch.setattr("quarry.core.evidence.resolve.resolve", new)
    case = _case(queries=["first q", "second q"])
    assert case_run.case_query(case) == "first q second q"
    case_run.resolve_evidence([], case.principal(), DAY, case_run.case_query(case))
    assert seen["query"] == "first q second q"


# --------------------------------------------------------------------------- the sweep on a real build


@pytest.fixture(scope="module")
def hash_root(tmp_path_factory, sample_docs) -> str:
    from quarry.core.embed.embedders import HashingEmbedder
    from quarry.core.ingest.pipeline import build_corpus

    root = str(tmp_path_factory.mktemp("sweep-index"))
    build_corpus(sample_docs, root, HashingEmbedder())
    return root


def _pick(*ids):
    by_id = {c.id: c for c in case_model.load_cases(SUITE)}
    return [by_id[i] for i in ids]


@pytest.mark.slow
def test_sweep_runs_every_width_for_every_principal(hash_root):
    case = _pick("acme-treasury-bank")[0].model_copy(update={
        "groups": ("all-staff",), "also_groups": (("all-staff", "finance-admins"), ("support",))})
    widths = (2, 4, 8)
    run = C.run_suite([case], hash_root, widths=widths, counterfactuals=False)
    assert len(run.outcomes) == len(widths) * len(case.principal_groups)
    assert [o.id for o in run.outcomes] == [case_model.outcome_id(case.id, k, g) for g in case.principal_groups
                                            for k in widths]
    assert all(o.case_id == case.id and o.split == "dev" for o in run.outcomes)
    by = {(o.width, o.groups): o for o in run.outcomes}
    for k in widths:
        # also_groups really runs the other principal: only finance-admins can read the treasury runbook
        assert by[(k, ("all-staff",))].first_lost == "candidates"
        assert by[(k, ("all-staff", "finance-admins"))].candidates
        assert by[(k, ("support",))].first_lost == "candidates"
        assert all(len(q.delivered) <= k for q in by[(k, ("all-staff", "finance-admins"))].queries)
    s = run.summary
    assert s["outcomes"] == 9 and s["cases"] == 1 and s["isolation"] == "pass"
    assert s["splits"]["dev"]["by_width"]["2"]["answerable"] == 3


@pytest.mark.slow
def test_widths_case_uses_the_case_top_k(hash_root):
    case = _pick("acme-cutoff-after-cutover-wide")[0]
    run = C.run_suite([case], hash_root, counterfactuals=False)
    # run once (own top_k, own groups): the bare case id, as the promotion gate compares them
    assert [(o.id, o.width, o.groups) for o in run.outcomes] == [(case.id, 8, ("all-staff",))]
    other = case.model_copy(update={"also_groups": (("support",),)})
    assert [o.id for o in C.run_suite([other], hash_root, counterfactuals=False).outcomes] == [
        f"{case.id}@k8/all-staff", f"{case.id}@k8/support"]
    with pytest.raises(ValueError, match="widths"):
        C.run_suite([case], hash_root, widths=(0,), counterfactuals=False)


@pytest.mark.slow
def test_dev_and_test_are_never_blended(hash_root):
    dev = _pick("acme-sev2-first-response", "initech-cad-cutoff")
    test = [c.model_copy(update={"id": c.id + "-held-out", "split": "test"}) for c in dev[:1]]
    run = C.run_suite(dev + test, hash_root, widths=(2, 4), counterfactuals=False)
    s = run.summary
    assert set(s["splits"]) == {"dev", "test"}
    assert s["splits"]["dev"]["cases"] == 4 and s["splits"]["dev"]["unanswerable"] == 2
    assert s["splits"]["test"]["cases"] == 2 and s["splits"]["test"]["unanswerable"] == 0
    assert all((o.split == "test") == o.case_id.endswith("-held-out") for o in run.outcomes)
    # figures per split (and per width within it); the few pooled keys the promotion gate
    # reads (one case set against itself) are never reported
    assert "boundaries" not in s and "by_width" not in s and "failing_cases" not in s
    assert set(case_summary.POOLED_FOR_GATE) <= set(s) and s["answerable"] == 2 + 2
    assert set(s["resolution_by_width"]["2"]) == {"dev", "test"} and s["resolution_by_width"]["2"]["test"]["of"] == 1
    md = R.to_markdown(run)
    assert "## Split: dev" in md and "## Split: test" in md and "| Width | dev | test |" in md
    assert "2 answerable, 2 unanswerable" in md and "2 answerable, 0 unanswerable" in md
    assert "4 answerable" not in md and "/ 4 " not in md  # the pooled count (2 dev + 2 test) appears nowhere


@pytest.mark.slow
def test_a_related_passage_with_the_decisive_terms_is_no_assertion(hash_root):
    def relate_all(passages, principal, valid_at=None, authority=None, *, query=None, facts=None):
        return Decision(valid_at=valid_at, related=tuple(RelatedEvidence(passage_id=p.passage_id) for p in passages))

    def fn(index, principal, request, embedder, settings, second_stage=None):
        res = case_run.run_search(index, principal, request, embedder, settings, second_stage)
        ps = [index.passage(e.passage_id, principal) for e in res.excerpts]
        return res.model_copy(update={"decision": relate_all(ps, principal, request.valid_at)})

    case = _pick("acme-chf-cutoff-after-migration")[0]
    o = C.run_suite([case], hash_root, widths=(8,), counterfactuals=False, search_fn=fn).outcomes[0]
    assert o.decision.related and o.abstained is True and o.asserted_by == ()


@pytest.mark.slow
def test_counterfactuals_run_once_per_principal_at_the_case_width(hash_root):
    case = _pick("acme-sev2-first-response")[0].model_copy(update={"also_groups": (("all-staff", "support"),)})
    run = C.run_suite([case], hash_root, widths=(2, 8), counterfactuals=True)
    assert len(run.outcomes) == 4  # width 4 is not swept: its runs feed the counterfactuals only
    ids = sorted({r.case_id for r in run.counterfactuals})
    assert ids == [f"{case.id}@k4/all-staff", f"{case.id}@k4/all-staff+support"]
    assert len(run.counterfactuals) == 2 * 4 and {r.split for r in run.counterfactuals} == {"dev"}
    assert set(run.summary["counterfactuals"]) == {"dev"}


# --------------------------------------------------------------------------- several build sources


def _doc(folder: Path, tenant: str, doc_id: str, text: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{doc_id}.md").write_text(
        f"---\ndoc_id: {doc_id}\nversion: \"1\"\ntenant: {tenant}\ntitle: {doc_id}\ndoc_type: policy\n"
        f"acl: [\"*\"]\npublished_at: 2025-04-10\neffective_from: 2025-04-10\n---\n# {doc_id}\n\n{text}\n")


@pytest.fixture
def two_sources(tmp_path) -> tuple[Path, Path]:
    a, b = tmp_path / "src-a", tmp_path / "src-b"
    _doc(a / "alpha", "alpha", "alpha-refunds", "Alpha refunds are paid within 9 business days of approval.")
    _doc(b / "beta" / "policies", "beta", "beta-refunds", "Beta refunds are paid within 4 business days.")
    _doc(b / "gamma", "gamma", "gamma-refunds", "Gamma refunds are paid within 6 business days.")
    return a, b


def test_parse_sources_and_widths():
    assert R.parse_sources(["a,b", "c", " b ", ""]) == ["a", "b", "c"]
    assert R.parse_sources(None) == []
    assert R.parse_widths("2,4,8") == (2, 4, 8) and R.parse_widths("4, 4,2") == (4, 2)
    assert R.parse_widths("case") is None
    for bad in ("0,x", "", "0", "11", "2,,4", "-1"):
        with pytest.raises(ValueError, match="--widths"):
            R.parse_widths(bad)


def test_build_sources_builds_each_missing_tenant_once(tmp_path, two_sources):
    from quarry.core.index import layout
    from quarry.core.embed.embedders import HashingEmbedder

    root = str(tmp_path / "root")
    msgs: list[str] = []
    assert R.build_sources([str(s) for s in two_sources], root, {"alpha", "beta"}, HashingEmbedder(),
                           progress=msgs.append) is None
    assert {t: layout.current_generation(root, t) for t in ("alpha", "beta", "gamma")} == {
        "alpha": 1, "beta": 1, "gamma": 1}
    msgs.clear()
    assert R.build_sources([str(s) for s in two_sources], root, {"alpha"}, HashingEmbedder(),
                           progress=msgs.append) is None
    assert msgs == [] and layout.current_generation(root, "alpha") == 1  # nothing rebuilt
    err = R.build_sources([str(two_sources[0])], str(tmp_path / "r2"), {"alpha", "delta"}, HashingEmbedder(),
                          progress=msgs.append)
    assert err and "delta" in err and "\n" not in err
    assert R.build_sources([str(tmp_path / "nope")], root, set(), HashingEmbedder()).endswith("no such file or folder")


# --------------------------------------------------------------------------- CLI errors


def _run_cli(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    R.add_arguments(ap)
    return R.run(ap.parse_args(argv))


@pytest.mark.parametrize("extra, needle", [
    (["--split", "prod"], "--split 'prod'"),
    (["--widths", "0,x"], "--widths '0,x'"),
    (["--widths", "12"], "--widths '12'"),
    (["--build", "/no/such/source"], "no such file or folder"),
])
def test_cli_bad_options_are_one_line_exit_2(tmp_path, capsys, extra, needle):
    rc = _run_cli([str(SUITE), "--index-root", str(tmp_path / "root"), *extra])
    err = [x for x in capsys.readouterr().err.splitlines() if not x.startswith("[cases]")]
    assert rc == 2 and len(err) == 1 and needle in err[0] and err[0].startswith("quarry eval cases: error:")


def test_cli_missing_case_file_and_empty_split(tmp_path, capsys):
    assert _run_cli([str(tmp_path / "none.yaml"), "--index-root", str(tmp_path)]) == 2
    assert "no such file or folder" in capsys.readouterr().err
    assert _run_cli([str(SUITE), "--index-root", str(tmp_path), "--split", "test"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no test case" in err[0]


@pytest.mark.slow
def test_cli_builds_several_sources_and_filters_by_split(tmp_path, two_sources):
    a, b = two_sources
    f = tmp_path / "cases" / "refunds" / "cases.yaml"
    f.parent.mkdir(parents=True)
    f.write_text("""defaults:
  split: test
  groups: [all-staff]
  valid_at: 2026-02-01
  answerable: true
  kinds: [lookup]
cases:
  - id: alpha-refund-days
    task: How fast are Alpha refunds paid?
    queries: ["Alpha refunds paid within business days"]
    tenant: alpha
    minimum_evidence: [alpha-refunds]
    governing: [alpha-refunds]
    also_groups: [[support]]
  - id: beta-refund-days
    task: How fast are Beta refunds paid?
    queries: ["Beta refunds paid within business days"]
    tenant: beta
    split: dev
    minimum_evidence: [beta-refunds]
""")
    root = tmp_path / "root"
    p = subprocess.run([sys.executable, "-m", "quarry.cli", "eval", "cases", str(tmp_path / "cases"),
                        "--index-root", str(root), "--build", str(a), "--build", f"{b}", "--split", "test",
                        "--widths", "2,4", "--json", "--out", str(tmp_path / "rep")],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    import json

    data = json.loads(p.stdout)
    assert sorted(o["id"] for o in data["cases"]) == [
        "alpha-refund-days@k2/all-staff", "alpha-refund-days@k2/support",
        "alpha-refund-days@k4/all-staff", "alpha-refund-days@k4/support"]
    assert all(o["split"] == "test" and o["width"] in (2, 4) and o["groups"] in (["all-staff"], ["support"])
               for o in data["cases"])
    assert set(data["summary"]["splits"]) == {"test"}
    from quarry.core.index import layout

    assert {t: layout.current_generation(str(root), t) for t in ("alpha", "beta", "gamma")} == {
        "alpha": 1, "beta": 1, "gamma": 1}
    md = (tmp_path / "rep" / "cases.md").read_text()
    assert "## Split: test" in md and "## Split: dev" not in md


def test_width_invariance_counts_runs_whose_decision_is_the_same_at_every_width():
    def outcome(case_id, width, governing, rejected=()):
        d = Decision(valid_at=DAY, governing=tuple(_sel(p) for p in governing),
                     rejected=tuple(RejectedEvidence(passage_id=p, reason="superseded_by") for p in rejected))
        return case_run.CaseOutcome(id=f"{case_id}@k{width}", case_id=case_id, split="dev", width=width, groups=("g",),
                             kinds=("lookup",), tenant="t", answerable=True, queries=(), candidates=True,
                             candidate_recall=1.0, second_stage=True, delivered=True, resolution=True,
                             first_lost=None, precision=1.0, abstained=None, decision=d)
    outs = [outcome("a", 2, ["p@1#x"]), outcome("a", 4, ["p@1#y"]),  # another passage of the same document
            outcome("b", 2, ["p@1#x"]), outcome("b", 4, ["p@1#x", "q@1#x"], ["old@1#x"]),
            outcome("c", 4, ["p@1#x"])]  # one width only: not counted
    assert case_summary.width_invariance(outs) == {"runs": 2, "governing": 1, "rejected": 1, "unresolved": 2}
