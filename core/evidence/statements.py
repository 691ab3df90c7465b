"""Value statements in passage text, and when two passages state different values for
the same subject (the resolver's notion of a conflict, and the contradiction search's
notion of a subject).

A :class:`Statement` is one value with what it is a value *of*, read from a dependency
parse rather than from a word window:

- **value, unit, magnitude**: a number and the unit word after it ("100 GB", "-80 °C",
  "a 30-day trial", "half a minute"), read and converted to a base unit by pint, so
  "2 weeks" and "14 days" have one magnitude (14, in days) and "24 hours" equals "1 day".
  Amounts carry their ISO currency ("€40" and "EUR 40" are both ``currency:EUR`` 40).
  Clock times ("15:00", "3 pm", "3:00 p.m. CET") are their own kind, ``time_of_day``,
  normalised by dateparser to minutes since midnight. A bare number that counts a noun
  ("10 seats") is ``count:seat``. A "per ..." rate ("100 requests per minute") is part of
  the unit, with time rates normalised to per day.
- **predicate**: what is stated. The governing verb ("passwords *expire* after 90 days"),
  or the relational noun the value belongs to ("the EUR *cutoff* is 16:00", "the price of
  the Pro plan is EUR 45", "a 1.5% *markup*"), mapped through :data:`SYNONYMS` so that
  "expire"/"rotate" or "cost"/"charge"/"price" are one predicate.
- **subject**: content lemmas of the noun phrase the predicate is about (the verb's
  subject or object, the relational noun and its modifiers, the holder of "X uses the
  cutoff").
- **scope**: the entities the sentence itself names: the passage's envelope entities
  found in it, and proper nouns the parse makes a subject, owner or "for"/"with"/"by"
  object (not a capitalised plural such as "Webhooks are ..."). No NER is run.

Two statements are about one subject when their concept bags agree (:func:`same_subject`):
predicate and subject lemmas mapped through :data:`SYNONYMS`, Snowball-stemmed and
stripped of a derivational suffix ("probation"/"probate", "baggage"/"bag"), generic head
nouns ("period", "interval", "size", "rate") falling back to their modifiers.

Not statements: dates, weekdays and years (spaCy's DATE entities that are no duration),
version numbers and labels ("SAML 2.0", "tier 2", "Ticket 482": a number after its noun
counts nothing), digits inside identifiers (E-4471, v2.3.1, acme-9, Sev-1), list
ordinals and timestamps on a date ("2026-01-15 at 19:42").

The parse is spaCy's ``en_core_web_sm`` from :func:`quarry.core.text.nlp.pipeline` (one
loader per process, NER excluded; configurable: ``nlp_name``). Only sentences holding a
free-standing number are parsed. Nothing here imports spaCy, pint or dateparser
at import time: ``import quarry.core`` stays light.
"""

from __future__ import annotations

import json
import math
import re
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Any

from quarry.core.agent.citations import number_spans
from quarry.core.text.nlp import find_dates
from quarry.core.text.units import line_sentences
from quarry.core.text.tokenizer import tokenize

__all__ = [
    "DEFAULT_NLP",
    "MIN_SHARED",
    "SYNONYMS",
    "Statement",
    "conflict",
    "conflicts",
    "load_nlp",
    "predicates",
    "same_subject",
    "statements",
    "statements_batch",
    "subject_keys",
]

DEFAULT_NLP = "en_core_web_sm"
MIN_SHARED = 2  # kept for predicates()/follow-up queries: shared stems that make one subject

# Predicates that state the same thing, each mapped to the group's first word.
SYNONYMS: tuple[tuple[str, ...], ...] = (
    ("expire", "expiry", "expiration", "rotate", "rotation", "change", "reset", "valid", "validity",
     "lifetime", "timeout", "time out", "max age"),
    ("retain", "retention", "keep", "store", "storage_time", "hold", "delete", "purge"),
    ("respond", "answer", "reply", "response", "response time"),
    ("cost", "charge", "price", "fee", "bill"),
    ("issue", "process", "refund"),
    ("pay", "payable", "payment term", "due"),
    ("limit", "allow", "cap", "maximum", "max", "exceed", "allowance", "weigh", "up"),
    ("length", "long"),
    ("submit", "submission", "deadline", "cutoff", "cut-off", "close"),
    ("notify", "notification", "inform"),
    ("retry", "retry interval"),
    ("settle", "settlement"),
    ("last", "duration", "take"),
    ("lock", "lockout"),
    ("enrol", "enroll"),
    ("entitle", "get", "receive", "include", "give"),
    ("interest", "interest rate", "pay interest"),
    ("store", "stored"),
    ("package", "parcel", "carton", "box", "packet"),
)
_CANON = {w: g[0] for g in SYNONYMS for w in g}

# Words that never tell two subjects apart (quantifiers, generic heads, time zones).
_GENERIC = frozenset("""
each every all any new current default minimum maximum max min total per our your their its
this that these those other same such only also least most more less first next last following
cet cest utc gmt et est edt pt pst uk local time timezone zone
""".split())
_TIMEZONES = frozenset("cet cest utc gmt et est edt pt pst bst uk".split())
_CURRENCY_CODES = frozenset(
    "EUR USD GBP CHF JPY CAD AUD SEK NOK DKK PLN CZK HUF CNY INR BRL MXN ZAR NZD SGD HKD KRW TRY RUB AED".split())
_CURRENCY_SIGNS = {"€": "EUR", "$": "USD", "£": "GBP", "¥": "JPY", "₹": "INR", "₩": "KRW"}
_CURRENCY_WORDS = {"euro": "EUR", "euros": "EUR", "dollar": "USD", "dollars": "USD", "pound": "GBP",
                   "pounds": "GBP", "franc": "CHF", "francs": "CHF", "yen": "JPY"}
_MERIDIEM = frozenset({"am", "pm", "a.m.", "p.m.", "a.m", "p.m"})
# Prepositions whose object says when, not what about.
_TEMPORAL_PREPS = frozenset({"until", "after", "before", "since", "during", "by", "within", "at", "in",
                             "every", "per", "up", "than"})
