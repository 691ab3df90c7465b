import pytest
from pydantic import ValidationError

from quarry.core.citations import (
    ABSTENTION_MESSAGE,
    ABSTENTION_REASONS,
    Claim,
    check_claim,
    check_claims,
    extract_numbers,
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
        "model_abstained",
        "invalid_decision",
        "budget_exhausted",
    }
    assert not any(r in ABSTENTION_MESSAGE for r in ABSTENTION_REASONS)


def test_normalise():
    assert normalise("  A\tB\n\nc ") == "a b c"
