"""Evidence cases: the shipped suite's shape, the runner over a real (hashing-embedded)
build of the sample corpus, the isolation gate on a forced leak, each counterfactual's
check, and the CLI's exit codes.

The counterfactual checks judge a resolver. So that each check's verdict is pinned
independently of the real one (``quarry/core/evidence/resolve.py``), those tests swap in small resolvers
written here: ``date_aware`` (effective dates, explicit supersession, "until X" ended by an
event naming X), ``first_wins`` (order-dependent, the failure insert_rejected exists to
catch) and ``select_all`` (decides nothing). Everything else runs the real path.
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from pathlib import Path

import pytest

from quarry.core.records import Decision, RejectedEvidence, SearchResult, SelectedEvidence, UnresolvedConflict
from quarry.eval import case_model, case_run, case_scoring
from quarry.eval import cases as C
from quarry.eval import counterfactuals as CF

pytestmark = [pytest.mark.unit]

SUITE = Path(__file__).resolve().parents[2] / "eval" / "cases" / "sample"


# --------------------------------------------------------------------------- the suite


def test_shipped_suite_covers_the_briefed_kinds():
    cases = case_model.load_cases(SUITE)
    assert len(cases) >= 40
    kinds = {k for c in cases for k in c.kinds}
    assert {"lexical-decoy", "semantic-decoy", "superseded-source", "conditional-exception",
            "unanswerable", "multi-hop", "authority-conflict"} <= kinds
    by_id = {c.id: c for c in cases}
    seed = by_id["acme-cutoff-after-cutover"]  # seed 000 §11.7, exactly
    assert seed.valid_at == dt.date(2026, 1, 19) and seed.nothing_unresolved
    assert set(seed.expected_selected) == {"settlement-policy", "deploy-acme-cutover"}
    assert {(r.id, r.reason, r.by) for r in seed.rejected} == {
        ("ticket-482-comment-17", ("condition_ended",), "deploy-acme-cutover"),
        ("settlement-runbook", ("superseded_by",), "settlement-policy")}
    twin = by_id["acme-cutoff-before-cutover"]
    assert twin.valid_at == dt.date(2026, 1, 10) and twin.expected_selected == ("ticket-482-comment-17",)
    assert len(by_id["globex-sso-okta-multi-hop"].queries) == 3
    assert all(c.decisive_terms for c in cases if not c.answerable)


def test_suite_ids_name_real_documents_of_the_right_tenant(sample_docs):
    docs = {d.doc_id: d.tenant for d in sample_docs}
    keys = {d.key for d in sample_docs}
    for c in case_model.load_cases(SUITE):
        own = list(c.minimum_evidence) + list(c.expected_selected) + [r.id for r in c.rejected] + [
            r.by for r in c.rejected if r.by] + list(c.unresolved) + list(c.not_selected) + list(c.relevant)
        for i in own:
            doc = i.split("#")[0].split("@")[0]
            assert docs.get(doc) == c.tenant, (c.id, i)
            if "@" in i:
                assert i.split("#")[0] in keys, (c.id, i)
        for f in c.foreign:
            assert docs.get(f) not in (None, c.tenant), (c.id, f)


def _write(tmp_path, text: str) -> Path:
    p = tmp_path / "bad.yaml"
    p.write_text(text)
    return p


@pytest.mark.parametrize("text, needle", [
    ("cases: [1, 2", "not valid YAML"),
    ("- just a list", "'cases:' list"),
    ("cases:\n  - id: x\n    kinds: [lookup]\n    task: abc\n    queries: [q]\n    tenant: acme\n"
     "    valid_at: 2026-01-01\n    answerable: true\n", "minimum_evidence"),
    ("cases:\n  - id: x\n    kinds: [unanswerable]\n    task: abc\n    queries: [q]\n    tenant: acme\n"
     "    valid_at: 2026-01-01\n    answerable: false\n", "decisive_terms"),
    ("cases:\n  - id: x\n    kinds: [lookup]\n    task: abc\n    queries: [q]\n    tenant: acme\n"
     "    valid_at: 2026-01-01\n    answerable: true\n    minimum_evidence: [a]\n"
     "    rejected: [{id: b, reason: stale}]\n", "rejected.0.reason"),
    ("cases:\n  - id: x\n    kinds: [nonsense]\n    task: abc\n    queries: [q]\n    tenant: acme\n"
     "    valid_at: 2026-01-01\n    answerable: true\n    minimum_evidence: [a]\n", "kinds"),
])
def test_invalid_case_files_raise_one_line(tmp_path, text, needle):
    with pytest.raises(case_model.CaseError) as e:
        case_model.load_cases(_write(tmp_path, text))
    msg = str(e.value)
    assert needle in msg and "\n" not in msg and "bad.yaml" in msg


# --------------------------------------------------------------------------- scoring against an oracle


def _case(**kw) -> case_model.EvidenceCase:
    base = dict(id="t", kinds=["lookup"], task="task", queries=["q"], tenant="acme", valid_at="2026-01-19",
                answerable=True, minimum_evidence=["policy"])
    return case_model.EvidenceCase.model_validate({**base, **kw})


def test_resolution_failures_name_each_wrong_verdict():
    case = _case(minimum_evidence=["policy", "deploy"],
                 rejected=[{"id": "comment", "reason": "condition_ended", "by": "deploy"},
                           {"id": "old", "reason": ["superseded_by"], "must_be_seen": False}])
    good = Decision(valid_at=dt.date(2026, 1, 19),
                    governing=(SelectedEvidence(passage_id="policy@3#a", reason="governs"),),
                    supporting=(SelectedEvidence(passage_id="deploy@1#s", reason="proves"),),
                    rejected=(RejectedEvidence(passage_id="comment@1#top", reason="condition_ended", by="deploy@1#s"),))
    assert case_scoring.resolution_failures(case, good) == []  # 'old' was never delivered, and need not be
    wrong_by = good.model_copy(update={"rejected": (
        RejectedEvidence(passage_id="comment@1#top", reason="condition_ended", by="policy@3#a"),)})
    assert case_scoring.resolution_failures(case, wrong_by) == [
        "comment: rejected as condition_ended by policy@3#a, expected condition_ended by deploy"]
    placeholder = Decision(valid_at=dt.date(2026, 1, 19), supporting=tuple(
        SelectedEvidence(passage_id=p, reason="supporting") for p in ("policy@3#a", "deploy@1#s", "comment@1#top")))
    assert case_scoring.resolution_failures(case, placeholder) == [
        "comment: expected rejected (condition_ended), got supporting"]
    conflict = good.model_copy(update={"unresolved": (UnresolvedConflict(passage_ids=("policy@3#a", "x@1#y"),
                                                                         reason="equal authority"),)})
    assert case_scoring.resolution_failures(case.model_copy(update={"nothing_unresolved": True}), conflict)[-1].startswith(
        "expected nothing unresolved")
    assert case_scoring.resolution_failures(case, conflict) == ["policy: expected selected, got unresolved"]


def test_ids_match_documents_versions_and_passages():
    assert case_scoring.matches("refund-policy", "refund-policy@2#refund-window.1")
    assert case_scoring.matches("refund-policy@2", "refund-policy@2#refund-window.1")
    assert not case_scoring.matches("refund-policy@1", "refund-policy@2#refund-window.1")
    assert not case_scoring.matches("refund", "refund-policy@2#a")
    assert case_scoring.matches("a@1#x", "a@1#x") and not case_scoring.matches("a@1#x", "a@1#y")


def test_decisive_terms_are_whole_words():
    assert case_scoring.holds_terms("| CHF | 14:00 CET |\nSettlement cutoff table", ["chf", "cutoff"])
    assert not case_scoring.holds_terms("CHFX cutoffs", ["CHF", "cutoff"])
    assert case_scoring.holds_terms("a credit memo was issued", ["credit memo"])


# --------------------------------------------------------------------------- the runner on a real build


@pytest.fixture(scope="module")
def hash_root(tmp_path_factory, sample_docs) -> str:
    """The sample corpus built in-process with the hashing embedder (no model: fast)."""
    from quarry.core.embed.embedders import HashingEmbedder
    from quarry.core.ingest.pipeline import build_corpus

    root = str(tmp_path_factory.mktemp("cases-index"))
    build_corpus(sample_docs, root, HashingEmbedder())
    return root


def _pick(*ids):
    by_id = {c.id: c for c in case_model.load_cases(SUITE)}
    return [by_id[i] for i in ids]


@pytest.mark.slow
def test_runner_scores_boundaries_on_the_real_path(hash_root):
    cases = _pick("acme-e4471-cause", "globex-inc-3107-root-cause", "initech-cad-cutoff", "acme-refund-ord-4821")
    run = C.run_suite(cases, hash_root, counterfactuals=False)
    out = {o.case_id: o for o in run.outcomes}
    e4471 = out["acme-e4471-cause"]
    assert e4471.candidates and e4471.delivered and e4471.candidate_recall == 1.0
    assert len(e4471.queries) == 2 and all(q.generation == 1 for q in e4471.queries)
    delivered = [p for q in e4471.queries for p in q.delivered]
    assert e4471.precision == pytest.approx(
        sum(case_run._any_rel(cases[0].relevant_ids, p) for p in delivered) / len(delivered))
    assert out["initech-cad-cutoff"].abstained is True and out["initech-cad-cutoff"].precision is None
    assert run.summary["isolation"] == "pass"
    dev = run.summary["splits"]["dev"]
    assert dev["unanswerable"] == 1 and dev["honest_abstention_rate"] == 1.0
    rows = {r["boundary"]: r for r in dev["boundaries"]}
    assert rows["candidates"]["of"] == 3  # unanswerable cases never enter the table
    assert rows["end_to_end"]["surviving"] == sum(o.first_lost is None for o in run.outcomes if o.answerable)


@pytest.mark.slow
def test_minimum_evidence_missing_from_candidates_is_the_first_loss(hash_root):
    case = _pick("acme-sev2-first-response")[0].model_copy(update={"minimum_evidence": ("treasury-accounts",)})
    run = C.run_suite([case], hash_root, counterfactuals=False)  # all-staff cannot read treasury-accounts
    o = run.outcomes[0]
    assert not o.candidates and o.first_lost == "candidates" and o.candidate_recall == 0.0
    assert o.failures[0] == "treasury-accounts: not among the candidates"


def select_all(passages, principal, valid_at=None, authority=None, *, query=None, facts=None, relevance=None):
    """A resolver that decides nothing (every passage supporting), like the placeholder."""
    return Decision(valid_at=valid_at or dt.date.today(), supporting=tuple(
        SelectedEvidence(passage_id=p.passage_id, reason="supporting") for p in passages))


def _with_resolver(resolver):
    """A search_fn whose decision comes from ``resolver`` over the delivered passages."""
    def fn(index, principal, request, embedder, settings, second_stage=None):
        res = case_run.run_search(index, principal, request, embedder, settings, second_stage)
        ps = [index.passage(e.passage_id, principal) for e in res.excerpts]
        return res.model_copy(update={"decision": resolver(ps, principal, request.valid_at)})
    return fn


@pytest.mark.slow
def test_a_selected_passage_with_the_decisive_terms_is_a_false_assertion(hash_root):
    case = _pick("acme-chf-cutoff-after-migration")[0]  # runbook v2's CHF row, left selected
    o = C.run_suite([case], hash_root, counterfactuals=False, search_fn=_with_resolver(select_all)).outcomes[0]
    assert o.abstained is False and o.asserted_by and all(p.startswith("settlement-runbook@2") for p in o.asserted_by)


@pytest.mark.slow
def test_isolation_gate_fails_on_a_foreign_candidate(hash_root):
    """A search that returns another tenant's passage (forced here) fails the run."""
    from quarry.core.index.shards import TenantIndex

    globex = TenantIndex.load(hash_root, "globex")
    foreign = globex.shards[0].passage_ids[0]

    def leaky(index, principal, request, embedder, settings, second_stage=None):
        res = case_run.run_search(index, principal, request, embedder, settings, second_stage)
        bad = res.candidates[0].model_copy(update={"passage_id": foreign, "doc_id": case_scoring.doc_of(foreign)})
        return res.model_copy(update={"candidates": (bad, *res.candidates[1:])})

    run = C.run_suite(_pick("acme-sev2-first-response"), hash_root, counterfactuals=False, search_fn=leaky)
    assert run.summary["isolation"] == "FAIL"
    assert run.outcomes[0].leaks[0].startswith(foreign)