# A value reached through one of these says how long / when: it belongs to the verb, not to a noun.
_DURATION_PREPS = frozenset({"within", "after", "before", "every", "for", "until", "by", "in", "over"})
# "Orders over EUR 50 ship free": a threshold on the noun; the clause states what happens.
_THRESHOLD_PREPS = frozenset({"over", "above", "below", "under"})
# Words after a value that qualify it, never what it is a value of: "30 kg gross", "35 kg each".
_QUALIFIERS = frozenset("gross net each apiece total combined overall inclusive exclusive max maximum min minimum "
                        "apart later earlier".split())
# Discourse adverbs that never state what a linking verb's value is: "the limit is actually 50 kg".
_DISCOURSE = frozenset("actually really currently now still then only also just even already usually normally "
                       "typically generally always".split())
# A clause these mark is a reference point: "48 hours before the vehicle arrives" is when to book.
_REFERENCE_MARKS = frozenset({"before", "after", "until", "since", "once", "when"})
_SPAN_NOUNS = frozenset({"duration", "course", "remainder", "rest", "length"})
_ORDINAL = re.compile(r"(\d{1,2})(?:st|nd|rd|th)", re.IGNORECASE)
_WHEN_WORDS = frozenset({"today", "now", "tomorrow", "tonight", "yesterday", "currently"})
# Verbs that only link a subject to its value: the subject noun is the predicate.
_LINKING = frozenset({"be", "remain", "stay", "become", "equal", "total", "last", "run", "take", "apply"})
# Calendar units are approximate (a month is 28-31 days): values within 2% are one value.
_CALENDAR_TOLERANCE = 0.02
_NUMBER_WORDS = frozenset("one two three four five six seven eight nine ten eleven twelve fifteen twenty "
                          "thirty forty fifty sixty hundred thousand half dozen".split())
_NUMBER_WORD = re.compile(r"\b(?:" + "|".join(sorted(_NUMBER_WORDS)) + r")\b", re.IGNORECASE)
# A run of word characters holding a digit ("15:00", "30-day", "€40", but also "p53", "IL-23").
_DIGIT_RUN = re.compile(r"[\w.,:%-]*?\d[\w.,:%-]*")
_LETTER = re.compile(r"[^\W\d_]")
_CITATION = re.compile(r"\[\d+(?:\s*[,–-]\s*\d+)*\]")  # "[9]", "[3, 4]", "[12-15]"


@dataclass(frozen=True)
class Statement:
    """One value attached to a subject, as stated in one sentence."""

    subject: tuple[str, ...]  # content lemmas of the subject phrase, e.g. ("password",)
    predicate: str  # normalised lemma of what is stated: "expire", "cutoff", "cost"
    value: str  # canonical value: "15:00", "90 day", "EUR 40", "5%"
    unit: str  # compatibility key: "time_of_day", "duration", "currency:EUR", "percent", "count:seat"
    magnitude: float | None  # the value in the unit's base (days, minutes since midnight, ...)
    scope: tuple[str, ...] = ()  # entities the sentence names (lowercase)
    words: tuple[str, ...] = ()  # the clause's words as written, for a follow-up query

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, data: str | dict[str, Any]) -> Statement:
        d = json.loads(data) if isinstance(data, str) else dict(data)
        try:
            return cls(subject=tuple(d["subject"]), predicate=str(d["predicate"]), value=str(d["value"]),
                       unit=str(d["unit"]), magnitude=None if d.get("magnitude") is None else float(d["magnitude"]),
                       scope=tuple(d.get("scope", ())), words=tuple(d.get("words", ())))
        except KeyError as e:
            raise ValueError(f"a Statement needs subject, predicate, value and unit; missing {e}") from None


# ----------------------------------------------------------------------------- heavy parts, loaded lazily

_LOCK = threading.Lock()


def load_nlp(nlp_name: str = DEFAULT_NLP):
    """The spaCy pipeline ``nlp_name``: :func:`quarry.core.text.nlp.pipeline`'s, one per process
    (no named-entity recognition: scope comes from the envelope entities and the parse)."""
    from quarry.core.text.nlp import pipeline

    return pipeline(nlp_name)


@lru_cache(maxsize=1)
def _ureg():
    import pint

    return pint.UnitRegistry()


@lru_cache(maxsize=4096)
def _clock(text: str) -> int | None:
    """Minutes since midnight of a clock time such as "15:00", "3 pm" or "3:00 p.m."."""
    import dateparser

    t = text.lower().replace("a.m.", "am").replace("p.m.", "pm").replace("a.m", "am").replace("p.m", "pm")
    d = dateparser.parse(t, languages=["en"], settings={"STRICT_PARSING": False, "PREFER_DATES_FROM": "current_period",
                                                         "RELATIVE_BASE": __import__("datetime").datetime(2000, 1, 1)})
    return None if d is None else d.hour * 60 + d.minute


@lru_cache(maxsize=4096)
def _pint_base(unit_name: str) -> tuple[str, float, bool] | None:
    """(dimension key, factor to the base unit, calendar-approximate) for a quantulum unit name."""
    ureg = _ureg()
    name = unit_name.replace(" ", "_")
    try:
        q = ureg.Quantity(1.0, name)
    except Exception:  # noqa: BLE001 - pint raises several error types for unknown names
        return None
    dim = str(q.dimensionality)
    if dim == "[time]":
        return "duration", float(q.to("day").magnitude), unit_name in ("month", "year", "week")
    if dim == "dimensionless":
        factor, root = ureg.get_root_units(name)
        if str(root) == "bit":  # pint's bytes are dimensionless multiples of a bit
            return "[information]", float(factor) / 8, False
        return None
    if dim == "[temperature]":
        return dim, float("nan"), False  # offset units: converted per value
    return dim, float(q.to_base_units().magnitude), False


# ----------------------------------------------------------------------------- extraction

@dataclass(frozen=True)
class _Value:
    tokens: frozenset[int]
    value: str
    unit: str
    magnitude: float | None
    approx: bool = False


def _fmt(x: float) -> str:
    return format(round(x, 6), "g") if abs(x) < 1e15 else str(x)


_WORD_NUMBERS = {w: float(k) for k, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve".split())} | {
    "fifteen": 15.0, "twenty": 20.0, "thirty": 30.0, "forty": 40.0, "fifty": 50.0, "sixty": 60.0,
    "hundred": 100.0, "thousand": 1000.0, "dozen": 12.0}
_NUMERIC = re.compile(r"[-+−]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?")
# Parts of speech a unit word can have ("GB" and "°" are tagged PROPN by the small model).
_UNIT_POS = frozenset({"NOUN", "PROPN", "X", "SYM", "NUM"})


