"""Session 28: values written in words that help pages and wikis use where a policy writes
digits ("a couple of days", "two hundred guests", "a million pounds", "a full working
week", "21 nights"), and a help page's "No." before an instruction (invented: a rowing club
and a campsite)."""

from functools import partial

import pytest

from quarry.core.evidence.conflict import conflict, same_value
from quarry.core.evidence.statements import statements as statements_of

pytestmark = pytest.mark.unit

statements = partial(statements_of, tenant="oarsby")


def values(text: str) -> list[tuple[str, str]]:
    return [(s.unit, s.value) for s in statements(text)]


@pytest.mark.parametrize("text, unit, magnitude", [
    ("Up to two hundred guests can be seated in the boathouse for the regatta dinner.", "count:guest", 200.0),
    ("Members need a million pounds of public liability cover to row on the river.", "currency:GBP", 1e6),
    ("Book a sculling boat a couple of days ahead.", "duration", 2.0),
    ("Life jackets are checked every couple of hours on regatta day.", "duration", 2 / 24),
    ("Members may bring a couple of guests to a social paddle.", "count:guest", 2.0),
    ("Coaches reply to a booking request within a full working week.", "duration", 5.0),
    ("A touring stay at the campsite is at most 21 nights in a row.", "duration", 21.0),
])
def test_a_value_written_in_words_is_read(text, unit, magnitude):
    (s,) = [s for s in statements(text) if s.unit == unit]
    assert s.magnitude == pytest.approx(magnitude)


def test_a_number_word_before_a_multiplier_is_not_read_alone():
    # "two hundred guests" is 200 guests, never 100 (the multiplier read on its own)
    assert values("Up to two hundred guests can be seated in the boathouse.") == [("count:guest", "200 guest")]
    assert values("Three hundred members voted for the new boathouse.") == [("count:member", "300 member")]


def test_values_in_words_compare_with_the_same_values_in_digits():
    week = statements("Coaches reply to a booking request within a full working week.")[0]
    days = statements("Coaches reply to a booking request within 5 working days.")[0]
    assert same_value(week, days)
    nights = statements("A touring stay at the campsite is at most 21 nights in a row.")[0]
    weeks = statements("A touring stay at the campsite is at most three weeks in a row.")[0]
    assert same_value(nights, weeks)
    # a month is no three weeks: the help page's "a month" disputes the rules' "21 nights"
    assert conflict(statements("A touring stay at the campsite is at most 21 nights in a row."),
                    statements("A touring stay at the campsite is at most a month in a row.")) is not None


def test_a_help_pages_no_before_an_instruction_is_no_condition():
    from quarry.core.ingest.enrich_conditions import find_condition

    assert find_condition(["No. Stay off the water until you have been clear of a chest infection for two days, "
                           "and tell the captain before you come back."]) is None
    # an answer stating a state keeps its condition
    assert find_condition(["Yes, the old subscription stays until the move to the new booking system is "
                           "complete."]) == "until the move to the new booking system completes"
