"""Equal authority, one side written against the other's value (issue 20): "EUR 12 instead
of EUR 18" overrides the EUR 18 it names; without such words the two stay unresolved.
Invented sentences only."""

from __future__ import annotations

import datetime as dt

import pytest

from quarry.core.evidence.disputes import replaces
from quarry.core.evidence.resolve import resolve
from quarry.core.evidence.statements import statements
from quarry.core.ingest.pipeline import prepare
from quarry.core.records import Principal, SourceDocument

pytestmark = pytest.mark.unit

WHO = Principal(tenant="t", subject="u1", groups=frozenset({"all-staff"}))
QUESTION = "What is the late return fee for a rented bike?"


def doc(doc_id: str, text: str, effective_from: dt.date | None = None) -> SourceDocument:
    return SourceDocument(doc_id=doc_id, tenant="t", acl=("all-staff",), doc_type="contract", text=text,
                          effective_from=effective_from)


def decide(amendment: str):
    ps, _ = prepare([doc("rental-terms", "# Fees\n\nThe late return fee for a rented bike is EUR 18."),
                     doc("amendment", "# Amendment\n\n" + amendment)])
    ids = {p.doc_id: p.passage_id for p in ps}
    return resolve(ps, WHO, dt.date(2026, 5, 1), query=QUESTION), ids


def test_the_side_that_names_the_other_value_as_replaced_wins():
    d, ids = decide("The late return fee for a rented bike is EUR 12 instead of EUR 18.")
    assert ids["amendment"] in {g.passage_id for g in d.governing}
    assert {(r.passage_id, r.reason, r.by) for r in d.rejected} >= {
        (ids["rental-terms"], "superseded_by", ids["amendment"])}  # it names the value it replaces
    assert not d.unresolved


def test_without_naming_the_value_equal_authority_stays_unresolved():
    d, ids = decide("The late return fee for a rented bike is EUR 12.")
    assert [set(u.passage_ids) for u in d.unresolved] == [{ids["amendment"], ids["rental-terms"]}]
    # naming another value as replaced is not naming this one
    d, ids = decide("The late return fee for a rented bike is EUR 12 instead of EUR 15.")
    assert [set(u.passage_ids) for u in d.unresolved] == [{ids["amendment"], ids["rental-terms"]}]


@pytest.mark.parametrize("text", [
    "Parking is now USD 6 an hour, down from USD 9.",
    "Parking costs USD 6 an hour rather than the usual USD 9.",
    "Parking is USD 6 an hour (formerly USD 9).",
])
def test_replacement_phrasings(text):
    (old,) = statements("Parking costs USD 9 an hour.", tenant="t")
    assert replaces(text, (old,))
    assert not replaces("Parking is USD 6 an hour.", (old,))


def test_at_equal_authority_the_rule_that_took_effect_later_governs():
    ps, _ = prepare([doc("rental-terms", "# Fees\n\nThe late return fee for a rented bike is EUR 18.",
                         dt.date(2025, 1, 1)),
                     doc("amendment", "# Amendment\n\nThe late return fee for a rented bike is EUR 12.",
                         dt.date(2026, 3, 1))])
    ids = {p.doc_id: p.passage_id for p in ps}
    d = resolve(ps, WHO, dt.date(2026, 5, 1), query=QUESTION)
    assert {g.passage_id for g in d.governing} == {ids["amendment"]} and not d.unresolved
    assert {(r.passage_id, r.reason, r.by) for r in d.rejected} >= {
        (ids["rental-terms"], "subordinate_to", ids["amendment"])}
    # before the amendment takes effect the earlier rule governs (the later is not yet in force)
    d = resolve(ps, WHO, dt.date(2026, 2, 1), query=QUESTION)
    assert {g.passage_id for g in d.governing} == {ids["rental-terms"]}