def _number(tok) -> float | None:
    """The number a token writes: "1,000", "-80", "0.5", "one"; None for anything else."""
    t = tok.text
    if _NUMERIC.fullmatch(t):
        return float(t.replace(",", "").replace("−", "-"))
    return _WORD_NUMBERS.get(tok.lower_)


def _unit_at(doc, j: int) -> tuple[str, int] | None:
    """(pint's unit name, last token) for a unit word starting at token ``j``: the text as
    written first ("MB" is a megabyte, "mb" a millibarn), then its lemma ("minutes")."""
    t = doc[j]
    if t.pos_ not in _UNIT_POS or t.is_stop or t.like_num:
        return None
    if t.text == "°" and j + 1 < len(doc) and doc[j + 1].text in ("C", "F"):
        return _pint_name("°" + doc[j + 1].text), j + 1
    for cand in (t.text, t.lemma_.lower()):
        name = _pint_name(cand)
        if name is not None:
            return name, j
    return None


@lru_cache(maxsize=4096)
def _pint_name(word: str) -> str | None:
    """pint's canonical name for a unit word that measures something, or None."""
    if not word or not (word[0].isalpha() or word[0] == "°"):
        return None
    try:
        name = _ureg().get_name(word)
    except Exception:  # noqa: BLE001 - pint raises several error types for unknown names
        return None
    return name if _pint_base(name) is not None else None


def _is_code_token(tok) -> bool:
    t = tok.text
    return (any(c.isalpha() for c in t) and any(c.isdigit() for c in t)) or t.count(".") >= 2  # E-4471, 2.3.1


def _values(doc) -> list[_Value]:
    """The values a parsed sentence states, in text order."""
    text = doc.text
    date_tokens = {t.i for s, e, _ in find_dates(doc.text) for t in doc if t.idx < e and t.idx + len(t.text) > s}
    taken: set[int] = set()
    out: list[_Value] = []

    # 1. Clock times: "16:00", "3 pm", "3:00 p.m.".
    for tok in doc:
        if tok.i in taken:
            continue
        nxt = doc[tok.i + 1] if tok.i + 1 < len(doc) else None
        is_colon = re.fullmatch(r"\d{1,2}[:.]\d{2}", tok.text) is not None and ":" in tok.text
        mer = nxt is not None and nxt.lower_ in _MERIDIEM and tok.like_num
        glued = re.fullmatch(r"\d{1,2}(?::\d{2})?(?:am|pm)", tok.lower_) is not None
        if not (is_colon or mer or glued):
            continue
        if tok.i > 0 and re.fullmatch(r"\d{4}-\d{2}-\d{2}", doc[tok.i - 1].text):
            continue  # a timestamp on a date
        if tok.i > 1 and doc[tok.i - 1].lower_ in ("at", "t") and re.fullmatch(r"\d{4}-\d{2}-\d{2}", doc[tok.i - 2].text):
            continue
        span = [tok.i] + ([nxt.i] if mer else [])
        minutes = _clock(" ".join(doc[i].text for i in span))
        if minutes is None:
            continue
        # the time zone that qualifies it belongs to the value's tokens
        j = span[-1] + 1
        if j < len(doc) and doc[j].lower_ in _TIMEZONES:
            span.append(j)
        taken.update(span)
        out.append(_Value(frozenset(span), f"{minutes // 60:02d}:{minutes % 60:02d}", "time_of_day", float(minutes)))

    # 1b. Days of the month: "the 18th of the month", "the 22nd of each month" (a recurring
    #     day, unlike a date, which names its month).
    for tok in doc:
        m = _ORDINAL.fullmatch(tok.text)
        if tok.i in taken or m is None or tok.i + 3 >= len(doc):
            continue
        a, b, c = doc[tok.i + 1], doc[tok.i + 2], doc[tok.i + 3]
        if a.lower_ == "of" and b.lower_ in ("the", "each", "every", "a") and c.lemma_.lower() == "month":
            span = [tok.i, a.i, b.i, c.i]
            taken.update(span)
            n = int(m.group(1))
            out.append(_Value(frozenset(span), f"day {n}", "day_of_month", float(n)))

    # 2. Amounts: a number next to a currency code, sign or word.
    for tok in doc:
        if tok.i in taken or not tok.like_num or _is_code_token(tok):
            continue
        prev = doc[tok.i - 1] if tok.i > 0 else None
        nxt = doc[tok.i + 1] if tok.i + 1 < len(doc) else None
        cur = None
        span = [tok.i]
        if prev is not None and (prev.text in _CURRENCY_CODES or prev.text in _CURRENCY_SIGNS):
            cur = _CURRENCY_SIGNS.get(prev.text, prev.text)
            span.insert(0, prev.i)
        elif nxt is not None and (nxt.text in _CURRENCY_CODES or nxt.lower_ in _CURRENCY_WORDS):
            cur = _CURRENCY_WORDS.get(nxt.lower_, nxt.text)
            span.append(nxt.i)
        elif tok.text[:1] in _CURRENCY_SIGNS:
            cur = _CURRENCY_SIGNS[tok.text[:1]]
        if cur is None:
            continue
        try:
            amount = float(tok.text.lstrip("".join(_CURRENCY_SIGNS)).replace(",", ""))
        except ValueError:
            continue
        taken.update(span)
        out.append(_Value(frozenset(span), f"{cur} {_fmt(amount)}", f"currency:{cur}", amount))

    # 3. Quantities: a number and the unit word after it, read by pint ("100 GB", "-80 °C",
    #    "a 30-day trial", "half a minute"); else a count of the noun it modifies.
    for tok in doc:
        if tok.i in taken or _is_code_token(tok):
            continue
        amount = _number(tok)
        j = tok.i + 1
        if amount is None or (tok.lower_ == "half" and j < len(doc) and doc[j].lower_ in ("a", "an")):
            if tok.lower_ != "half":
                continue
            amount, j = 0.5, j + (j < len(doc) and doc[j].lower_ in ("a", "an"))
        if j < len(doc) and doc[j].tag_ == "HYPH":
            j += 1  # "30-day"
        if j >= len(doc):
            got = None
        elif doc[j].text in ("%", "percent", "per cent"):
            taken.update({tok.i, j})
            out.append(_Value(frozenset({tok.i, j}), f"{_fmt(amount)}%", "percent", amount))
            continue
        else:
            got = _unit_at(doc, j)
        if got is None:
            if tok.like_num:
                v = _count(doc, tok.i, amount, date_tokens)
                if v is not None:
                    taken.update(v.tokens)
                    out.append(v)
            continue
        name, last = got
        base = _pint_base(name)
        dim, factor, approx = base
        if dim == "[temperature]":
            mag = float(_ureg().Quantity(amount, name).to("kelvin").magnitude)
        else:
            mag = amount * factor
        span = frozenset(range(tok.i, last + 1))
        taken.update(span)
        out.append(_Value(span, f"{_fmt(amount)} {name}", dim, mag, approx))
    out.sort(key=lambda v: min(v.tokens))
    return [_with_rate(doc, v) for v in out]


