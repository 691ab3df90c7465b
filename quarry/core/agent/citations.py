"""Deterministic citation checks for ``submit_answer`` (DESIGN §5).

Each claim ``{statement, passage_id, quote}`` passes five checks, all in code:

1. ``retrieved``: the passage id was retrieved for this principal in this run;
2. ``quote_length``: the quote has at least ``MIN_QUOTE_WORDS`` words;
3. ``quote_match``: the quote is a substring of the passage text after whitespace and
   case normalisation (a paraphrase fails);
4. ``numbers``: every number in the statement (integers, decimals, times such as 16:00,
   percentages, ISO dates) appears in the passage text as a number token;
5. ``not_rejected``: the run's evidence resolution (``core.resolve``) did not reject the
   cited passage. A perfectly quoted superseded runbook or an expired exception fails
   here; the abstention reason is then ``cites_rejected_evidence``.

Checks 1-4 prove the evidence exists and check 5 that it governs; none proves the quote
entails the claim. They are pure and never vary between runs, so they sit in front of any
model grader.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Sequence
from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

from quarry.core.text.numbers import extract_numbers

AbstentionReason = Literal[
    "no_visible_evidence",
    "citation_check_failed",
    "cites_rejected_evidence",
    "model_abstained",
    "invalid_decision",
    "budget_exhausted",
]
ABSTENTION_REASONS: tuple[str, ...] = AbstentionReason.__args__  # type: ignore[attr-defined]

# One sentence for every abstention: the reason code goes to the protected trace only, so
# "does not exist" and "you may not see it" read the same to the caller.
ABSTENTION_MESSAGE = "I can't answer this from the evidence available to you."

MIN_QUOTE_WORDS = 4

CheckName = Literal["retrieved", "quote_length", "quote_match", "numbers", "not_rejected"]
CHECK_NAMES: tuple[CheckName, ...] = get_args(CheckName)  # in the order the checks run


class Claim(BaseModel):
    """One claim of an answer: a statement, the passage that supports it, an exact quote."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    statement: str = Field(
        min_length=1,
        max_length=2000,
        description="One factual sentence of your answer. Every number in it must appear in the cited passage.",
    )
    passage_id: str = Field(
        min_length=1,
        max_length=400,
        description="The passage_id of a search result from this run that supports the statement.",
    )
    quote: str = Field(
        min_length=1,
        max_length=2000,
        description="At least 4 consecutive words copied exactly from that passage's text (case and spacing may differ).",
    )


class ClaimCheck(BaseModel):
    """The five verdicts for one claim, plus the statement numbers the passage lacks."""

    model_config = ConfigDict(frozen=True)

    passage_id: str
    retrieved: bool
    quote_length: bool
    quote_match: bool
    numbers: bool
    not_rejected: bool = True  # check 5; True where no resolution ran
    missing_numbers: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        return self.retrieved and self.quote_length and self.quote_match and self.numbers and self.not_rejected

    @property
    def failed_checks(self) -> tuple[str, ...]:
        return tuple(c for c in CHECK_NAMES if not getattr(self, c))


class CitationReport(BaseModel):
    model_config = ConfigDict(frozen=True)

    claims: tuple[ClaimCheck, ...]

    @property
    def passed(self) -> bool:
        # An answer with no claims proves nothing, so it cannot pass.
        return bool(self.claims) and all(c.passed for c in self.claims)

    @property
    def abstention_reason(self) -> AbstentionReason | None:
        """None when the answer passes; ``cites_rejected_evidence`` when a claim cites a
        passage the resolution rejected (the more specific code wins); else
        ``citation_check_failed``. The code is for the protected trace only."""
        if self.passed:
            return None
        if any(not c.not_rejected for c in self.claims):
            return "cites_rejected_evidence"
        return "citation_check_failed"


_WS = re.compile(r"\s+")


def normalise(text: str) -> str:
    """Whitespace collapsed to single spaces, case folded: the only normalisation check 3 allows."""
    return _WS.sub(" ", text).strip().casefold()


def quote_words(quote: str) -> int:
    # A "word" must hold a letter or digit, so padding a quote with dashes or bullets
    # does not reach the minimum.
    return sum(1 for w in quote.split() if any(ch.isalnum() for ch in w))


def check_claim(
    claim: Claim,
    retrieved_ids: Collection[str],
    passage_text: Callable[[str], str | None],
    rejected: Collection[str] = frozenset(),
) -> ClaimCheck:
    """Run the five checks on one claim; ``rejected`` holds the passage ids the run's
    evidence resolution rejected (``Decision.rejected_ids``).

    The text is looked up only for ids retrieved in this run, so a leaked foreign id is
    never read at all and fails checks 3 and 4 the same way a non-existent id does.
    """
    retrieved = claim.passage_id in retrieved_ids
    not_rejected = claim.passage_id not in rejected
    text = passage_text(claim.passage_id) if retrieved else None
    length_ok = quote_words(claim.quote) >= MIN_QUOTE_WORDS
    if text is None:
        return ClaimCheck(
            passage_id=claim.passage_id,
            retrieved=retrieved,
            quote_length=length_ok,
            quote_match=False,
            numbers=False,
            not_rejected=not_rejected,
            missing_numbers=extract_numbers(claim.statement),
        )
    quote = normalise(claim.quote)
    match_ok = bool(quote) and quote in normalise(text)
    have = set(extract_numbers(text))
    missing = tuple(dict.fromkeys(n for n in extract_numbers(claim.statement) if n not in have))
    return ClaimCheck(
        passage_id=claim.passage_id,
        retrieved=retrieved,
        quote_length=length_ok,
        quote_match=match_ok,
        numbers=not missing,
        not_rejected=not_rejected,
        missing_numbers=missing,
    )


def check_claims(
    claims: Sequence[Claim],
    retrieved_ids: Collection[str],
    passage_text: Callable[[str], str | None],
    rejected: Collection[str] = frozenset(),
) -> CitationReport:
    """All claims' checks; ``rejected``: the ids the run's resolution rejected (check 5)."""
    return CitationReport(claims=tuple(check_claim(c, retrieved_ids, passage_text, rejected) for c in claims))
