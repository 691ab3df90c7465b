"""Session 29: a paragraph or list item that opens with a label in strong emphasis
("**Deliveries.** Drop off within two hours") states values of what the label names, so
its statements meet a policy's statements on that subject (invented: a bakery chain)."""

from functools import partial

import pytest

from quarry.core.evidence.conflict import conflict
from quarry.core.evidence.sentences import numeric_sentences_with_topics
from quarry.core.evidence.statements import statements as statements_of

pytestmark = pytest.mark.unit

statements = partial(statements_of, tenant="crumbwell")

WIKI = """# Shop floor wiki

**Refunds.** Pay within five days of the request.

- **Wholesale orders:** confirm them within 48 hours.

**Note** the ovens are cleaned every 3 days.
"""


def test_label_joins_the_subject_of_its_paragraph() -> None:
    by_value = {s.value: s for s in statements(WIKI)}
    assert "refund" in by_value["5 day"].subject
    assert {"wholesale", "order"} <= set(by_value["48 hour"].subject)


def test_bold_words_without_a_stop_are_no_label() -> None:
    topics = {s: t for s, _, t, _ in numeric_sentences_with_topics(WIKI, tenant="crumbwell")}
    assert topics["Note the ovens are cleaned every 3 days."] == ""
    assert topics["Pay within five days of the request."] == "Refunds"


def test_a_question_label_stays_a_question() -> None:
    text = "**Can I get a refund?** Yes, within 5 days of purchase.\n"
    topics = [t for _, _, t, _ in numeric_sentences_with_topics(text, tenant="crumbwell")]
    assert topics == ["Can I get a refund?"]


def test_labelled_wiki_line_conflicts_with_the_policy() -> None:
    policy = statements("# Refunds policy\n\nEvery refund is paid within 10 days of the request.")
    wiki = statements(WIKI)
    assert conflict(tuple(wiki), tuple(policy)) is not None
    # the same wiki line without its label says nothing of refunds
    bare = statements("Pay within five days of the request.")
    assert conflict(tuple(bare), tuple(policy)) is None


def test_a_list_items_words_before_a_colon_are_its_label():
    (first, *_) = statements("- Collection, Monday to Friday: 09:00 to 12:00 and 14:00 to 17:00.")
    assert {"collection", "monday", "friday"} <= set(first.subject)
    topics = [t for _, _, t, _ in numeric_sentences_with_topics("Note: the fee is GBP 15.\n", tenant="crumbwell")]
    assert topics == [""]  # a paragraph's colon is no list item's label