def _count(doc, i: int, value: float, date_tokens: set[int]) -> _Value | None:
    """A number that counts the noun after it ("10 seats", "5 failed login attempts")."""
    tok = doc[i]
    if i in date_tokens:
        return None  # a year or a day of a month
    head = tok.head
    if tok.dep_ not in ("nummod", "quantmod") or head.i <= i or head.pos_ not in ("NOUN",):
        return None  # "SAML 2.0", "tier 2", "Ticket 482": a label, not a count
    if head.lower_ in _MERIDIEM:
        return None
    dur = _pint_base(head.lemma_.lower())
    if dur is not None and dur[0] == "duration":  # "2 business days", "25 vacation days"
        return _Value(frozenset({i, head.i}), f"{_fmt(value)} {head.lemma_.lower()}", "duration", value * dur[1],
                      dur[2])
    if i == 0 or (i == 1 and doc[0].is_punct):
        if i + 1 < len(doc) and doc[i + 1].text in (".", ")"):
            return None  # list ordinal
    return _Value(frozenset({i}), f"{_fmt(value)} {head.lemma_.lower()}", f"count:{head.lemma_.lower()}", value)


def _with_rate(doc, v: _Value) -> _Value:
    """Add a "per ..." rate to the unit: "100 requests per minute" is count:request/duration
    with its magnitude per day, "EUR 6 per seat" is currency:EUR/seat."""
    heads = {doc[i] for i in v.tokens} | {doc[i].head for i in v.tokens}
    if v.unit.startswith("count:"):
        heads |= {doc[i].head.head for i in v.tokens}
    for h in sorted(heads, key=lambda t: t.i):
        for child in h.children:
            if child.lower_ == "per" and child.i > min(v.tokens):
                obj = next((c for c in child.children if c.dep_ == "pobj"), None)
                if obj is None:
                    continue
                per = _pint_base(obj.lemma_.lower())
                if per and per[0] == "duration" and v.magnitude is not None and v.unit != "duration":
                    return _Value(v.tokens | {child.i, obj.i}, f"{v.value}/{obj.lemma_.lower()}",
                                  f"{v.unit}/duration", v.magnitude / per[1], v.approx or per[2])
                return _Value(v.tokens | {child.i, obj.i}, f"{v.value}/{obj.lemma_.lower()}",
                              f"{v.unit}/{obj.lemma_.lower()}", v.magnitude, v.approx)
    return v


def _root(doc, v: _Value):
    toks = [doc[i] for i in sorted(v.tokens)]
    for t in toks:
        if t.head.i not in v.tokens or t.head.i == t.i:
            return t
    return toks[0]


def _phrase(tok, exclude: set[int]) -> list:
    """The content tokens of the noun phrase headed by ``tok``: its compounds, modifiers
    and "of"-objects (not determiners, numbers or the value)."""
    out = [tok]
    for c in tok.children:
        if c.i in exclude:
            continue
        if c.dep_ in ("compound", "amod", "nmod", "poss", "npadvmod") and c.pos_ in ("NOUN", "PROPN", "ADJ", "VERB"):
            out += _phrase(c, exclude)
        elif c.dep_ == "prep" and c.lower_ in ("of", "for", "on") and c.i > tok.i:
            for g in c.children:
                if g.dep_ == "pobj" and g.i not in exclude and g.pos_ in ("NOUN", "PROPN"):
                    out += _phrase(g, exclude)
    return out


def _args(verb, exclude: set[int], skip: Iterable = ()) -> list:
    """The noun-phrase arguments of ``verb`` (subject, object, prepositional objects that
    say what about), as tokens."""
    skip_ids = {t.i for t in skip}
    out = []
    for c in verb.children:
        if c.i in exclude or c.i in skip_ids:
            continue
        if c.dep_ in ("nsubj", "nsubjpass", "dobj", "attr") and _nounish(c):
            out += _phrase(c, exclude)
        elif c.dep_ in ("prep", "dative") and c.lower_ not in _TEMPORAL_PREPS:
            for g in c.children:
                if g.dep_ == "pobj" and g.lemma_.lower() in _SPAN_NOUNS:
                    continue  # "for the duration of the migration": when, not what about
                if g.dep_ == "pobj" and g.i not in exclude and g.pos_ in ("NOUN", "PROPN"):
                    out += _phrase(g, exclude)
    return out


def _nounish(tok) -> bool:
    """A noun, or a plural noun the small model tagged as a verb ("inspects returns within 7
    days": "returns" as the object of a verb)."""
    return tok.pos_ in ("NOUN", "PROPN") or (tok.pos_ == "VERB" and tok.tag_ == "VBZ"
                                              and tok.dep_ in ("dobj", "nsubj", "nsubjpass", "pobj"))


def _within(tok, ids: set[int]) -> bool:
    return any(t.i in ids for t in tok.subtree)