@pytest.mark.slow
def test_isolation_gate_fails_on_an_acl_leak(hash_root):
    """A passage of the right tenant that the principal's groups cannot read is a leak too."""
    from quarry.core.index.shards import TenantIndex

    acme = TenantIndex.load(hash_root, "acme")
    hidden = next(p for sh in acme.shards for p in sh.passage_ids if p.startswith("treasury-accounts@"))

    def leaky(index, principal, request, embedder, settings, second_stage=None):
        res = case_run.run_search(index, principal, request, embedder, settings, second_stage)
        bad = res.candidates[0].model_copy(update={"passage_id": hidden, "doc_id": "treasury-accounts"})
        return res.model_copy(update={"candidates": (*res.candidates, bad)})

    run = C.run_suite(_pick("acme-sev2-first-response"), hash_root, counterfactuals=False, search_fn=leaky)
    assert run.summary["isolation"] == "FAIL" and hidden in run.outcomes[0].leaks[0]


# --------------------------------------------------------------------------- counterfactual checks


def date_aware(passages, principal, valid_at=None, authority=None, *, query=None, facts=None, relevance=None):
    """A minimal order-independent resolver: effective dates, explicit supersession,
    'until X' ended by a visible event whose description holds X's last word."""
    day = valid_at or dt.date.today()
    rejected: dict[str, RejectedEvidence] = {}
    ps = sorted(passages, key=lambda p: p.passage_id)
    for p in ps:
        e = p.envelope
        if e.effective_from and e.effective_from > day:
            rejected[p.passage_id] = RejectedEvidence(passage_id=p.passage_id, reason="not_yet_effective")
        elif e.effective_to and e.effective_to < day:
            rejected[p.passage_id] = RejectedEvidence(passage_id=p.passage_id, reason="no_longer_effective")
    live = [p for p in ps if p.passage_id not in rejected]
    for p in live:
        for q in live:
            if p.doc_id in q.envelope.supersedes and p.passage_id not in rejected:
                rejected[p.passage_id] = RejectedEvidence(passage_id=p.passage_id, reason="superseded_by",
                                                          by=q.passage_id)
        if p.envelope.condition:
            word = p.envelope.condition.split()[-1]
            for q in live:
                if any(word in ev.what and ev.on <= day for ev in q.envelope.events):
                    rejected.setdefault(p.passage_id, RejectedEvidence(passage_id=p.passage_id,
                                                                       reason="condition_ended", by=q.passage_id))
    return Decision(valid_at=day, rejected=tuple(rejected[k] for k in sorted(rejected)), supporting=tuple(
        SelectedEvidence(passage_id=p.passage_id, reason="supporting") for p in ps if p.passage_id not in rejected))


