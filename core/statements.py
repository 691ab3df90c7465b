"""Value statements in passage text, and when two passages state different values for
the same subject (the resolver's notion of a conflict, and the contradiction search's
notion of a subject).

A statement is one value (a time such as 16:00, a percentage, an amount such as EUR 10,
a count with its unit such as 120 days) with its *subject*: the stemmed content words
within ``WINDOW`` words either side of it in the same sentence or table row. Two
passages conflict about a subject when they state values of the same kind whose subjects
share at least ``MIN_SHARED`` words and the values differ. The rule is crude on purpose:
it is deterministic, it can be explained ("both attach a time to {tenant, cutoff}"),
and it never looks at relevance scores.

Not statements: dates (they say when, not what), years, times stamped onto a date
("2026-01-15 at 19:42" records when something happened), list ordinals and digits
inside identifiers (E-4471, v2.3.1, Q2).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal
from functools import lru_cache

from quarry.core.citations import number_spans
from quarry.core.text import line_sentences
from quarry.core.tokenizer import tokenize

WINDOW = 3
MIN_SHARED = 2

_CURRENCY = frozenset({"eur", "usd", "gbp", "chf", "jpy", "cad", "aud", "sek", "nok", "dkk", "pln"})
_CURRENCY_SIGN = {"€": "eur", "$": "usd", "£": "gbp"}
# Time zones and clock words qualify a value; they never make two subjects the same.
_NOT_SUBJECT = frozenset({"cet", "cest", "et", "est", "edt", "pt", "pst", "utc", "gmt", "uk", "am", "pm",
                          "time", "local", "until"}) | _CURRENCY
# Function words the shared stop list keeps (bm25s's is short): they never name a subject.
_NOT_SUBJECT |= frozenset(tokenize(
    "per every each within up after before so still can were our your we you both one first next about over "
    "under least most more less than only also all any same from when which what who has have had do does "
    "january february march april may june july august september october november december "
    "monday tuesday wednesday thursday friday saturday sunday today"
))
_STAMP_BEFORE = re.compile(r"\d{4}-\d{2}-\d{2}(?:\s*(?:at|,|T))?\s*$")
_MONTHS = "january|february|march|april|may|june|july|august|september|october|november|december"
_WORD = re.compile(r"[^\W\d_][\w'-]*", re.UNICODE)
# "EUR 6 per seat per month": the "per ..." run right after a value (and its currency).
_PER_RUN = re.compile(r"\A(?:\s*[A-Za-z]{3}\b)?((?:\s+per\s+[^\W\d_]+)+)", re.UNICODE)


@dataclass(frozen=True)
class Statement:
    kind: str  # "time", "percent", "amount:eur", "count:day", "number"
    value: str  # canonical (citations.number_spans)
    subject: frozenset[str]  # stemmed words around the value
    words: tuple[str, ...]  # the same words as written, for a follow-up query

    def to_json(self) -> dict:
        return {"kind": self.kind, "value": self.value, "subject": sorted(self.subject), "words": list(self.words)}

    @classmethod
    def from_json(cls, d: dict) -> "Statement":
        return cls(d["kind"], d["value"], frozenset(d["subject"]), tuple(d["words"]))


_LABEL_BEFORE = re.compile(r"\b[A-Z][A-Za-z]*\s$")
_MONTH_AFTER = re.compile(r"\s+(?:" + _MONTHS + r")\b", re.IGNORECASE)
_MONTH_BEFORE = re.compile(r"\b(?:" + _MONTHS + r")\s+$", re.IGNORECASE)
_YEAR = re.compile(r"(19|20)\d{2}")


def _skip(text: str, seg_start: int, start: int, end: int, kind: str, value: str) -> bool:
    before, after = text[start - 1:start] if start else "", text[end:end + 1]
    if kind == "date":
        return True
    if (before and (before.isalpha() or before in "-_./")) or (after and (after.isalpha() or after in "_")):
        return True  # inside an identifier: E-4471, v2.3.1, Q2, acme-9
    if kind == "number" and _LABEL_BEFORE.search(text[max(seg_start, start - 12):start]) \
            and text[max(seg_start, start - 4):start].strip().lower() not in _CURRENCY:
        return True  # a label or version after a name: "SAML 2.0", "Step 3", "Tier 1"
    if kind == "number" and (_MONTH_AFTER.match(text[end:end + 12])
                             or _MONTH_BEFORE.search(text[max(seg_start, start - 12):start])):
        return True  # a day of a month: "1 January", "January 15"
    if kind == "number" and _YEAR.fullmatch(value):
        return True  # a year
    if kind == "number" and not text[seg_start:start].strip(" \t-*|#>") and after in ".)":
        return True  # a list ordinal "1." or "2)"
    if kind == "time" and _STAMP_BEFORE.search(text[max(seg_start, start - 16):start]):
        return True  # a timestamp on a date
    return False


def _unit(text: str, seg_start: int, seg_end: int, start: int, end: int, kind: str) -> str:
    if kind in ("time", "percent"):
        return kind
    left = text[seg_start:start].rstrip()
    if left and left[-1] in _CURRENCY_SIGN:
        return f"amount:{_CURRENCY_SIGN[left[-1]]}"
    nxt = _WORD.findall(text[end:seg_end])
    # "per seat per month" belongs to the unit, not the subject: EUR 6 and EUR 39 per seat
    # per month are only comparable when the words before them agree.
    per = "".join(f"/{tokenize(w)[0]}" for w in re.findall(r"per\s+(\w+)", _per_run(text, end, seg_end)[0])
                  if tokenize(w))
    if nxt and nxt[0].lower() in _CURRENCY:
        return f"amount:{nxt[0].lower()}{per}"
    if prev := _WORD.findall(left[-8:]):
        if prev[-1].lower() in _CURRENCY:
            return f"amount:{prev[-1].lower()}{per}"
    if nxt and nxt[0].islower() and nxt[0].lower() != "per" and (toks := tokenize(nxt[0])):
        return f"count:{toks[0]}{per}"
    return f"number{per}"


def _per_run(text: str, end: int, seg_end: int) -> tuple[str, int]:
    """The "per ..." unit run after a value and where the subject words resume."""
    m = _PER_RUN.match(text[end:seg_end])
    return (m.group(1), end + m.end()) if m else ("", end)


@lru_cache(maxsize=100_000)
def _subject_stem(word: str) -> str | None:
    """The word's first token that can name a subject, or None."""
    return next((t for t in tokenize(word) if t not in _NOT_SUBJECT and not t.isdigit()), None)


