"""A document named by its title in another's text: "With effect from 1 March this
standard stands in for the Contractor Induction Standard CI-01", "The fee schedule issued
in April 2025 is retired on that date". The build keeps such phrases
(``Envelope.supersedes_titles``, :mod:`quarry.core.ingest.enrich_supersession`); the graph and the
resolver match them against the titles of the tenant generation's documents, so a memo
written about "the car parking policy" needs no doc id.

A phrase names a title when it starts with the title's words (a leading "current" or
"previous" aside: "the GBP 80 monthly charge in the car parking policy" names a value *in*
that policy, not the policy), holds most of them (``COVERAGE``, at least two) and every
title word holding a digit (CI-01 is not CI-02; the 2025 schedule is not the 2026 one).
Stemmed words, no model."""

from __future__ import annotations

import re

from quarry.core.text.tokenizer import tokenize

__all__ = ["COVERAGE", "names_title"]

COVERAGE = 0.75  # share of a title's words a phrase must hold
_LEADING = frozenset(tokenize("current previous old existing earlier former present whole entire"))


# "the rule in section 5 of the Pitch and site rules", "clause 3 of the hire terms": a phrase
# naming a numbered part of a document names that part, not the document
_PART_OF = re.compile(r"\b(?:section|clause|paragraph|part|article|appendix|annex)\s+\d+[a-z]?(?:\.\d+)*\s+of\b", re.I)


def names_title(phrase: str, title: str) -> bool:
    """Whether ``phrase`` names the document titled ``title`` (not a numbered part of it)."""
    if _PART_OF.search(phrase):
        return False
    t = frozenset(tokenize(title))  # (not cached: titles are tenant text, and every cache is keyed by tenant)
    p = tokenize(phrase)
    while p and p[0] in _LEADING:
        p = p[1:]
    if len(t) < 2 or not p or p[0] not in t:
        return False
    shared = t & frozenset(p)
    return len(shared) >= 2 and len(shared) >= COVERAGE * len(t) and all(
        w in shared for w in t if any(c.isdigit() for c in w))