def _anchor(doc, v: _Value):
    """(predicate token, subject tokens) for a value, or None when it attaches to nothing."""
    r = _root(doc, v)
    exclude = set(v.tokens) | {t.i for i in v.tokens for t in doc[i].children if t.dep_ in ("det", "quantmod")}
    # "30 days of annual leave", "100 GB of storage": the measured noun (not in "within 45
    # days of receipt", where it is the point the span counts from, nor in "25% of the fee").
    counted_from = r.dep_ == "pobj" and r.head.lower_ in _DURATION_PREPS
    for c in r.children:
        if (c.dep_ == "prep" and c.lower_ == "of" and not counted_from and v.unit != "percent"
                and c.i not in v.tokens):
            obj = next((g for g in c.children if g.dep_ == "pobj" and g.pos_ == "NOUN"), None)
            if obj is not None:
                return obj, _phrase(obj, exclude | {obj.i}) + _holder(obj, exclude)
    child, t = r, r.head
    via_when = False
    for _ in range(6):
        if t.i == child.i:
            return None
        if t.lower_ in _QUALIFIERS and t.i > r.i and t.pos_ in ("ADJ", "ADV", "DET", "PRON"):
            child, t = t, t.head  # "30 kg gross per package": a qualifier of the value
            continue
        if (t.pos_ in ("VERB", "AUX") and t.dep_ == "advcl" and t.head.pos_ in ("VERB", "AUX", "NOUN")
                and any(c.dep_ == "mark" and c.lower_ in _REFERENCE_MARKS and c.i > child.i for c in t.children)):
            via_when = True  # "48 hours before the vehicle arrives": the clause is the reference point
            child, t = t, t.head
            continue
        if t.pos_ == "ADP" or t.dep_ in ("prep", "agent", "quantmod") or t.lower_ in ("least", "most", "up"):
            via_when = via_when or t.lower_ in _DURATION_PREPS or t.lower_ in _THRESHOLD_PREPS
            child, t = t, t.head
            continue
        if (via_when and _nounish(t) and t.dep_ in ("dobj", "pobj", "nsubj", "nsubjpass")
                and t.head.pos_ in ("VERB", "ADP")):
            child, t = t, t.head  # "respond to tickets within 8 hours": the verb's, not the noun's
            continue
        if t.pos_ in ("NOUN", "PROPN") and (t.dep_ == "npadvmod" or t.lower_ in _WHEN_WORDS):
            child, t = t, t.head  # "17:00 today": when, not what
            continue
        if t.pos_ in ("NOUN", "PROPN") and t.i not in v.tokens:
            obj = _imperative_object(doc, t, exclude)
            if obj is not None:  # "Book the slot ... 24 hours before arrival": a verb the tagger read as a noun
                return t, _phrase(obj, exclude)
            return t, _phrase(t, exclude) + _holder(t, exclude)
        if t.pos_ in ("VERB", "AUX", "ADJ"):
            return _verb_anchor(doc, t, child, exclude)
        child, t = t, t.head
    return None


def _imperative_object(doc, tok, exclude: set[int]):
    """The object of a sentence-initial imperative the small model tags as a noun ("Book the
    slot", "Submit the form"): the root, a bare singular noun first in the sentence, followed
    by a determiner and a noun it heads."""
    first = next((t for t in doc if not t.is_punct), None)
    if first is None or tok.i != first.i or tok.dep_ != "ROOT" or tok.tag_ != "NN" or tok.i + 1 >= len(doc):
        return None
    if doc[tok.i + 1].pos_ not in ("DET", "PRON"):
        return None
    return next((c for c in tok.children if c.dep_ in ("appos", "dobj", "compound") and c.i > tok.i
                 and c.pos_ == "NOUN" and c.i not in exclude), None)


def _holder(noun, exclude: set[int]) -> list:
    """Who holds a relational noun: "migrated tenants" in "migrated tenants use the cutoff"."""
    if noun.dep_ in ("nsubj", "nsubjpass", "dobj", "attr", "pobj"):
        verb = noun.head.head if noun.dep_ == "pobj" else noun.head
        if verb.pos_ in ("VERB", "AUX") and verb.lemma_ != "be":
            return _args(verb, exclude | {t.i for t in noun.subtree})
    return []


def _verb_anchor(doc, verb, child, exclude: set[int]):
    lemma = verb.lemma_.lower()
    if verb.pos_ == "ADJ":  # "valid for 24 hours", "payable within 30 days"
        base = verb.head if verb.dep_ in ("acomp", "amod", "advmod") else verb
        subj = [c for c in base.children if c.dep_ in ("nsubj", "nsubjpass") and c.pos_ in ("NOUN", "PROPN")]
        return (verb, _phrase(subj[0], exclude)) if subj else None
    xcomp = next((c for c in verb.subtree if c.dep_ in ("xcomp", "advcl", "acl", "relcl") and c.pos_ == "VERB"
                  and any(a.lower_ == "to" for a in c.children)), None)
    if lemma == "take" and xcomp is not None:  # "takes 3 days to settle"
        subj = [c for c in verb.children if c.dep_ in ("nsubj", "nsubjpass") and c.pos_ in ("NOUN", "PROPN")]
        return (xcomp, _phrase(subj[0], exclude)) if subj else None
    subj = [c for c in verb.children if c.dep_ in ("nsubj", "nsubjpass") and c.pos_ in ("NOUN", "PROPN")
            and not _within(c, exclude)]
    if lemma in _LINKING:
        adj = next((c for c in verb.children if c.dep_ in ("acomp", "advmod") and c.pos_ in ("ADJ", "ADV")
                    and c.lower_ not in ("least", "most", "up") and c.lower_ not in _DISCOURSE
                    and not _within(c, exclude)), None)
        if adj is not None and subj:  # "must be at least 12 characters long"
            return adj, _phrase(subj[0], exclude)
        often = child.lower_ in ("every", "per") or any(c.lower_ == "every" for c in child.children)
        if subj and often and lemma != "be":
            return verb, _phrase(subj[0], exclude)  # "backups run every 6 hours": how often it runs
        if subj:  # "new hires are on probation for 3 months": what they are on is the subject too
            return subj[0], _phrase(subj[0], exclude) + _args(verb, exclude, skip=subj)
        attr = next((c for c in verb.children if c.dep_ == "attr" and c.pos_ in ("NOUN",) and not _within(c, exclude)), None)
        return (attr, _phrase(attr, exclude)) if attr is not None else None
    if child.dep_ == "dobj":  # "Porto keeps the 22nd as its payroll cutoff": the value is the cutoff
        role = next((g for c in verb.children if c.dep_ == "prep" and c.lower_ == "as"
                     for g in c.children if g.dep_ == "pobj" and g.pos_ == "NOUN" and g.i not in exclude), None)
        if role is not None:
            return role, _phrase(role, exclude)
    words = _args(verb, exclude)
    if not words and verb.dep_ in ("xcomp", "ccomp", "advcl", "relcl") and verb.head.pos_ in ("VERB", "AUX", "NOUN"):
        words = _args(verb.head, exclude) if verb.head.pos_ != "NOUN" else _phrase(verb.head, exclude)
    return (verb, words) if words else None