def first_wins(passages, principal, valid_at=None, authority=None, *, query=None, facts=None, relevance=None):
    """Order-dependent on purpose: the first passage governs, every other one is rejected."""
    ps = list(passages)
    return Decision(valid_at=valid_at, governing=(SelectedEvidence(passage_id=ps[0].passage_id, reason="first"),),
                    rejected=tuple(RejectedEvidence(passage_id=p.passage_id, reason="subordinate_to",
                                                    by=ps[0].passage_id) for p in ps[1:]))


@pytest.fixture(scope="module")
def acme_ctx(hash_root):
    """The seed's Acme evidence (policy v3, rollout record, ticket comment, runbook v2) as
    one case run would leave it, built from the real index's passages."""
    from quarry.core.index.shards import TenantIndex

    index = TenantIndex.load(hash_root, "acme")
    case = _pick("acme-cutoff-after-cutover")[0]
    principal = case.principal()
    first = {}
    for doc in ("ticket-482-comment-17", "settlement-runbook", "settlement-policy", "deploy-acme-cutover"):
        first[doc] = index.document(doc, principal)[0]
    delivered = list(first.values())

    def ctx(resolver):
        return case_run.CaseContext(case, index, principal, delivered, resolver(delivered, principal, case.valid_at))
    return ctx


