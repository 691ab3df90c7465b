import pytest
from pydantic import ValidationError

from quarry.core.text.numbers import extract_numbers
from quarry.core.agent.citations import (
    ABSTENTION_MESSAGE,
    ABSTENTION_REASONS,
    Claim,
    check_claim,
    check_claims,

    normalise,
)

pytestmark = pytest.mark.unit

ACME = "acme-cutover@2#window"
ACME_TEXT = (
    "Until the Acme cutover completes, the settlement   batch for Acme\n"
    "runs daily at 16:00 UTC. Refunds above 2.5% need approval since 2026-01-15."
)
TEXTS = {ACME: ACME_TEXT, "other@1#a": "Something else entirely, nothing numeric here."}


def lookup(pid):
    return TEXTS.get(pid)


def run(claim, retrieved=(ACME,)):
    return check_claim(claim, set(retrieved), lookup)


def test_all_checks_pass_with_case_and_whitespace_differences():
    c = Claim(
        statement="Acme's settlement batch runs at 16:00 UTC.",
        passage_id=ACME,
        quote="the SETTLEMENT batch for acme runs daily at 16:00",
    )
    r = run(c)
    assert r.passed and r.failed_checks == ()


def test_acme_1500_claim_fails_number_check():
    c = Claim(
        statement="The Acme settlement batch runs at 15:00 UTC.",
        passage_id=ACME,
        quote="settlement batch for Acme runs daily",
    )
    r = run(c)
    assert r.retrieved and r.quote_length and r.quote_match
    assert not r.numbers and r.missing_numbers == ("15:00",)
    assert r.failed_checks == ("numbers",)


def test_not_retrieved_in_run_fails_check_1_and_text_is_not_read():
    read = []

    def spy(pid):
        read.append(pid)
        return lookup(pid)

    c = Claim(statement="Batch runs daily.", passage_id=ACME, quote="settlement batch for Acme runs")
    r = check_claim(c, {"other@1#a"}, spy)
    assert not r.retrieved and not r.passed
    assert read == []  # a foreign or leaked id is never looked up


def test_unknown_id_same_verdict_as_unretrieved_foreign_id():
    c1 = Claim(statement="x", passage_id="globex-pay@1#bands", quote="one two three four")
    c2 = Claim(statement="x", passage_id="nope@1#x", quote="one two three four")
    a, b = run(c1), run(c2)
    assert a.failed_checks == b.failed_checks == ("retrieved", "quote_match", "numbers")


def test_short_quote_fails_check_2():
    c = Claim(statement="Batch runs daily.", passage_id=ACME, quote="settlement batch for")
    r = run(c)
    assert r.failed_checks == ("quote_length",)
    # punctuation-only tokens do not count as words
    r2 = run(Claim(statement="x", passage_id=ACME, quote="settlement - batch -- for"))
    assert not r2.quote_length


def test_paraphrase_fails_check_3():
    c = Claim(statement="Batch runs daily.", passage_id=ACME, quote="the Acme batch for settlement runs daily")
    assert run(c).failed_checks == ("quote_match",)


def test_id_retrieved_but_text_gone_fails_closed():
    c = Claim(statement="Batch at 16:00.", passage_id="gone@1#x", quote="one two three four")
    r = run(c, retrieved=("gone@1#x",))
    assert r.retrieved and not r.quote_match and not r.numbers


@pytest.mark.parametrize(
    "statement,ok",
    [
        ("Refunds above 2.5% need approval.", True),
        ("Refunds above 2.5 percent need approval.", True),
        ("Refunds above 25% need approval.", False),
        ("Refunds above 2.5 need approval.", False),  # a bare 2.5 is not the percentage
        ("Approval is required since 2026-01-15.", True),
        ("Approval is required since 2026-01-16.", False),
        ("It runs at 16:00.", True),
        ("It runs at 16.", False),
        ("No numbers at all.", True),
    ],
)
def test_number_check(statement, ok):
    c = Claim(statement=statement, passage_id=ACME, quote="the settlement batch for Acme")
    assert run(c).numbers is ok