def _predicate_key(tok) -> str:
    lemma = tok.lemma_.lower()
    prt = next((c.lower_ for c in tok.children if c.dep_ == "prt"), None)
    if prt and f"{lemma} {prt}" in _CANON:
        return _CANON[f"{lemma} {prt}"]
    if tok.pos_ == "VERB" and lemma == "time" and prt == "out":
        return _CANON["timeout"]
    return _CANON.get(lemma, lemma)


def _plural_subject(tok) -> bool:
    """A capitalised plural noun the small model tags PROPN ("Webhooks are retried"): the
    verb agrees with a plural subject, so it names things, not a party."""
    if not tok.lower_.endswith("s") or tok.dep_ not in ("nsubj", "nsubjpass"):
        return False
    verb = tok.head
    return verb.tag_ == "VBP" or any(c.dep_ in ("aux", "auxpass") and c.lower_ in ("are", "were", "have")
                                     for c in verb.children)


def _scope_of(doc, entities: Sequence[str]) -> tuple[set[str], set[int]]:
    """Entity names the sentence names, and the tokens they cover."""
    names, ids = set(), set()
    wanted = {e.lower() for e in entities}
    for tok in doc:
        low = tok.lower_.removesuffix("'s")
        if low in wanted:
            names.add(low)
            ids.add(tok.i)
    for tok in doc:  # "Acme remains on ...", "Acme's cutoff": a named party the parser sees
        if (tok.pos_ == "PROPN" and (tok.dep_ in ("nsubj", "nsubjpass", "poss")
                                     or tok.dep_ == "pobj" and tok.head.lower_ in ("for", "with", "by"))
                and tok.i not in ids
                and tok.text not in _CURRENCY_CODES and not (tok.text.isupper() and len(tok.text) <= 4)
                and tok.lower_ not in _TIMEZONES and not _is_code_token(tok) and not _plural_subject(tok)):
            names.add(tok.lower_.removesuffix("'s"))
            ids.add(tok.i)
    return names, ids


def _limit_marked(doc, v: _Value) -> bool:
    """The value is stated as a bound: "up to 35 kg", "at most 30 kg"."""
    for i in v.tokens:
        for c in doc[i].children:
            if c.lower_ == "up" and c.i + 1 < len(doc) and doc[c.i + 1].lower_ == "to":
                return True
            if c.lower_ == "most" and c.i > 0 and doc[c.i - 1].lower_ == "at":
                return True
    return False


def _paren_spans(doc) -> list[tuple[int, int]]:
    """(index of "(", index of its ")") for each parenthesis of the sentence."""
    spans, open_at = [], None
    for t in doc:
        if t.text == "(" and open_at is None:
            open_at = t.i
        elif t.text == ")" and open_at is not None:
            spans.append((open_at, t.i))
            open_at = None
    return spans


def _equivalents(doc, values: list[_Value]) -> dict[int, int]:
    """Values in a parenthesis right after another value: the same amount restated ("GBP 35
    per day (EUR 40, USD 45)", "GBP 5,000 (EUR 5,800 in Porto)"), keyed by index, to the
    index of the value they restate."""
    out: dict[int, int] = {}
    for a, b in _paren_spans(doc):
        main = next((k for k, w in enumerate(values) if max(w.tokens) == a - 1), None)
        if main is None:
            continue
        for k, w in enumerate(values):
            if a < min(w.tokens) and max(w.tokens) < b:
                out[k] = main
    return out


def _table_cells(doc) -> list[tuple[int, int]]:
    """(first, last) token index of each cell of a table row "| a | b |"."""
    bars = [t.i for t in doc if t.text == "|"]
    return [(x + 1, y - 1) for x, y in zip(bars, bars[1:]) if y - 1 >= x + 1]


def _lemmas(toks, skip: set[int]) -> list[str]:
    out = []
    for t in toks:
        if t.i in skip or t.is_stop or t.is_punct or t.like_num or t.text == "|":
            continue
        lem = t.lemma_.lower() if t.text not in _CURRENCY_CODES else t.text.lower()
        if lem in _GENERIC and lem not in _CANON or not any(c.isalpha() for c in lem):
            continue
        out.append(lem)
    return out


def _sentence_statements(doc, entities: Sequence[str], header: Sequence[str] = ()) -> list[Statement]:
    """The statements of one parsed sentence; ``header`` holds the column names of the
    table a row sentence ("| Meals | GBP 35 per day |") belongs to."""
    out = []
    scope_names, scope_ids = _scope_of(doc, entities)
    values = _values(doc)
    value_ids = {i for w in values for i in w.tokens}
    equiv = _equivalents(doc, values)
    cells = _table_cells(doc) if doc.text.lstrip().startswith("|") else []
    # entities named inside an equivalent's parenthesis scope that value only
    paren_ids = {t.i for a, b in _paren_spans(doc) for t in doc[a:b + 1]
                 if any(a < min(values[k].tokens) < b for k in equiv)}
    main_scope = tuple(sorted({n for n in scope_names
                               if not any(doc[i].lower_.removesuffix("'s") == n for i in scope_ids - paren_ids)} ^
                              scope_names)) if paren_ids else tuple(sorted(scope_names))
    made: dict[int, Statement] = {}
    for k, v in enumerate(values):
        if k in equiv:
            continue
        got = _anchor(doc, v)
        cell = next(((a, b) for a, b in cells if a <= min(v.tokens) <= b), None) if cells else None
        if cell is not None and cells and cell != cells[0]:
            got = _table_anchor(doc, v, got, cells, cell, header)
        if got is None:
            continue
        pred, toks = got
        # "25 vacation days", "10 sick days": what the counted noun is qualified by is part of the subject
        toks = toks + [c for i in v.tokens for c in doc[i].children
                       if c.dep_ in ("compound", "amod") and c.i not in v.tokens and c.pos_ in ("NOUN", "ADJ")]
        if isinstance(pred, str):
            predicate, subject = pred, _lemmas(toks, scope_ids | value_ids)
            pred_tok = None
        else:
            if not any(c.isalpha() for c in pred.text):
                continue  # a "|" parsed as a word
            pred_tok = pred
            subject = _lemmas(([pred] if pred.pos_ in ("NOUN", "PROPN") else []) + toks, scope_ids | value_ids)
            predicate = _predicate_key(pred)
            if pred.pos_ in ("VERB", "AUX") and pred.lemma_.lower() not in _CANON and _limit_marked(doc, v):
                predicate = _CANON["limit"]  # "cartons can go up to 35 kg": a bound, whatever the verb
        subject = list(dict.fromkeys(subject))
        if pred_tok is not None and pred_tok.pos_ in ("VERB", "AUX", "ADJ") and not [
                s for s in subject if s != pred_tok.lemma_.lower()]:
            continue  # "it expires after 30 days": no subject
        if v.unit == "day_of_month" and _concept("submit") not in {_concept(w) for w in (predicate, *subject)}:
            continue  # "paid on the 25th of each month": a date; "the cutoff is the 18th of the month": a value
        span_toks = [t for t in ([pred_tok] if pred_tok is not None else []) + toks]
        lo = min(t.i for t in span_toks) if span_toks else min(v.tokens)
        hi = max(t.i for t in span_toks) if span_toks else max(v.tokens)
        words = tuple(t.text for t in doc[min(lo, min(v.tokens)):max(hi, max(v.tokens)) + 1]
                      if t.i not in v.tokens and not t.is_stop and not t.is_punct and not t.like_num
                      and any(c.isalpha() for c in t.text))
        made[k] = Statement(subject=tuple(subject), predicate=predicate, value=v.value, unit=v.unit,
                            magnitude=v.magnitude, scope=main_scope, words=words)
    for k, v in enumerate(values):
        if k in equiv and equiv[k] in made:
            # an equivalent states the same value, unless the parenthesis names whom it is for
            close = next((b for a, b in _paren_spans(doc) if a < min(v.tokens) < b), len(doc))
            nxt = min((min(w.tokens) for w in values if min(w.tokens) > max(v.tokens)), default=close)
            nxt = min(nxt, close)
            names = sorted({doc[i].lower_.removesuffix("'s") for i in scope_ids if max(v.tokens) < i < nxt})
            if names:
                m = made[equiv[k]]
                made[k] = Statement(subject=m.subject, predicate=m.predicate, value=v.value, unit=v.unit,
                                    magnitude=v.magnitude, scope=tuple(names), words=m.words)
    return [made[k] for k in sorted(made)]