@pytest.mark.slow
def test_date_aware_double_reproduces_the_seed_decision(acme_ctx):
    d = acme_ctx(date_aware).decision
    assert {(case_scoring.doc_of(r.passage_id), r.reason, case_scoring.doc_of(r.by)) for r in d.rejected} == {
        ("ticket-482-comment-17", "condition_ended", "deploy-acme-cutover"),
        ("settlement-runbook", "superseded_by", "settlement-policy")}
    assert case_scoring.resolution_failures(acme_ctx(date_aware).case, d) == []


@pytest.mark.slow
def test_remove_source_frees_what_the_removed_source_defeated(acme_ctx, monkeypatch):
    monkeypatch.setattr("quarry.core.evidence.resolve.resolve", date_aware)
    r = CF.remove_source(acme_ctx(date_aware))
    assert r.applicable and r.passed, r.detail
    assert "freed" in r.detail and "ticket-482-comment-17" in r.detail

    ctx = acme_ctx(date_aware)
    deploy = next(p.passage_id for p in ctx.delivered if p.doc_id == "deploy-acme-cutover")

    def stale(passages, principal, valid_at=None, authority=None, **kw):  # keeps citing the removed proof
        d = date_aware(passages, principal, valid_at)
        comment = next(p.passage_id for p in passages if p.doc_id == "ticket-482-comment-17")
        return d.model_copy(update={
            "supporting": tuple(s for s in d.supporting if s.passage_id != comment),
            "rejected": tuple(r for r in d.rejected if r.passage_id != comment) + (
                RejectedEvidence(passage_id=comment, reason="condition_ended", by=deploy),)})

    monkeypatch.setattr("quarry.core.evidence.resolve.resolve", stale)
    r = CF.remove_source(ctx)
    assert not r.passed and "deploy-acme-cutover: still rejected by the removed source" in r.detail