@lru_cache(maxsize=20_000)
def _sentences(text: str) -> tuple[str, ...]:  # statements and predicates read the same text
    return tuple(line_sentences(text))


def _subject_words(text: str, seg_start: int, seg_end: int, start: int, end: int) -> tuple[list[str], list[str]]:
    def window(words, last: bool) -> list[tuple[str, str | None]]:
        # Outward from the value, tokenizing only until WINDOW subject words are found
        # (a long sentence would otherwise tokenize every word for three of them).
        picked, n = [], 0
        for w in (reversed(words) if last else words):
            if n == WINDOW:
                break
            if w.lower() in _CURRENCY:
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


def statements(text: str, entities=()) -> tuple[Statement, ...]:
    return _statements(text)


def statements_batch(texts, entities=()) -> list[tuple[Statement, ...]]:
    return [_statements(t) for t in texts]


def subject_keys(s: Statement) -> frozenset[str]:
    return s.subject


def conflicts(a: Statement, b: Statement) -> bool:
    return a.kind == b.kind and a.value != b.value and len(a.subject & b.subject) >= MIN_SHARED


@lru_cache(maxsize=20_000)
def _statements(text: str) -> tuple[Statement, ...]:
    """The value statements of ``text`` in order."""
    out: list[Statement] = []
    for seg in _sentences(text):
        n = len(seg)
        for s, e, value, kind in number_spans(seg):
            if _skip(seg, 0, s, e, kind, value):
                continue
            words, stems = _subject_words(seg, 0, n, s, e)
            if not stems:
                continue
            if kind != "time":
                value = format(Decimal(value.rstrip("%")).normalize(), "f") + ("%" if kind == "percent" else "")
            out.append(Statement(_unit(seg, 0, n, s, e, kind), value, frozenset(stems), tuple(words)))
    return tuple(out)


_PREDICATE = re.compile(r"\b(?:owner|owned\s+by|owns|status|effective|due|deadline|expires)\b", re.IGNORECASE)


@lru_cache(maxsize=20_000)
def predicates(text: str) -> tuple[Statement, ...]:
    """Owner, status and date statements (kind "owner", "status", "date"): the other
    facts a contradiction search follows up, with their subject words."""
    out: list[Statement] = []
    for seg in _sentences(text):
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
                out.append(Statement(kind, seg[s:e], frozenset(stems), tuple(words)))
    return tuple(out)


def conflict(a: tuple[Statement, ...], b: tuple[Statement, ...]) -> tuple[Statement, Statement] | None:
    """The first pair (in text order) where ``a`` and ``b`` attach different values of the
    same kind to the same subject, or None."""
    for sa in a:
        for sb in b:
            if sa.kind == sb.kind and sa.value != sb.value and len(sa.subject & sb.subject) >= MIN_SHARED:
                return sa, sb
    return None
