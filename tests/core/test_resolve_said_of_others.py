"""Session 29: a passage that names the place asked about, but says what is asked only of
other places ("Quarry Street next, after a rehearsal ... Millbank last, no date yet"), does
not answer a question about that place's rehearsal (invented: climbing gyms moving their
booking system)."""

from __future__ import annotations

import datetime as dt

import pytest

from quarry.core.evidence.conditions import named_entities
from quarry.core.evidence.question import said_of_others
from quarry.core.evidence.resolve import resolve
from quarry.core.ingest.pipeline import prepare
from quarry.core.records import Principal, SourceDocument

pytestmark = pytest.mark.unit

ORG = Principal(tenant="cragline", subject="u1", groups=frozenset({"all-staff"}))
PLACES = ("cragline", "boulderpass", "quarry-street", "millbank", "dockside")

MOVE = """# Moving to BoulderPass

## Order of the move

1. Dockside first, planned for Monday 2 February 2026.
2. Quarry Street next, after a rehearsal in the BoulderPass test system. The date will be set in the change record.
3. Millbank last, once its new fibre line is in. No date yet.
"""


def _passage():
    doc = SourceDocument(doc_id="cl-move", tenant="cragline", acl=("all-staff",), doc_type="page", text=MOVE,
                         title="Moving to BoulderPass", entities=PLACES)
    ps, _ = prepare([doc])
    (p,) = [p for p in ps if "rehearsal" in p.text]
    return p


@pytest.mark.parametrize("query, others", [
    ("When is the BoulderPass switchover rehearsal for Millbank?", True),
    ("Millbank BoulderPass cutover rehearsal", True),
    ("When is the BoulderPass rehearsal for Quarry Street?", False),  # said of Quarry Street itself
    ("When does Dockside move to BoulderPass?", False),  # its own item states the date
    ("What is Millbank waiting for before it moves?", False),  # no word asked is said of another gym
])
def test_said_of_others(query, others):
    p = _passage()
    assert said_of_others(p, query, named_entities(query, PLACES)) is others


def test_the_move_plan_does_not_govern_a_question_on_another_places_rehearsal():
    p = _passage()
    query = "When is the BoulderPass switchover rehearsal for Millbank?"
    d = resolve([p], ORG, valid_at=dt.date(2026, 3, 1), query=query)
    assert p.passage_id not in {s.passage_id for s in d.governing}
    d = resolve([p], ORG, valid_at=dt.date(2026, 3, 1), query="When is the BoulderPass rehearsal for Quarry Street?")
    assert p.passage_id in {s.passage_id for s in d.governing}


def test_the_last_word_of_a_name_names_the_one_entity_ending_with_it():
    text = MOVE.replace("Millbank last", "The Millbank Annexe last")
    doc = SourceDocument(doc_id="cl-move", tenant="cragline", acl=("all-staff",), doc_type="page", text=text,
                         title="Moving to BoulderPass", entities=(*PLACES[:3], "millbank-annexe", "dockside"))
    ps, _ = prepare([doc])
    (p,) = [p for p in ps if "rehearsal" in p.text]
    query = "annexe BoulderPass cutover rehearsal"  # "the annexe": no other entity ends with it
    assert said_of_others(p, query, named_entities(query, p.envelope.entities))


def test_a_topic_entity_is_no_place_and_a_table_of_places_still_answers():
    # invented: a gym's price table; "prices" is a topic tag, written as no name
    text = "## Passes\n\n| Item | Price |\n| --- | --- |\n| Day pass, Quarry Street | GBP 9 a visit |\n" \
           "| Day pass, Millbank | GBP 11 a visit |\n"
    doc = SourceDocument(doc_id="cl-prices", tenant="cragline", acl=("all-staff",), doc_type="pricing", text=text,
                         title="Prices", entities=("cragline", "quarry-street", "millbank", "prices", "day-passes"))
    ps, _ = prepare([doc])
    (p,) = [p for p in ps if "Day pass" in p.text]
    query = "day pass prices per visit"
    assert not said_of_others(p, query, named_entities(query, p.envelope.entities))