@pytest.mark.slow
def test_insert_rejected_catches_an_order_dependent_resolver(acme_ctx, monkeypatch):
    monkeypatch.setattr("quarry.core.evidence.resolve.resolve", date_aware)
    r = CF.insert_rejected(acme_ctx(date_aware))
    assert r.applicable and r.passed, r.detail
    monkeypatch.setattr("quarry.core.evidence.resolve.resolve", first_wins)
    ctx = acme_ctx(first_wins)
    r = CF.insert_rejected(ctx)
    assert r.applicable and not r.passed and "selected set changed" in r.detail


@pytest.mark.slow
def test_swap_dates_catches_a_resolver_that_ignores_dates(acme_ctx, monkeypatch):
    monkeypatch.setattr("quarry.core.evidence.resolve.resolve", date_aware)
    r = CF.swap_dates(acme_ctx(date_aware))
    assert r.applicable and r.passed, r.detail
    monkeypatch.setattr("quarry.core.evidence.resolve.resolve", select_all)
    r = CF.swap_dates(acme_ctx(select_all))
    assert r.applicable and not r.passed and "unchanged" in r.detail


def test_shift_dates_keeps_text_and_order():
    from quarry.core.records import Envelope, Event, Passage

    env = Envelope(doc_id="d", version="1", tenant="acme", acl=("*",), effective_from=dt.date(2026, 1, 1),
                   events=(Event(what="x happened", on=dt.date(2026, 1, 15)),))
    p = Passage(passage_id="d@1#a", anchor="a", parent_id="d@1#a", text="Effective 1 January.",
                chunker_version="t", token_count=3, envelope=env)
    q = CF.shift_dates(p, 19)
    assert q.text == p.text and q.envelope.effective_from == dt.date(2026, 1, 20)
    assert q.envelope.events[0].on == dt.date(2026, 2, 3) and q.envelope.effective_to is None


