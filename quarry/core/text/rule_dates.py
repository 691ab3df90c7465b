"""Rules that start on a date of their own, inside a document in force before it.

A memo may change one rule from a date and ask for something else at once::

    With effect from Wednesday 1 April 2026 the greenkeeping team may mow from 06:30.
    This is in place of the 07:00 start in section 4 of the policy. Diesel machinery
    still waits until 07:00.

    From now on the fuel store is checked every Friday before 15:00.

The date fronting a paragraph (after at most a short clause: "Following the insurer's
survey, from Monday 2 March 2026 ..."; "From that date:" after one) dates that paragraph's rule: every sentence of the
paragraph, and the list items a paragraph ending in a colon introduces, unless the sentence
(naming nothing the rule replaces) says what stays as it is ("still", "unchanged", "the rest of section 5 stands") or acts at
once ("from now on", "with immediate effect"). :func:`sentence_starts` labels each sentence
so; the build (:mod:`quarry.core.ingest.enrich_validity`) leaves such a memo in force from
publication when another part of it acts at once, and resolution
(:func:`quarry.core.evidence.rules.later_rules`) rejects it for a question about the dated
rule before that rule's date.
"""

from __future__ import annotations

import datetime as dt
import re
from functools import lru_cache
from typing import Literal, NamedTuple

from quarry.core.text.markdown import plain_sentence
from quarry.core.text.nlp import DATE, parse_date
from quarry.core.text.units import logical_lines, sentence_spans

__all__ = ["LIST_ITEM", "SentenceStart", "sentence_starts"]

Kind = Literal["dated", "stays", "now", "other"]

MAX_LEAD_WORDS = 15  # a clause fronting the date: "Following the equipment insurer's survey, from ..."
_FRONTED = re.compile(r"^\W*(?:(?P<lead>[^,.;:]{1,160}),\s*)?(?:from|with\s+effect\s+from|as\s+(?:of|from)|starting"
                      r"|beginning|effective(?:\s+from)?)\s+(?:(?:mon|tues|wednes|thurs|fri|satur|sun)day,?\s+)?(?:the\s+)?"
                      r"(?P<date>" + DATE + ")", re.IGNORECASE)
# acting at once: "From now on", "with immediate effect", "starting today"
_NOW = re.compile(r"\b(?:from\s+now\s+on|with\s+immediate\s+effect|effective\s+immediately|immediately|from\s+today"
                  r"|as\s+of\s+(?:today|now)|starting\s+(?:now|today)|straight\s+away|right\s+away)\b", re.IGNORECASE)
# saying what stays as it is: "Urgent referrals do not change", "The rest of section 2 stands"
_STAYS = re.compile(r"\b(?:still|unchanged|as\s+before|as\s+now|as\s+(?:they|it)\s+(?:are|is)|as\s+written"
                    r"|stands?|remains?|stays?|carr(?:y|ies)\s+on|nothing\s+else|the\s+rest\s+of|no\s+other"
                    r"|do(?:es)?\s+not\s+change|(?:is|are)\s+not\s+changing)\b", re.IGNORECASE)
# what the dated rule replaces: "This is in place of the 07:00 start", "Hourly testing takes the place of ..."
_REPLACES = re.compile(r"\b(?:in\s+place\s+of|takes?\s+the\s+place\s+of|instead\s+of|replac(?:es|ing)|supersed(?:es|ing))\b",
                       re.IGNORECASE)
LIST_ITEM = re.compile(r"^\s*(?:[-*+]\s|\d+[.)]\s|\|)")  # a list item or a table row


class SentenceStart(NamedTuple):
    """One sentence of a text, the date its rule starts (``dated`` only) and its kind:
    ``dated`` (in a paragraph fronted by a date), ``stays`` (says what stays as it is),
    ``now`` (acts at once) or ``other``."""

    sentence: str
    start: dt.date | None
    kind: Kind


# "From that date:" fronts a paragraph with the date last named
_THAT_DATE = re.compile(r"^\W*(?:from|with\s+effect\s+from|as\s+(?:of|from)|starting|beginning)\s+(?:that|this|the\s+same)"
                        r"\s+(?:date|day)\b", re.IGNORECASE)


def _fronted(plain: str, tenant: str, last: dt.date | None) -> dt.date | None:
    """The date fronting a sentence (its plain text), or the last one for "From that date"."""
    if last is not None and _THAT_DATE.match(plain):
        return last
    m = _FRONTED.match(plain)
    if m is None or (m.group("lead") and len(m.group("lead").split()) > MAX_LEAD_WORDS):
        return None
    return parse_date(m.group("date"), tenant=tenant)


@lru_cache(maxsize=20_000)
def sentence_starts(text: str, *, tenant: str) -> tuple[SentenceStart, ...]:
    """Every sentence of ``text`` (paragraphs, list items and table rows as
    :func:`~quarry.core.text.units.logical_lines` splits them), labelled with the date its
    rule starts when a date fronts its paragraph. ``tenant`` owns the text (dates are read
    in its conventions). Memoised per ``tenant``: resolution reads it for every passage of
    every question."""
    out: list[SentenceStart] = []
    carried: dt.date | None = None  # a dated paragraph ending in a colon dates the list after it
    last: dt.date | None = None  # the last date fronting a paragraph
    for line in logical_lines(text):
        sents = [line[a:b] for a, b in sentence_spans(line)]
        plains = [plain_sentence(s) for s in sents]
        dates = []
        for plain in plains:
            dates.append(_fronted(plain, tenant, last))
            last = dates[-1] or last
        first = next((d for d in dates if d is not None), None)
        if first is None and carried is not None and LIST_ITEM.match(line):
            first = carried
        current: dt.date | None = first  # sentences before the date are its paragraph's (the background)
        now = False
        for s, plain, d in zip(sents, plains, dates):
            if d is not None:
                current, now = d, False
                out.append(SentenceStart(s, d, "dated"))
            elif _NOW.search(plain):
                now = True
                out.append(SentenceStart(s, None, "now"))
            elif current is not None and not now and _REPLACES.search(plain):
                out.append(SentenceStart(s, current, "dated"))  # (what it replaces, though the rest stays)
            elif _STAYS.search(plain):
                out.append(SentenceStart(s, None, "stays"))
            elif now:
                out.append(SentenceStart(s, None, "now"))
            elif current is not None:
                out.append(SentenceStart(s, current, "dated"))
            else:
                out.append(SentenceStart(s, None, "other"))
        if first is not None and line.rstrip().endswith(":"):
            carried = current
        elif not LIST_ITEM.match(line):
            carried = None
    return tuple(out)
