"""Session 30: a rule that starts on a date of its own, inside a memo in force before it
(invented: a ferry operator). The date fronting a paragraph dates that paragraph's rule; a
memo that also asks for something at once is in force from publication, and answers a
question on its dated rule only from that rule's date."""

from __future__ import annotations

import datetime as dt

import pytest

from quarry.core.evidence.resolve import resolve
from quarry.core.ingest.enrich import enrich
from quarry.core.ingest.pipeline import prepare
from quarry.core.records import Principal, SourceDocument
from quarry.core.text.rule_dates import sentence_starts

pytestmark = pytest.mark.unit

CREW = Principal(tenant="saltways", subject="u1", groups=frozenset({"all-staff", "deck-crew"}))
APRIL, MAY = dt.date(2026, 4, 20), dt.date(2026, 5, 10)

POLICY = """# Boarding and deck safety policy

## 2. Boarding

The car deck opens for boarding 20 minutes before sailing. Foot passengers board from 10 minutes
before sailing.
"""

MIXED = """# Memo to the deck crew

From: Operations Manager. To: the deck crew only.

The new link span is quicker to set up. With effect from Monday 4 May 2026 the car deck opens for
boarding 30 minutes before sailing. This is in place of the 20 minutes in section 2 of the "Boarding and
deck safety policy", and supersedes that part of the policy only. Foot passengers still board from 10 minutes before.

From now on the lifejacket lockers on every vessel are checked every Sunday before 08:00.
"""

LABELLED = MIXED.replace("From now on the lifejacket lockers", "Lockers: the lifejacket lockers")
ONLY_DATED = MIXED.split("\n\nFrom now on")[0] + "\n"
# a clause before the date: the build reads no start of the document from it
LEAD = ONLY_DATED.replace("With effect from Monday 4 May 2026 the car deck",
                          "Following the harbour master's review, from Monday 4 May 2026 the car deck")
# background with numbers before the dated rule acts at nothing
BACKGROUND = ("# Memo to the deck crew\n\nIn March 3 sailings left 15 minutes late.\n\n"
              + ONLY_DATED.split("\n\n", 1)[1])


def _doc(doc_id, text, doc_type="memo", acl=("deck-crew",), published=dt.date(2026, 4, 13)):
    return SourceDocument(doc_id=doc_id, tenant="saltways", acl=acl, doc_type=doc_type, text=text,
                          title=text.splitlines()[0].lstrip("# "), published_at=published,
                          authority="policy", entities=("saltways", "car-deck"))


def test_sentence_starts_date_the_paragraph_a_date_fronts():
    kinds = [(s.kind, s.start) for s in sentence_starts(MIXED, tenant="saltways")]
    may = dt.date(2026, 5, 4)
    # heading, the two address sentences, the background, the rule, what it replaces, what stays, the lockers
    assert kinds == [("other", None), ("other", None), ("other", None), ("dated", may), ("dated", may),
                     ("dated", may), ("stays", None), ("now", None)]


def test_from_that_date_and_a_list_after_a_colon_carry_the_date():
    text = ("With effect from Monday 4 May 2026 the old booking rule is rescinded.\n\nFrom that date:\n\n"
            "- each missed sailing costs GBP 5;\n- refunds are made within 10 days.\n\nThe rest stands.\n")
    kinds = [(s.kind, s.start) for s in sentence_starts(text, tenant="saltways")]
    may = dt.date(2026, 5, 4)
    assert kinds == [("dated", may), ("dated", may), ("dated", may), ("dated", may), ("stays", None)]


@pytest.mark.parametrize("text, start", [
    (MIXED, None),  # the lockers are checked from now on: the memo is in force from publication
    (LABELLED, None),  # a labelled paragraph after the rule states its own value
    (ONLY_DATED, dt.date(2026, 5, 4)),  # all of it starts on 4 May
    (BACKGROUND, dt.date(2026, 5, 4)),  # background before the rule acts at nothing
])
def test_a_memo_acting_at_once_is_in_force_before_its_dated_rule(text, start):
    assert enrich(_doc("sw-memo", text)).effective_from == start


def _decide(memo_text, day, query):
    ps, _ = prepare([_doc("sw-policy", POLICY, doc_type="policy", acl=("all-staff",), published=dt.date(2025, 9, 1)),
                     _doc("sw-memo", memo_text)])
    d = resolve(ps, CREW, valid_at=day, query=query)
    gov = {s.passage_id.split("@")[0] for s in d.governing}
    rej = {r.passage_id.split("@")[0]: r.reason for r in d.rejected}
    return gov, rej


BOARDING = "How long before sailing does the car deck open for boarding?"


@pytest.mark.parametrize("memo", [MIXED, LEAD])
def test_the_dated_rule_does_not_answer_before_its_date(memo):
    gov, rej = _decide(memo, APRIL, BOARDING)
    assert gov == {"sw-policy"} and rej.get("sw-memo") == "not_yet_effective"
    gov, rej = _decide(memo, MAY, BOARDING)
    assert "sw-memo" in gov and "sw-policy" not in gov


def test_what_the_memo_asks_at_once_answers_before_the_dated_rule():
    gov, rej = _decide(MIXED, APRIL, "How often are the lifejacket lockers checked?")
    assert gov == {"sw-memo"} and "sw-memo" not in rej


def test_what_stays_as_it_is_is_no_dated_rule():
    # the memo restates the foot passengers' 10 minutes: it is not rejected as not yet in force for it
    gov, rej = _decide(MIXED, APRIL, "When do foot passengers board?")
    assert rej.get("sw-memo") != "not_yet_effective"