def _table_anchor(doc, v: _Value, got, cells, cell, header: Sequence[str]):
    """(predicate, subject tokens) for a value in a table row: the row's first cell names what
    it is a value of; the column's header, when it is a predicate word ("Limit", "Price"), is
    the predicate, else the anchor found inside the value's own cell, else the row label."""
    a0, b0 = cells[0]
    label = [t for t in doc[a0:b0 + 1] if not t.is_punct]
    if not label:
        return got
    col = cells.index(cell)
    # a column named by a short noun phrase ("Limit", "Max weight"), not a clause ("What you get")
    words = header[col].split() if col < len(header) else []
    head_word = words[-1].lower() if 0 < len(words) <= 2 else ""
    in_cell = got is not None and not isinstance(got[0], str) and cell[0] <= got[0].i <= cell[1]
    inner = [t for t in got[1] if cell[0] <= t.i <= cell[1]] if in_cell else []
    if head_word in _CANON:
        return _CANON[head_word], label + ([got[0]] if in_cell and got[0].pos_ == "NOUN" else []) + inner
    if in_cell:
        return got[0], label + inner
    nouns = [t for t in label if t.pos_ in ("NOUN", "PROPN", "VERB")]
    return (nouns[-1] if nouns else label[-1]), label


@lru_cache(maxsize=20_000)
def _sentences(text: str) -> tuple[str, ...]:  # statements and predicates read the same text
    return tuple(line_sentences(text))


def _numeric_sentences(text: str) -> list[str]:
    """Only sentences that hold a number are parsed (the rest state no value)."""
    return [s for s in _sentences(text) if _may_state_value(s)]


_TABLE_SEPARATOR = re.compile(r"\|?\s*:?-{3,}:?\s*(?:\|\s*:?-{3,}:?\s*)*\|?")


def _row_cells(sentence: str) -> tuple[str, ...]:
    return tuple(c.strip() for c in sentence.strip().strip("|").split("|"))


def _numeric_sentences_with_headers(text: str) -> list[tuple[str, tuple[str, ...]]]:
    """:func:`_numeric_sentences`, each with the column names of the table it is a row of
    (a row followed by a ``| --- |`` separator is a header)."""
    sents = _sentences(text)
    out, header = [], ()
    for k, s in enumerate(sents):
        row = s.lstrip().startswith("|")
        if not row:
            header = ()
        elif k + 1 < len(sents) and _TABLE_SEPARATOR.fullmatch(sents[k + 1].strip()):
            header = _row_cells(s)
            continue
        if _may_state_value(s):
            out.append((s, header if row else ()))
    return out


def _may_state_value(sentence: str) -> bool:
    """A number stands on its own somewhere in the sentence: not a citation ("[9]") and not
    after the letters of an identifier ("p53", "IL-23", "PC12", "E-4471"), which
    :func:`_is_code_token` never reads as a value either."""
    s = _CITATION.sub(" ", sentence)
    for m in _DIGIT_RUN.finditer(s):
        run = m.group(0)
        first = next(k for k, c in enumerate(run) if c.isdigit())
        if not _LETTER.search(run, 0, first):
            return True
    return _NUMBER_WORD.search(s) is not None


def statements_batch(texts: Sequence[str], entities: Sequence[Sequence[str]] = (),
                     nlp_name: str = DEFAULT_NLP, batch_size: int = 64) -> list[tuple[Statement, ...]]:
    """The value statements of each text, parsing all their numeric sentences in one
    ``nlp.pipe`` stream (the build-time API)."""
    if entities and len(entities) != len(texts):
        raise ValueError(f"entities must be empty or one sequence per text: {len(entities)} for {len(texts)} texts")
    nlp = load_nlp(nlp_name)
    owners: list[int] = []
    sents: list[str] = []
    headers: list[tuple[str, ...]] = []
    for k, text in enumerate(texts):
        for s, header in _numeric_sentences_with_headers(text):
            owners.append(k)
            sents.append(s)
            headers.append(header)
    out: list[list[Statement]] = [[] for _ in texts]
    with _LOCK:  # one pipeline per process: one stream through it at a time
        for k, header, doc in zip(owners, headers, nlp.pipe(sents, batch_size=batch_size)):
            out[k] += _sentence_statements(doc, entities[k] if entities else (), header)
    return [tuple(x) for x in out]


