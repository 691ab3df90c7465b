"""Question scoping by meaning (issue 20): a survivor far closer to the question than every
answer its words chose answers too; what ended a passage is as close as the passage it
ended. The relevance map stands for the index's stored vectors against the question's
(``quarry.core.search.resolution.question_relevance``). Invented sentences only."""

from __future__ import annotations

import datetime as dt

import pytest

from quarry.core.evidence.question import _MEANING_MARGIN
from quarry.core.evidence.resolve import resolve
from quarry.core.ingest.pipeline import prepare
from quarry.core.records import Event, Principal, SourceDocument

pytestmark = pytest.mark.unit

D = dt.date
WHO = Principal(tenant="t", subject="u1", groups=frozenset({"all-staff"}))
QUESTION = "How long may members keep a borrowed book?"


def doc(doc_id: str, text: str, **kw) -> SourceDocument:
    base = dict(doc_id=doc_id, tenant="t", acl=("all-staff",), doc_type="policy", text=text)
    base.update(kw)
    return SourceDocument(**base)


def ids(ps, doc_id: str) -> str:
    (one,) = [p.passage_id for p in ps if p.doc_id == doc_id]
    return one


def corpus():
    ps, _ = prepare([
        # the answer, in other words than the question's
        doc("loans", "# Lending\n\nLoans run for three weeks and can be renewed twice."),
        # shares the question's words, answers something else
        doc("lockers", "# Lockers\n\nMembers may keep a locker key for 2 days; a borrowed key costs EUR 5."),
    ])
    return ps


def test_without_meaning_the_words_choose():
    ps = corpus()
    d = resolve(ps, WHO, D(2026, 3, 1), query=QUESTION)
    assert {g.passage_id for g in d.governing} == {ids(ps, "lockers")}


def test_a_passage_far_closer_in_meaning_answers_too():
    ps = corpus()
    loans, lockers = ids(ps, "loans"), ids(ps, "lockers")
    close = {loans: 0.62, lockers: 0.62 - 2 * _MEANING_MARGIN}
    d = resolve(ps, WHO, D(2026, 3, 1), query=QUESTION, relevance=close)
    assert loans in {g.passage_id for g in d.governing}
    # not when it is only about as close: the words' answer stands alone
    level = {loans: 0.50, lockers: 0.50 - _MEANING_MARGIN / 2}
    d = resolve(ps, WHO, D(2026, 3, 1), query=QUESTION, relevance=level)
    assert {g.passage_id for g in d.governing} == {lockers}


def test_what_ended_a_passage_is_as_close_as_the_passage_it_ended():
    ps, _ = prepare([
        doc("notice", "# Temporary loans\n\nWhile the reading room is closed, members may keep a borrowed "
                      "book for 6 weeks.", doc_type="page", condition="until the reading room reopens",
            published_at=D(2026, 1, 5)),
        doc("reopening", "# Change record\n\nThe reading room reopened on 20 February.", doc_type="deployment",
            published_at=D(2026, 2, 20),
            events=(Event(what="reading room reopens", on=D(2026, 2, 20)),)),
        doc("fees", "# Fees\n\nA replacement library card costs EUR 3.", doc_type="policy"),
    ])
    notice, reopening, fees = ids(ps, "notice"), ids(ps, "reopening"), ids(ps, "fees")
    plain = resolve(ps, WHO, D(2026, 3, 1), query=QUESTION)
    assert notice in {r.passage_id for r in plain.rejected}
    # the fee page is closer than the change record's own text, not than the notice it ended
    rel = {notice: 0.70, reopening: 0.20, fees: 0.40}
    d = resolve(ps, WHO, D(2026, 3, 1), query=QUESTION, relevance=rel)
    assert fees not in {g.passage_id for g in d.governing}
    assert {g.passage_id for g in d.governing} == {g.passage_id for g in plain.governing}


def test_a_generic_head_word_does_not_put_a_conflict_on_the_question():
    # "period" is in both the question ("trial period") and the dispute ("notice period"):
    # the notice periods dispute nothing the question asks
    ps, _ = prepare([
        doc("trial", "# Trial\n\nThe volunteer trial lasts 8 weeks. During the trial the notice period is 1 week."),
        doc("leave", "# Leave\n\nNotice periods are 3 days."),
    ])
    d = resolve(ps, WHO, D(2026, 3, 1), query="How long is the volunteer trial period?")
    assert ids(ps, "trial") in {g.passage_id for g in d.governing}
    assert not d.unresolved


def test_a_question_asks_for_a_kind_of_value():
    from quarry.core.evidence.question import answer_kinds
    assert answer_kinds("Until what time is bag storage free?") == {"time_of_day"}
    assert answer_kinds("How long after buying can I ask for a refund?") == {"duration"}
    assert answer_kinds("A parcel arrived twelve days late: can I still claim?") == {"duration"}
    assert answer_kinds("Is there a fee for a replacement card?") == {"currency"}
    assert answer_kinds("must a customer return a GBP 30 kettle?") == {"currency"}
    assert answer_kinds("Which cutoff applies to the Monday batch?") is None


def test_a_dispute_over_another_kind_of_value_is_not_the_questions():
    # the two guides dispute a price threshold; the question asks how long a claim may take
    ps, _ = prepare([
        doc("guide-a", "# Kettle claims\n\nKettle claims are decided within 3 working days. Kettles priced under "
            "EUR 20 are not collected.", doc_type="runbook"),
        doc("guide-b", "# Kettle returns\n\nKettles priced under EUR 35 are not collected.", doc_type="runbook"),
    ])
    d = resolve(ps, WHO, D(2026, 3, 1), query="How long does a kettle claim take to be decided?")
    assert not d.unresolved
    assert ids(ps, "guide-a") in {g.passage_id for g in d.governing}
    # asked about the threshold, the dispute is reported
    d = resolve(ps, WHO, D(2026, 3, 1), query="Up to what price are damaged kettles not collected?")
    assert d.unresolved


def test_two_scoped_passages_answer_a_question_naming_neither_by_authority():
    # the policy names the company, the page lists the company's stores: neither is narrower
    # for a question naming no store, so the policy's authority decides
    ps, _ = prepare([
        doc("price-policy", "# Price match\n\nA price match claim must be made within 10 days of purchase.",
            entities=("brightmart",)),
        doc("desk-wiki", "# Quick answers\n\nCustomers can claim a price match for 14 days after buying.",
            doc_type="page", entities=("brightmart", "northgate", "eastfield")),
    ])
    d = resolve(ps, WHO, D(2026, 3, 1), query="How long after buying can a customer claim a price match?")
    assert {r.passage_id: r.reason for r in d.rejected} == {ids(ps, "desk-wiki"): "subordinate_to"}
    assert [g.passage_id for g in d.governing] == [ids(ps, "price-policy")]
