"""Owner, status and date facts in passage text (kind "owner", "status", "date"): the
other facts a contradiction search follows up, with the subject words around them.

Read by regular expressions, not a parse: their subjects are the stems of the words
around the fact (``WINDOW`` subject words either side).
"""

from __future__ import annotations

import re
from functools import lru_cache

from quarry.core.text.numbers import number_spans
from quarry.core.evidence.sentences import passage_sentences
from quarry.core.evidence.statement import Statement
from quarry.core.text.tokenizer import tokenize

__all__ = ["MIN_SHARED", "WINDOW", "predicates"]

MIN_SHARED = 2  # shared subject stems that make one subject for follow-up queries
WINDOW = 3  # subject words taken either side of a fact
_CURRENCY_LOWER = frozenset({"eur", "usd", "gbp", "chf", "jpy", "cad", "aud", "sek", "nok", "dkk", "pln"})
# Time zones and clock words qualify a value; they never make two subjects the same.
_NOT_SUBJECT = frozenset({"cet", "cest", "et", "est", "edt", "pt", "pst", "utc", "gmt", "uk", "am", "pm",
                          "time", "local", "until"}) | _CURRENCY_LOWER
# Function words the shared stop list keeps (bm25s's is short): they never name a subject.
_NOT_SUBJECT |= frozenset(tokenize(
    "per every each within up after before so still can were our your we you both one first next about over "
    "under least most more less than only also all any same from when which what who has have had do does "
    "january february march april may june july august september october november december "
    "monday tuesday wednesday thursday friday saturday sunday today"
))
_WORD = re.compile(r"[^\W\d_][\w'-]*", re.UNICODE)
# "EUR 6 per seat per month": the "per ..." run right after a value (and its currency).
_PER_RUN = re.compile(r"\A(?:\s*[A-Za-z]{3}\b)?((?:\s+per\s+[^\W\d_]+)+)", re.UNICODE)


def _per_run(text: str, end: int, seg_end: int) -> tuple[str, int]:
    """The "per ..." unit run after a value and where the subject words resume."""
    m = _PER_RUN.match(text[end:seg_end])
    return (m.group(1), end + m.end()) if m else ("", end)


@lru_cache(maxsize=100_000)
def _subject_stem(word: str) -> str | None:
    """The word's first token that can name a subject, or None."""
    return next((t for t in tokenize(word) if t not in _NOT_SUBJECT and not t.isdigit()), None)


def _subject_words(text: str, seg_start: int, seg_end: int, start: int, end: int) -> tuple[list[str], list[str]]:
    def window(words, last: bool) -> list[tuple[str, str | None]]:
        # Outward from the value, tokenizing only until WINDOW subject words are found
        # (a long sentence would otherwise tokenize every word for three of them).
        picked, n = [], 0
        for w in (reversed(words) if last else words):
            if n == WINDOW:
                break
            if w.lower() in _CURRENCY_LOWER:
                picked.append((w, None))  # in the query words, never in the subject
                continue
            stem = _subject_stem(w)
            if stem is not None:
                picked.append((w, stem))
                n += 1
        return picked[::-1] if last else picked

    left = window(_WORD.findall(text[seg_start:start]), last=True)
    right = window(_WORD.findall(text[_per_run(text, end, seg_end)[1]:seg_end]), last=False)
    both = left + right
    return [w for w, _ in both], [s for _, s in both if s is not None]


_PREDICATE = re.compile(r"\b(?:owner|owned\s+by|owns|status|effective|due|deadline|expires)\b", re.IGNORECASE)


@lru_cache(maxsize=20_000)
def predicates(text: str, *, tenant: str) -> tuple[Statement, ...]:
    """Owner, status and date statements (kind "owner", "status", "date"): the other
    facts a contradiction search follows up, with their subject words (memoised per
    ``tenant``, the text's owner)."""
    out: list[Statement] = []
    for seg in passage_sentences(text, tenant=tenant):
        n = len(seg)
        spans = [(m.start(), m.end(), m.group(0).split()[0].lower()) for m in _PREDICATE.finditer(seg)]
        spans += [(s, e, "date") for s, e, _, kind in number_spans(seg) if kind == "date"]
        for s, e, kind in sorted(spans):
            kind = {"owned": "owner", "owns": "owner", "due": "date", "deadline": "date", "expires": "date",
                    "effective": "date"}.get(kind, kind)
            words, stems = _subject_words(seg, 0, n, s, e)
            if kind in ("owner", "status"):
                words.append(seg[s:e].lower())  # the predicate itself belongs in the query
            if stems:
                out.append(Statement(subject=tuple(sorted(set(stems))), predicate=kind, value=seg[s:e], unit=kind,
                                     magnitude=None, words=tuple(words)))
    return tuple(out)
