"""Session 29: scope lets a lower authority beat a higher one only through a place written
as a name ("at Quayside"), or while it lasts a while; a standing help page tagged with the
topic asked about ("tyres") is no local rule, and authority decides (invented: a chain of
bike repair shops)."""

from __future__ import annotations

import datetime as dt

import pytest

from quarry.core.evidence.resolve import resolve
from quarry.core.ingest.pipeline import prepare
from quarry.core.records import Principal, SourceDocument

pytestmark = pytest.mark.unit

ORG = Principal(tenant="spokeworks", subject="u1", groups=frozenset({"all-staff"}))
DAY = dt.date(2026, 3, 10)


def doc(doc_id: str, text: str, **kw) -> SourceDocument:
    base = dict(doc_id=doc_id, tenant="spokeworks", acl=("all-staff",), text=text)
    base.update(kw)
    return SourceDocument(**base)


def rejected(d) -> dict[str, tuple[str, str | None]]:
    return {r.passage_id.split("@")[0]: (r.reason, (r.by or "").split("@")[0] or None) for r in d.rejected}


PRICES = doc("price-list", "Fitting a new inner tube costs GBP 15 per wheel.", doc_type="pricing",
             title="Workshop prices", entities=("spokeworks", "servicing", "brakes"))


def test_a_help_page_tagged_with_the_topic_asked_does_not_beat_the_price_list():
    faq = doc("customer-faq", "Fitting a new inner tube costs GBP 12 per wheel.", doc_type="help",
              title="Customer questions", entities=("spokeworks", "tyres", "servicing"))
    ps, _ = prepare([PRICES, faq])
    d = resolve(ps, ORG, valid_at=DAY, query="how much do the tyres people charge to fit an inner tube?")
    assert rejected(d) == {"customer-faq": ("subordinate_to", "price-list")}


def test_a_page_for_a_place_written_as_a_name_still_beats_it_there():
    page = doc("quayside-page", "At Quayside, fitting a new inner tube costs GBP 12 per wheel while the "
               "workshop is in the pop-up unit.", doc_type="page", title="Quayside pop-up workshop",
               entities=("quayside", "servicing"))
    ps, _ = prepare([PRICES, page])
    d = resolve(ps, ORG, valid_at=DAY, query="how much is an inner tube fitted at Quayside?")
    assert rejected(d) == {"price-list": ("subordinate_to", "quayside-page")}


# Session 30: of one authority, a policy tagged with the topic asked about ("wheel builds") is no
# narrower than a place's local rules; the place, written as a name, makes the local rules narrower.
BUILDS = doc("builds-policy", "A customer collects a finished wheel build within 14 days.", doc_type="policy",
             title="Wheel builds and repairs policy",
             entities=("spokeworks", "quayside", "millgate", "wheel-builds", "repairs"))
QUAYSIDE_RULES = doc("quayside-rules", "At Quayside a customer collects a finished wheel build within 7 days: "
                     "the unit has no storage.", doc_type="policy", title="Quayside - local rules for wheel builds",
                     entities=("quayside", "storage", "parking"))


def test_a_topic_asked_about_does_not_make_the_policy_narrower_than_a_places_rules():
    ps, _ = prepare([BUILDS, QUAYSIDE_RULES])
    d = resolve(ps, ORG, valid_at=DAY, query="how long do we keep a finished wheel build at Quayside?")
    assert rejected(d) == {"builds-policy": ("subordinate_to", "quayside-rules")}
    assert {s.passage_id.split("@")[0] for s in d.governing} == {"quayside-rules"}


# Session 30: a place named by its name alone, without the kind of place ("at Quayside" for
# "quayside-workshop"): the question asks about it, so its local rules are narrower there
@pytest.mark.parametrize("text, named", [
    ("how long do we keep a wheel build at Quayside?", {"quayside-workshop"}),
    ("is the Quayside workshop open on Sundays?", {"quayside-workshop"}),  # (named whole, too)
    ("Quayside staff ask about wheel builds", set()),  # the first word of a sentence is no name
    ("parking on Quayside Road for collections", set()),  # part of a longer name: another place
    ("how long at Millgate?", set()),  # two entities share the name: neither is meant
])
def test_a_place_named_by_its_name_alone(text, named):
    from quarry.core.evidence.conditions import named_by_head
    ents = ("spokeworks", "quayside-workshop", "millgate-store", "millgate-yard", "wheel-builds")
    assert named_by_head(text, ents) == named


def test_the_local_rules_of_a_place_named_alone_beat_the_general_policy_there():
    rules = doc("quayside-rules", "At Quayside a customer collects a finished wheel build within 7 days: "
                "the unit has no storage.", doc_type="policy", title="Quayside Workshop - local rules for wheel builds",
                entities=("quayside-workshop", "storage", "parking"))
    builds = doc("builds-policy", "A customer collects a finished wheel build within 14 days.", doc_type="policy",
                 title="Wheel builds and repairs policy",
                 entities=("spokeworks", "quayside-workshop", "millgate-store", "wheel-builds", "repairs", "storage"))
    ps, _ = prepare([builds, rules])
    d = resolve(ps, ORG, valid_at=DAY, query="how long do we keep a finished wheel build at Quayside?")
    assert rejected(d) == {"builds-policy": ("subordinate_to", "quayside-rules")}


def test_a_page_that_lasts_a_while_is_still_about_the_topic_it_is_tagged_with():
    # a recall page in force while the recall is open: for a question on its topic it is the
    # exception to the policy, although no place is named
    page = doc("pump-recall", "While the Airflo pump recall is open, a track pump is lent only against a GBP 20 "
               "deposit.", doc_type="page", title="Recall of the Airflo track pumps",
               entities=("track-pumps", "airflo"), condition="while the airflo pump recall is open")
    policy = doc("loans-policy", "A track pump is lent against a GBP 5 deposit.", doc_type="policy",
                 title="Loans and track pumps policy", entities=("spokeworks", "quayside-workshop", "loans"))
    ps, _ = prepare([policy, page])
    d = resolve(ps, ORG, valid_at=DAY, query="what deposit do we take for lending a track pump?")
    assert rejected(d) == {"loans-policy": ("subordinate_to", "pump-recall")}


