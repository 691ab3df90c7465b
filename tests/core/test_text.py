"""The shared text helpers: one definition per concept (quarry/core/text/units.py, quarry/core/text/markdown.py)."""

import pytest

from quarry.core.rank.features import BASE_FEATURES, candidate_features
from quarry.core.text.markdown import interrupts_paragraph, opens_block, stands_alone
from quarry.core.text.units import (
    count_tokens,
    heading_text,
    heading_trail,
    identifiers_in,
    is_identifier,
    line_sentences,
    section_path,
    split_sentences,
    token_starts,
)
from quarry.core.records import Candidate, Envelope, Passage
from quarry.core.text.tokenizer import identifiers, is_lookup, tokenize

pytestmark = pytest.mark.unit


def test_count_tokens_words_and_punctuation():
    assert count_tokens("EUR-4471 at 16:00.") == 8
    assert count_tokens("   ") == 0
    text = "a bb, ccc"
    assert [text[i] for i in token_starts(text)] == ["a", "b", ",", "c"]
    assert token_starts(text, 2, 5) == [2, 4]


@pytest.mark.parametrize(
    "text,expected",
    [
        ("See e.g. the v2.3.1 note at 16:00. Then 3.5 units! Next J. Smith went. 42 is it.",
         ["See e.g. the v2.3.1 note at 16:00.", "Then 3.5 units!", "Next J. Smith went.", "42 is it."]),
        ("Is it done? Yes.", ["Is it done?", "Yes."]),
        ("lowercase. after period stays", ["lowercase. after period stays"]),
        ('He said "stop." Then left. The U.S. Army came.', ['He said "stop."', "Then left.", "The U.S. Army came."]),
    ],
)
def test_split_sentences(text, expected):
    assert split_sentences(text) == expected


def test_line_sentences_join_wrapped_lines_and_keep_rows_and_items_apart():
    text = ("The cutoff is **16:00** for\nEUR payouts. It moved.\n"
            "| EUR | 16:00 |\n| USD | 18:00 |\n- first item\n  wraps here\n# Heading\nnext line")
    assert line_sentences(text) == [
        "The cutoff is 16:00 for EUR payouts.", "It moved.", "| EUR | 16:00 |", "| USD | 18:00 |",
        "- first item wraps here", "# Heading", "next line",
    ]


def test_a_year_wrapped_to_the_start_of_a_line_continues_the_sentence():
    # CommonMark: an empty list item, or an ordered one not numbered 1, does not interrupt a paragraph
    text = ("The move was completed on 9 February\n2026. From that day charges flow in.\n\n"
            "- The bay reopened on 2 March\n2026.\n\nSteps:\n1. Book\n2. Pay\n\n"
            "Intro line\n2. not an item")
    assert line_sentences(text) == [
        "The move was completed on 9 February 2026.", "From that day charges flow in.",
        "- The bay reopened on 2 March 2026.", "Steps:", "1.", "Book", "2.", "Pay", "Intro line 2. not an item"]
    assert interrupts_paragraph("1. Book", "Steps:") and interrupts_paragraph("2. Pay", "1. Book")
    assert interrupts_paragraph("- item", "text") and not interrupts_paragraph("-", "text")
    assert not interrupts_paragraph("2026.", "on 2 March") and not interrupts_paragraph("2026. From then", "in March")


def test_a_wrapped_year_stays_in_its_paragraph_block():
    from quarry.core.ingest.chunk_blocks import markdown_blocks
    text = "Atrium went live on Monday 2 February\n2026. FixLog is read-only.\n\n- Item one ends 2 March\n2026. Still one.\n"
    kinds = [(b.kind, text[b.start:b.end]) for b in markdown_blocks(text, 0, len(text))]
    assert kinds == [("paragraph", "Atrium went live on Monday 2 February\n2026. FixLog is read-only."),
                     ("list", "- Item one ends 2 March\n2026. Still one.")]


def test_markdown_block_starts():
    assert all(opens_block(s) for s in ("# H", "```py", "~~~", "- item", "3. item", "| a |", "> quote"))
    assert not any(opens_block(s) for s in ("plain text", "#hashtag", "    ```", "2026 was"))
    assert stands_alone("| a |") and stands_alone("## H") and not stands_alone("- item")


@pytest.mark.parametrize("title,path,trail", [
    ("Refund policy", ("Refund Policy", "Exceptions"), ["Refund policy", "Exceptions"]),  # H1 restating the title
    ("Refund policy", ("Policy", "Exceptions"), ["Refund policy", "Policy", "Exceptions"]),
    ("", ("Policy", " ", "Exceptions "), ["Policy", "Exceptions"]),
    (" Runbook ", (), ["Runbook"]),
    ("", (), []),
])
def test_heading_trail(title, path, trail):
    assert heading_trail(title, path) == trail
    assert heading_text(title, path) == " > ".join(trail)
    assert section_path(title, path) == (trail[1:] if title.strip() else trail)


@pytest.mark.parametrize("token", ["INC2291", "SSO-104", "v2.3", "v2.3.1", "E-4471", "acme-9", "ord_4821",
                                   "reconcile_settlement", "4xx", "payout/batch"])
def test_identifiers(token):
    assert is_identifier(token)
    assert is_identifier(token.lower())
    # The tokenizer and the lexical leg agree: the token (lower-cased) is an identifier there too.
    assert token.lower() in identifiers(tokenize(f"see {token} now"))
    assert identifiers_in(f"see {token}, now") == [token.lower()]  # the learned ranker's ident_* features


@pytest.mark.parametrize("token", ["payout", "2291", "16:00", "e", "-", "v2.", "settlement_"])
def test_not_identifiers(token):
    assert not is_identifier(token)


def test_tokens_of_identifiers():
    # A mixed run is one token; a joined identifier is kept whole and split into its parts.
    assert tokenize("INC2291 SSO-104 v2.3") == ["inc2291", "sso-104", "sso", "104", "v2.3", "v2"]
    assert identifiers(tokenize("INC2291 SSO-104 v2.3")) == ["inc2291", "sso-104", "v2.3", "v2"]
    assert identifiers_in("INC2291 SSO-104 v2.3, and SSO-104 again") == ["inc2291", "sso-104", "v2.3"]


def test_inc2291_is_a_lookup_and_a_learned_identifier_feature():
    assert is_lookup(tokenize("INC2291"))
    assert not is_lookup(tokenize("the incident was closed yesterday"))
    p, q = _passage("a", "Ticket INC2291 tracks the outage."), _passage("b", "Ticket INC2292 tracks another one.")
    X = candidate_features("INC2291", [_candidate(p, 1), _candidate(q, 2)], [p, q])
    f, g = dict(zip(BASE_FEATURES, X[0])), dict(zip(BASE_FEATURES, X[1]))
    assert f["ident_query"] == 1 and f["ident_match"] == 1.0 and g["ident_match"] == 0.0


def _passage(doc_id: str, text: str) -> Passage:
    env = Envelope(doc_id=doc_id, version="1", tenant="t", title="", acl=("*",))
    return Passage(passage_id=f"{doc_id}@1#s.1", anchor="s.1", heading_path=(), parent_id=f"{doc_id}@1#s",
                   text=text, chunker_version="test", token_count=count_tokens(text), envelope=env)


def _candidate(p: Passage, rank: int) -> Candidate:
    return Candidate(passage_id=p.passage_id, doc_id=p.doc_id, row=rank, lexical_rank=rank, lexical_score=1.0,
                     fused_rank=rank, fused_score=1.0 / (60 + rank))