def test_extract_numbers_forms():
    assert extract_numbers("at 09:00 and 9:30, 1,000 items, 1.50 EUR, 15 %, 2026-01-15, E-4471") == (
        "9:00",
        "9:30",
        "1000",
        "1.50",
        "15%",
        "2026-01-15",
        "4471",
    )
    # a number is a whole token: 15 is not found inside 150
    assert "15" not in extract_numbers("150 days")


def test_report_needs_claims_and_all_passing():
    good = Claim(statement="At 16:00.", passage_id=ACME, quote="runs daily at 16:00 UTC")
    bad = Claim(statement="At 15:00.", passage_id=ACME, quote="runs daily at 16:00 UTC")
    assert check_claims([good], {ACME}, lookup).passed
    assert not check_claims([good, bad], {ACME}, lookup).passed
    assert not check_claims([], {ACME}, lookup).passed


def test_claim_forbids_extra_fields_and_reasons_and_message():
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        Claim(statement="s", passage_id=ACME, quote="q q q q", tenant="globex")
    assert set(ABSTENTION_REASONS) == {
        "no_visible_evidence",
        "citation_check_failed",
        "cites_rejected_evidence",
        "model_abstained",
        "invalid_decision",
        "budget_exhausted",
    }
    assert not any(r in ABSTENTION_MESSAGE for r in ABSTENTION_REASONS)


def test_normalise():
    assert normalise("  A\tB\n\nc ") == "a b c"


# ----------------------------------------------------------------------------- check 5

def test_citing_rejected_evidence_fails_the_fifth_check_only():
    c = Claim(statement="Acme's batch runs at 16:00 UTC.", passage_id=ACME,
              quote="the settlement batch for Acme runs daily at 16:00")
    ok = run(c)
    assert ok.passed and ok.not_rejected  # default: no resolution ran, old callers unchanged
    r = check_claim(c, {ACME}, lookup, rejected=frozenset({ACME}))
    assert not r.passed and r.failed_checks == ("not_rejected",)
    report = check_claims([c], {ACME}, lookup, rejected={ACME})
    assert not report.passed and report.abstention_reason == "cites_rejected_evidence"
    # Rejected elsewhere does not matter; and an ordinary failure keeps its own code.
    assert check_claims([c], {ACME}, lookup, rejected={"other@1#a"}).abstention_reason is None
    short = Claim(statement="Acme runs at 16:00.", passage_id=ACME, quote="runs daily")
    assert check_claims([short], {ACME}, lookup).abstention_reason == "citation_check_failed"
    # With both failures present the more specific code wins.
    assert check_claims([short, c], {ACME}, lookup, rejected={ACME}).abstention_reason == "cites_rejected_evidence"


def test_fifth_check_over_the_acme_decision(sample_docs):
    """The seed's failure: a perfectly quoted ticket comment whose exception has ended."""
    import datetime as dt

    from quarry.core.ingest.pipeline import prepare
    from quarry.core.records import Principal
    from quarry.core.evidence.resolve import resolve

    ps, _ = prepare([d for d in sample_docs if d.doc_id in (
        "settlement-policy", "settlement-runbook", "ticket-482-comment-17", "deploy-acme-cutover")])
    texts = {p.passage_id: p.text for p in ps}
    principal = Principal(tenant="acme", subject="u1", groups=frozenset({"all-staff"}))
    wrong = Claim(statement="Acme's EUR cutoff is 16:00.", passage_id="ticket-482-comment-17@1#top.1",
                  quote="Acme remains on the 16:00 cutoff until cutover")
    right = Claim(statement="Migrated tenants use the 15:00 EUR cutoff.", passage_id="settlement-policy@3#eur-cutoff.1",
                  quote="Migrated tenants use the 15:00 EUR cutoff")
    after = resolve(ps, principal, dt.date(2026, 2, 1))
    assert check_claims([right], texts, texts.get, after.rejected_ids).passed
    report = check_claims([wrong], texts, texts.get, after.rejected_ids)
    assert report.claims[0].failed_checks == ("not_rejected",)
    assert report.abstention_reason == "cites_rejected_evidence"
    # On 10 January the same claim governs and passes.
    before = resolve(ps, principal, dt.date(2026, 1, 10))
    assert check_claims([wrong], texts, texts.get, before.rejected_ids).passed