@lru_cache(maxsize=20_000)
def _statements_cached(text: str, entities: tuple[str, ...], nlp_name: str) -> tuple[Statement, ...]:
    return statements_batch([text], [entities], nlp_name)[0]


def statements(text: str, entities: Sequence[str] = (), nlp_name: str = DEFAULT_NLP) -> tuple[Statement, ...]:
    """The value statements of ``text`` in order; ``entities`` are the passage's envelope
    entities, recognised as scope where the text names them."""
    return _statements_cached(text, tuple(e.lower() for e in entities), nlp_name)


statements.cache_clear = _statements_cached.cache_clear  # type: ignore[attr-defined]


# ----------------------------------------------------------------------------- comparison

# Suffixes that derive one word from another, after the Snowball stem: "baggage"/"bag",
# "probation"/"probate", "storage"/"store", "payable"/"pay".
_DERIVATIONAL = ("ation", "ition", "ment", "abl", "ibl", "anc", "enc", "ag", "al", "ing", "ion")
# Head nouns that only say a value is a span, a size or a rate of what modifies them: "the
# probation period", "the retry interval", "the upload size", "the interest rate".
_GENERIC_HEADS = frozenset("period interval window time duration size rate amount value level term".split())


@lru_cache(maxsize=20_000)
def _concept(word: str) -> str:
    """One key for a word and its derivations and synonyms: the synonym group's word,
    Snowball-stemmed, without a derivational suffix or a final e or doubled consonant."""
    from quarry.core.text.tokenizer import _stem

    w = _stem(_CANON.get(word, word))
    for suf in _DERIVATIONAL:
        if w.endswith(suf) and len(w) - len(suf) >= 3:
            w = w[: -len(suf)]
            break
    w = w.removesuffix("e") if len(w) > 3 else w
    if len(w) > 3 and w[-1] == w[-2] and w[-1] not in "aeiou":
        w = w[:-1]
    return w


def _bag(s: Statement) -> frozenset[str]:
    """What a statement is about, as concept keys: its predicate and subject lemmas,
    without words that tell no two subjects apart (generic heads only when more is said)."""
    words = [w for w in (s.predicate, *s.subject) if w not in _GENERIC or w in _CANON]  # "maximum": limit
    keys = {_concept(w) for w in words}
    heads = {_concept(w) for w in _GENERIC_HEADS}
    return frozenset(keys - heads) or frozenset(keys)


def subject_keys(s: Statement) -> frozenset[str]:
    """Keys an index can block statements by: the predicate, the subject lemmas and their
    concept keys. Two statements that :func:`conflicts` can match share a concept key; a
    ``similarity`` callable may also match statements that share only a subject lemma."""
    return frozenset({s.predicate, *s.subject}) | _bag(s)


def same_subject(a: Statement, b: Statement, similarity: Callable[[str, str], float] | None = None,
                 threshold: float = 0.8) -> bool:
    """The statements are about one thing: their concept bags (predicate and subject, as
    :func:`_concept` keys) overlap and one contains the other, so neither adds a word of its
    own ("password expire" and "rotate password"; "probation period" and "on probation").
    ``similarity`` (e.g. the tenant's sentence embedder) may accept paraphrased subjects."""
    ba, bb = _bag(a), _bag(b)
    if ba & bb and (ba <= bb or bb <= ba):
        big, small = (a, bb) if len(ba) > len(bb) else (b, ba)
        # the side that says more may add a subject word, not a verb of its own
        # ("orders below USD 20 are not accepted" says no more about the minimum order value)
        if ba == bb or big.predicate in big.subject or _concept(big.predicate) in small:
            return True
    return similarity is not None and similarity(" ".join((*a.subject, a.predicate)),
                                                 " ".join((*b.subject, b.predicate))) >= threshold


def _same_value(a: Statement, b: Statement) -> bool:
    if a.magnitude is None or b.magnitude is None:
        return a.value == b.value
    calendar = any(w in s.value for s in (a, b) for w in ("month", "year", "week"))
    tol = _CALENDAR_TOLERANCE if calendar else 1e-6
    return math.isclose(a.magnitude, b.magnitude, rel_tol=tol, abs_tol=1e-9)


def _compatible(a: Statement, b: Statement) -> bool:
    if a.unit == b.unit:
        return True
    ca, cb = a.unit.split("/", 1), b.unit.split("/", 1)
    # "EUR 50,000 per tenant" and "EUR 20,000" (the rate left unsaid) compare; a time rate
    # must be on both sides (its magnitude is per day).
    rate_ok = ca[1:] == cb[1:] or (not ca[1:] and cb[1:] != ["duration"]) or (not cb[1:] and ca[1:] != ["duration"])
    if ca[0] == cb[0]:
        return rate_ok
    # EUR 15 vs USD 15 for the same subject: amounts in different currencies conflict.
    return ca[0].startswith("currency:") and cb[0].startswith("currency:") and rate_ok


def conflicts(a: Statement, b: Statement, similarity: Callable[[str, str], float] | None = None) -> bool:
    """``a`` and ``b`` attach different values of compatible units to the same subject,
    and they do not name disjoint entities."""
    if not _compatible(a, b) or not same_subject(a, b, similarity):
        return False
    if a.scope and b.scope and not set(a.scope) & set(b.scope):
        return False
    if a.unit.split("/")[0] != b.unit.split("/")[0]:
        # another currency; but a scoped amount in another currency than a general one is
        # the local equivalent ("EUR 5,800 in Porto" for "GBP 5,000")
        return set(a.scope) == set(b.scope)
    return not _same_value(a, b)


def conflict(a: tuple[Statement, ...], b: tuple[Statement, ...],
             similarity: Callable[[str, str], float] | None = None) -> tuple[Statement, Statement] | None:
    """The first pair (in text order) where ``a`` and ``b`` attach different values to the
    same subject, or None."""
    for sa in a:
        for sb in b:
            if conflicts(sa, sb, similarity):
                return sa, sb
    return None


# ----------------------------------------------------------------------------- other facts (owner, status, date)

# The regex reader below finds owner/status/date facts for the contradiction search; their
# subjects are stems of the words around the fact (WINDOW words either side).
WINDOW = 3
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
                out.append(Statement(subject=tuple(sorted(set(stems))), predicate=kind, value=seg[s:e], unit=kind,
                                     magnitude=None, words=tuple(words)))
    return tuple(out)


