"""Session 29: opening hours written in words without "am" or "pm" ("from eight until twelve
and two until six") are clock times by the business-hours convention; numbers that count
something are not (invented: a cattery and a garden centre)."""

from functools import partial

import pytest

from quarry.core.evidence.sentences import clock_words
from quarry.core.evidence.statements import statements as statements_of

pytestmark = pytest.mark.unit

statements = partial(statements_of, tenant="purrbrook")


@pytest.mark.parametrize("text, times", [
    ("Cats are dropped off from eight until twelve and two until six.", ["08:00", "12:00", "14:00", "18:00"]),
    ("The garden centre is open from half past nine until five, Monday to Saturday.", ["09:30", "17:00"]),
    ("The cafe opens from nine to one at weekends.", ["09:00", "13:00"]),
])
def test_spelled_opening_hours_are_clock_times(text, times):
    assert [s.value for s in statements(text) if s.unit == "time_of_day"] == times


@pytest.mark.parametrize("text", [
    "Repairs take six to eight days.",
    "Each pen holds from one to two cats.",
    "Staff ratio is four to one in the kitten room.",
    "A stay is from two to three nights.",
])
def test_counts_are_not_clock_times(text):
    assert clock_words(text) == text


# Session 30: an hour "o'clock" is a clock time, by the part of the day it names or else by the
# afternoon for one to six (it was read as a count of "o'clock"); seven to eleven, either way in
# use ("open until eight o'clock", a first tee at "eight o'clock in the winter"), is left unread
@pytest.mark.parametrize("text, times", [
    ("A stay can be cancelled free of charge up to six o'clock the evening before.", ["18:00"]),
    ("Cats are collected after 9 o'clock in the morning.", ["09:00"]),
    ("Grooming starts at two o'clock.", ["14:00"]),
    ("Visiting ends at eight o'clock in the evening.", ["20:00"]),
])
def test_an_hour_oclock_is_a_clock_time(text, times):
    found = statements(text)
    assert [s.value for s in found if s.unit == "time_of_day"] == times
    assert not [s for s in found if "clock" in s.unit]


def test_an_hour_oclock_that_could_be_either_is_not_read():
    assert clock_words("On Thursdays the cattery stays open until eight o'clock.") == \
        "On Thursdays the cattery stays open until eight o'clock."