@pytest.mark.slow
def test_change_tenant_runs_the_real_search_and_catches_a_leak(hash_root):
    run = C.run_suite(_pick("acme-sev2-first-response"), hash_root, counterfactuals=False)
    ctx = run.contexts[0]
    from quarry.core.search.settings import SearchSettings

    loaded: dict = {}
    r = CF.change_tenant(ctx, hash_root, SearchSettings(), loaded)
    assert r.applicable and r.passed and "globex" in r.detail and "globex" in loaded

    own = ctx.delivered[0].passage_id

    def leaky(index, principal, request, embedder, settings, second_stage=None):
        res = case_run.run_search(index, principal, request, embedder, settings, second_stage)
        bad = res.candidates[0].model_copy(update={"passage_id": own})
        return res.model_copy(update={"candidates": (bad, *res.candidates[1:])})

    r = CF.change_tenant(ctx, hash_root, SearchSettings(), loaded, leaky)
    assert not r.passed and own in r.detail


# --------------------------------------------------------------------------- CLI


def _quarry(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "quarry.cli", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=600)


@pytest.mark.slow
def test_cli_reports_and_writes_files(hash_root, tmp_path):
    f = tmp_path / "few.yaml"
    f.write_text((SUITE / "initech.yaml").read_text())
    out = tmp_path / "report"
    p = _quarry("eval", "cases", str(f), "--index-root", hash_root, "--json", "--out", str(out))
    assert p.returncode == 0, p.stderr
    data = json.loads(p.stdout)
    assert data["summary"]["isolation"] == "pass" and data["summary"]["cases"] == len(case_model.load_cases(f))
    assert {c["kind"] for c in data["counterfactuals"]} == set(CF.KINDS)
    assert (out / "funnel.png").stat().st_size > 1000
    md = (out / "cases.md").read_text()
    assert "| Boundary | Outcomes surviving | Conditional rate | k=2 | k=4 | k=8 | What failure means |" in md
    assert "## Resolution correct by width and split" in md and "funnel.png" in md


@pytest.mark.slow
def test_cli_bad_input_is_one_line_and_exit_2(hash_root, tmp_path):
    bad = _write(tmp_path, "cases: [1, 2")
    for args, needle in [((str(bad), "--index-root", hash_root), "not valid YAML"),
                         ((str(tmp_path / "nope"), "--index-root", hash_root), "no such file or folder"),
                         ((str(SUITE), "--index-root", str(tmp_path / "empty")), "quarry build")]:
        p = _quarry("eval", "cases", *args)
        assert p.returncode == 2, (args, p.stdout, p.stderr)
        lines = [x for x in p.stderr.splitlines() if not x.startswith("[cases]")]
        assert len(lines) == 1 and needle in lines[0] and "Traceback" not in p.stderr


@pytest.mark.slow
def test_cli_exit_1_on_a_leak(hash_root, tmp_path, monkeypatch, capsys):
    from quarry.core.index.shards import TenantIndex
    from quarry.eval import report_cases

    foreign = TenantIndex.load(hash_root, "globex").shards[0].passage_ids[0]
    real = case_run.run_search

    def leaky(index, principal, request, embedder, settings, second_stage=None):
        res: SearchResult = real(index, principal, request, embedder, settings, second_stage)
        bad = res.candidates[0].model_copy(update={"passage_id": foreign})
        return res.model_copy(update={"candidates": (bad,)})

    monkeypatch.setattr(case_run, "run_search", leaky)
    f = tmp_path / "one.yaml"
    f.write_text("cases:\n" + "\n".join("  " + line for line in """- id: sev2
  kinds: [lookup]
  task: SEV2 first response
  queries: [SEV2 first response target]
  tenant: acme
  groups: [all-staff]
  valid_at: 2026-02-01
  answerable: true
  minimum_evidence: [incident-response-policy]""".splitlines()) + "\n")
    import argparse

    ap = argparse.ArgumentParser()
    report_cases.add_arguments(ap)
    rc = report_cases.run(ap.parse_args([str(f), "--index-root", hash_root, "--no-counterfactuals"]))
    assert rc == 1
    assert "Tenant isolation: FAIL" in capsys.readouterr().out
