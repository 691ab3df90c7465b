"""The values a parsed sentence states, each with its unit and magnitude in a base unit.

A number and the unit word after it ("100 GB", "-80 °C", "a 30-day trial", "half a
minute") are read and converted to a base unit by pint, so "2 weeks" and "14 days" have
one magnitude (14, in days) and "24 hours" equals "1 day". Amounts carry their ISO
currency ("€40" and "EUR 40" are both ``currency:EUR`` 40). Clock times ("15:00", "3 pm",
"3:00 p.m. CET") are their own kind, ``time_of_day``, normalised by dateparser to minutes
since midnight. A bare number that counts a noun ("10 seats") is ``count:seat``. A "per
..." rate ("100 requests per minute") is part of the unit, with time rates normalised to
per day.

Not values: dates, weekdays and years, version numbers and labels ("SAML 2.0", "tier 2",
"Ticket 482": a number after its noun counts nothing), digits inside identifiers
(E-4471, v2.3.1, acme-9, Sev-1), list ordinals and timestamps on a date. pint and
dateparser are imported on first use: ``import quarry.core`` stays light.
"""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass
from functools import lru_cache

from quarry.core.text.nlp import find_dates

__all__ = ["CURRENCY_CODES", "DAY_COUNT_WORDS", "TIMEZONES", "Value", "is_code_token", "names_duration", "sentence_values"]

TIMEZONES = frozenset("cet cest utc gmt et est edt pt pst bst uk".split())
CURRENCY_CODES = frozenset(
    "EUR USD GBP CHF JPY CAD AUD SEK NOK DKK PLN CZK HUF CNY INR BRL MXN ZAR NZD SGD HKD KRW TRY RUB AED".split())
_CURRENCY_SIGNS = {"€": "EUR", "$": "USD", "£": "GBP", "¥": "JPY", "₹": "INR", "₩": "KRW"}
_CURRENCY_WORDS = {"euro": "EUR", "euros": "EUR", "dollar": "USD", "dollars": "USD", "pound": "GBP",
                   "pounds": "GBP", "franc": "CHF", "francs": "CHF", "yen": "JPY"}
# How a span of days is counted ("10 working days", "5 business days", "30 calendar days",
# "3 clear days"): part of the value, never what the value is of.
DAY_COUNT_WORDS = frozenset("working business calendar banking clear consecutive full whole school".split())
_MERIDIEM = frozenset({"am", "pm", "a.m.", "p.m.", "a.m", "p.m"})
_NAMED_TIMES = {"noon": 720, "midday": 720, "midnight": 0}
_PENCE = re.compile(r"(\d{1,2}(?:\.\d+)?)p")  # "53p", "24.5p": pence (a pound and more is written "£"; "1080p" is no price)
_ORDINAL = re.compile(r"(\d{1,2})(?:st|nd|rd|th)", re.IGNORECASE)


@lru_cache(maxsize=1)
def _ureg():
    import pint

    return pint.UnitRegistry()


@lru_cache(maxsize=4096)
def _clock(text: str, tenant: str) -> int | None:
    """Minutes since midnight of a clock time such as "15:00", "3 pm" or "3:00 p.m."
    (memoised per ``tenant``)."""
    import dateparser

    t = text.lower().replace("a.m.", "am").replace("p.m.", "pm").replace("a.m", "am").replace("p.m", "pm")
    d = dateparser.parse(t, languages=["en"], settings={"STRICT_PARSING": False, "PREFER_DATES_FROM": "current_period",
                                                         "RELATIVE_BASE": datetime.datetime(2000, 1, 1)})
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
    if dim not in _MEASURED:
        return None  # "5 units" is no micronit, "5G" no gauss: pint knows more units than documents use
    return dim, float(q.to_base_units().magnitude), False


@lru_cache(maxsize=1)
def _measured() -> frozenset[str]:
    ureg = _ureg()
    return frozenset(str(ureg.Quantity(1.0, n).dimensionality) for n in (
        "meter", "gram", "meter**2", "liter", "meter/second", "pascal", "joule", "watt", "newton", "hertz",
        "ampere", "volt", "meter/second**2", "gram/liter"))


class _Measured:
    """The dimensions business documents state values in (length, mass, area, volume,
    speed, pressure, energy, power, force, frequency, current, voltage, concentration)."""

    def __contains__(self, dim: str) -> bool:
        return dim in _measured()


_MEASURED = _Measured()


@dataclass(frozen=True)
class Value:
    tokens: frozenset[int]
    value: str
    unit: str
    magnitude: float | None
    approx: bool = False


def _fmt(x: float) -> str:
    return format(round(x, 6), "g") if abs(x) < 1e15 else str(x)


# English number words: the units and teens, the tens, and the multipliers that scale them.
_WORD_NUMBERS = {w: float(k) for k, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen".split())} | {w: float(10 * k) for k, w in enumerate(
    "twenty thirty forty fifty sixty seventy eighty ninety".split(), start=2)} | {"dozen": 12.0}
_MULTIPLIERS = {"hundred": 100.0, "thousand": 1000.0, "million": 1e6}
# The scale written after an amount: "GBP 10m", "EUR 2.5bn", "USD 40k", "£3 million".
_SCALES = {"k": 1e3, "thousand": 1e3, "m": 1e6, "mn": 1e6, "million": 1e6, "bn": 1e9, "billion": 1e9}
_SCALED = re.compile(r"(\d+(?:\.\d+)?)(k|m|mn|bn)")
# Fractions written as words: "half a minute", "a quarter of an hour", "three quarters of an hour".
_FRACTIONS = {"half": 0.5, "quarter": 0.25, "quarters": 0.25}
# How often, as a count per period: "twice a year", "once a week", "three times per day".
_TIMES = {"once": 1.0, "twice": 2.0, "thrice": 3.0}
# An adverb that names its period: "backups run daily", "rotated annually".
_PERIOD_ADVERBS = {"hourly": "hour", "daily": "day", "nightly": "day", "weekly": "week", "fortnightly": "fortnight",
                   "monthly": "month", "quarterly": "3 month", "yearly": "year", "annually": "year"}


def _period_days(name: str) -> float:
    """Days in a period name of :data:`_PERIOD_ADVERBS` ("3 month" is a quarter)."""
    n, _, unit = name.rpartition(" ")
    return float(n or 1) * _pint_base(unit)[1]
_NUMERIC = re.compile(r"[-+−±]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?")
# Parts of speech a unit word can have ("GB" and "°" are tagged PROPN by the small model).
_UNIT_POS = frozenset({"NOUN", "PROPN", "X", "SYM", "NUM"})


def _number(tok) -> float | None:
    """The number a token writes: "1,000", "-80", "0.5", "one"; None for anything else."""
    t = tok.text
    if _NUMERIC.fullmatch(t):
        return float(t.replace(",", "").replace("−", "-").lstrip("±"))  # "±0.02 mm": the tolerance
    return _WORD_NUMBERS.get(tok.lower_)


def _and_a_fraction(doc, j: int) -> tuple[float, int] | None:
    """(fraction, last token) of "and a half" / "and a quarter" written from token ``j``."""
    if j + 2 < len(doc) and doc[j].lower_ == "and" and doc[j + 1].lower_ in ("a", "an") \
            and doc[j + 2].lower_ in ("half", "quarter"):
        return (0.5 if doc[j + 2].lower_ == "half" else 0.25), j + 2
    return None


def _number_run(doc, i: int) -> tuple[float, int] | None:
    """(number, last token) of a number and the fraction after it ("two and a half")."""
    run = _whole_run(doc, i)
    if run is None:
        return None
    tail = _and_a_fraction(doc, run[1] + 1)
    return (run[0] + tail[0], tail[1]) if tail is not None else run


def _whole_run(doc, i: int) -> tuple[float, int] | None:
    """(number, last token) of the number written from token ``i``: digits, or number words
    composed the usual way ("twenty-five", "one hundred and twenty", "ninety")."""
    first = _number(doc[i])
    if first is None and doc[i].lower_ in _MULTIPLIERS and i > 0 and doc[i - 1].lower_ in ("a", "an"):
        first, start = 1.0, i  # "a million pounds", "a hundred guests": the multiplier scales one
    elif first is None or _NUMERIC.fullmatch(doc[i].text):
        return (first, i) if first is not None else None
    else:
        start = i + 1
    total, current, last, j = 0.0, first, i, start
    while j < len(doc):
        w = doc[j].lower_
        if w in _MULTIPLIERS:
            if _MULTIPLIERS[w] >= 1000:
                total, current = total + (current or 1) * _MULTIPLIERS[w], 0.0
            else:
                current = (current or 1) * _MULTIPLIERS[w]
            last, j = j, j + 1
        elif w in ("-", "and") and j + 1 < len(doc) and doc[j + 1].lower_ in _WORD_NUMBERS and (
                w == "-" or doc[j - 1].lower_ in _MULTIPLIERS):
            j += 1
        elif w in _WORD_NUMBERS and _WORD_NUMBERS[w] < 10 and current % 100 >= 20 and current % 10 == 0:
            current, last, j = current + _WORD_NUMBERS[w], j, j + 1  # "twenty five"
        elif w in _WORD_NUMBERS and current and current % 100 == 0 and doc[j - 1].lower_ in ("and", "-", *_MULTIPLIERS):
            current, last, j = current + _WORD_NUMBERS[w], j, j + 1  # "one hundred and twenty"
        else:
            break
    return total + current, last


def names_measure(word: str) -> bool:
    """Whether ``word`` is pint's name of a measured unit other than time ("kwh", "kg",
    "litre"): what a price per measured quantity ("GBP 0.40 per kWh") is per."""
    for w in dict.fromkeys((word, word[:1] + word[1:].capitalize(), word.upper())):  # "kwh" is written "kWh"
        name = _pint_name(w)
        if name is not None:
            return _pint_base(name)[0] != "duration"
    return False


def names_duration(word: str) -> bool:
    """Whether ``word`` (a word or its stem, 3 letters or more) is pint's name of a unit of time."""
    name = _pint_name(word) if len(word) >= 3 else None
    base = _pint_base(name) if name else None
    return base is not None and base[0] == "duration"


def _duration_unit(doc, j: int) -> tuple[str, int, float, bool] | None:
    """(pint name, last token, days, calendar) of a time unit word at token ``j``."""
    if j >= len(doc):
        return None
    got = _unit_at(doc, j)
    if got is None:
        return None
    base = _pint_base(got[0])
    if base is None or base[0] != "duration":
        return None
    return got[0], got[1], base[1], base[2]


def _how_often(doc, tok, taken: set[int]) -> Value | None:
    """How often, as the period between two times: "twice a year" is every half year,
    "three times per week" every 7/3 days, "once daily" every day."""
    times = _TIMES.get(tok.lower_)
    j = tok.i + 1
    if times is None:
        run = _number_run(doc, tok.i)
        if run is None or run[1] + 1 >= len(doc) or doc[run[1] + 1].lower_ not in ("times", "x"):
            return None
        times, j = run[0], run[1] + 2
    if not times or j >= len(doc):
        return None
    if doc[j].lower_ in _PERIOD_ADVERBS:
        name, last = _PERIOD_ADVERBS[doc[j].lower_], j
        days, approx = _period_days(name), name not in ("hour", "day")
    elif doc[j].lower_ in ("a", "an", "per", "each", "every") and (u := _duration_unit(doc, j + 1)) is not None:
        name, last, days, approx = u
    else:
        return None
    span = frozenset(range(tok.i, last + 1))
    if span & taken:
        return None
    return Value(span, f"{_fmt(times)} per {name}", "duration", days / times, approx or name in ("month", "year"))


def _one_period(doc, tok, taken: set[int]) -> Value | None:
    """A period written without a number: "an hour", "a fortnight", "every month", "each
    year", and an adverb of how often ("backups run daily"); not "EUR 40 a month" (a rate of
    the value before it) nor "the daily limit" (a qualifier)."""
    w = tok.lower_
    if tok.i > 0 and tok.i - 1 in taken:
        return None  # "USD 425 annually", "EUR 40 a month": the rate of that value (:func:`_with_rate`)
    if w in _PERIOD_ADVERBS and tok.pos_ == "ADV" and tok.dep_ == "advmod":
        name, last = _PERIOD_ADVERBS[w], tok.i
        days, approx = _period_days(name), name not in ("hour", "day")
    elif w in ("a", "an", "every", "each"):
        # "a full day", "a whole week", "a full working week": two describing words may stand between
        k = tok.i + 1
        while k - tok.i <= 2 and k + 1 < len(doc) and (doc[k].pos_ == "ADJ" or doc[k].lower_ in DAY_COUNT_WORDS):
            k += 1
        if k < len(doc) and doc[k].lower_ == "quarter" and not (k + 1 < len(doc) and doc[k + 1].lower_ == "of"):
            u = ("3 month", k, _period_days("3 month"), True)  # "every quarter" (not "a quarter of an hour")
        else:
            u = _duration_unit(doc, k)
        if u is None:
            return None
        if u[0] == "week" and any(doc[m].lower_ in ("working", "business") for m in range(tok.i + 1, k)):
            u = ("5 day", u[1], 5.0, False)  # "a working week" is five working days
        name, last, days, approx = u
        if tok.i > 0 and doc[tok.i - 1].lower_ in ("per", "times", *_TIMES):
            return None
        if w in ("every", "each") and tok.i > 1 and doc[tok.i - 1].lower_ == "for" and tok.i - 2 in taken:
            return None  # "GBP 12 for every full week": the rate of that value (:func:`_for_each_period`)
        if w in ("every", "each") and tok.i > 0 and doc[tok.i - 1].lower_ == "of":
            return None  # "the last working day of each month": which day, not how long
    else:
        return None
    count = 1.0
    if (tail := _and_a_fraction(doc, last + 1)) is not None and " " not in name:
        count, last = 1.0 + tail[0], tail[1]  # "an hour and a half"
    span = frozenset(range(tok.i, last + 1))
    if span & taken:
        return None
    return Value(span, name if " " in name else f"{_fmt(count)} {name}", "duration", days * count,
                 approx or name in ("month", "year", "week"))


def _unit_at(doc, j: int) -> tuple[str, int] | None:
    """(pint's unit name, last token) for a unit word starting at token ``j``: the text as
    written first ("MB" is a megabyte, "mb" a millibarn), then its lemma ("minutes")."""
    t = doc[j]
    if t.text == "°" and j + 1 < len(doc) and doc[j + 1].text in ("C", "F"):
        return _pint_name("°" + doc[j + 1].text), j + 1  # the parser tags "°" as punctuation
    got = _one_unit(doc, j)
    if got is None:
        return None
    name, last = got
    # "30 mg/L", "20 km/h": a unit per another, one compound unit pint reads
    if last + 2 < len(doc) and doc[last + 1].text == "/" and (per := _one_unit(doc, last + 2)) is not None:
        compound = f"{name}/{per[0]}"
        if _pint_base(compound) is not None:
            return compound, per[1]
    return got


def _one_unit(doc, j: int) -> tuple[str, int] | None:
    t = doc[j]
    metre = t.text == "m" and j > 0 and doc[j - 1].like_num  # "1.8 m" ("m" is a stop word: "I'm")
    if t.like_num or not metre and (t.pos_ not in _UNIT_POS or t.is_stop):
        return None
    written = t.text.rstrip(".") or t.text  # "mg/L." at a sentence's end
    for cand in (written, t.lemma_.lower()):
        name = _pint_name(cand)
        if name is not None:
            return name, j
        if cand == written and len(cand) <= 2 and _pint_known(cand):
            return None  # a symbol as written ("5G": gauss) is not another in lower case (gram)
    return None


@lru_cache(maxsize=4096)
def _pint_known(word: str) -> bool:
    try:
        _ureg().get_name(word)
    except Exception:  # noqa: BLE001 - pint raises several error types for unknown names
        return False
    return True


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


def is_code_token(tok) -> bool:
    t = tok.text
    return (any(c.isalpha() for c in t) and any(c.isdigit() for c in t)) or t.count(".") >= 2  # E-4471, 2.3.1


def sentence_values(doc, *, tenant: str) -> list[Value]:
    """The values a parsed sentence of ``tenant``'s text states, in text order."""
    text = doc.text
    date_tokens = {t.i for s, e, _ in find_dates(doc.text, tenant=tenant) for t in doc if t.idx < e and t.idx + len(t.text) > s}
    taken: set[int] = set()
    out: list[Value] = []

    # 0. Ratios: "1 : 3", "1:4", "1 adult to 8 children", "one lifeguard for every 25 bathers".
    for v in _ratios(doc, date_tokens):
        if not v.tokens & taken:
            taken.update(v.tokens)
            out.append(v)

    # 1. Clock times: "16:00", "3 pm", "3:00 p.m.".
    for tok in doc:
        if tok.i in taken:
            continue
        nxt = doc[tok.i + 1] if tok.i + 1 < len(doc) else None
        is_colon = re.fullmatch(r"\d{1,2}[:.]\d{2}", tok.text) is not None and ":" in tok.text
        mer = nxt is not None and nxt.lower_ in _MERIDIEM and tok.like_num
        glued = re.fullmatch(r"\d{1,2}(?::\d{2})?(?:am|pm)", tok.lower_) is not None
        if tok.lower_ in _NAMED_TIMES and tok.pos_ in ("NOUN", "PROPN"):
            # "until noon", "by midnight", "half past midnight", "a quarter to noon"
            span, minutes = {tok.i}, _NAMED_TIMES[tok.lower_]
            if tok.i >= 2 and doc[tok.i - 1].lower_ in ("past", "to") and doc[tok.i - 2].lower_ in ("half", "quarter"):
                shift = 30 if doc[tok.i - 2].lower_ == "half" else 15
                minutes = (minutes + (shift if doc[tok.i - 1].lower_ == "past" else -shift)) % 1440
                span |= {tok.i - 1, tok.i - 2}
            taken.update(span)
            out.append(Value(frozenset(span), f"{minutes // 60:02d}:{minutes % 60:02d}", "time_of_day", float(minutes)))
            continue
        if not (is_colon or mer or glued):
            continue
        if tok.i > 0 and re.fullmatch(r"\d{4}-\d{2}-\d{2}", doc[tok.i - 1].text):
            continue  # a timestamp on a date
        if tok.i > 1 and doc[tok.i - 1].lower_ in ("at", "t") and re.fullmatch(r"\d{4}-\d{2}-\d{2}", doc[tok.i - 2].text):
            continue
        span = [tok.i] + ([nxt.i] if mer else [])
        minutes = _clock(" ".join(doc[i].text for i in span), tenant)
        if minutes is None:
            continue
        # the time zone that qualifies it belongs to the value's tokens
        j = span[-1] + 1
        if j < len(doc) and doc[j].lower_ in TIMEZONES:
            span.append(j)
        taken.update(span)
        out.append(Value(frozenset(span), f"{minutes // 60:02d}:{minutes % 60:02d}", "time_of_day", float(minutes)))

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
            out.append(Value(frozenset(span), f"day {n}", "day_of_month", float(n)))

    # 2. Amounts: a number next to a currency code, sign or word; pence ("53p").
    for tok in doc:
        if tok.i not in taken and (m := _PENCE.fullmatch(tok.text)):
            taken.add(tok.i)
            out.append(Value(frozenset({tok.i}), f"GBP {_fmt(float(m.group(1)) / 100)}", "currency:GBP",
                             float(m.group(1)) / 100))
            continue
        prev = doc[tok.i - 1] if tok.i > 0 else None
        if tok.i not in taken and prev is not None and (prev.text in CURRENCY_CODES or prev.text in _CURRENCY_SIGNS) \
                and (m := _SCALED.fullmatch(tok.lower_.rstrip("."))):  # "USD 40k", "GBP 10m" written as one token
            cur, amount = _CURRENCY_SIGNS.get(prev.text, prev.text), float(m.group(1)) * _SCALES[m.group(2)]
            taken.update((prev.i, tok.i))
            out.append(Value(frozenset((prev.i, tok.i)), f"{cur} {_fmt(amount)}", f"currency:{cur}", amount))
            continue
        if tok.i in taken or not tok.like_num or is_code_token(tok):
            continue
        # a number and its scale: "GBP 10m", "£2.5 million", "five million pounds"
        run = _whole_run(doc, tok.i) if not _NUMERIC.fullmatch(tok.text) else None
        end = run[1] if run is not None else tok.i
        scale = 1.0
        if end + 1 < len(doc) and doc[end + 1].lower_.rstrip(".") in _SCALES and not (
                run and doc[end].lower_ in _MULTIPLIERS):  # ("10m." at a sentence's end: "m." is the scale)
            scale, end = _SCALES[doc[end + 1].lower_.rstrip(".")], end + 1
        nxt = doc[end + 1] if end + 1 < len(doc) else None
        cur = None
        span = list(range(tok.i, end + 1))
        if prev is not None and (prev.text in CURRENCY_CODES or prev.text in _CURRENCY_SIGNS) and run is None:
            # (a number word after a code is a pronoun: "the GBP cutoff, or only the EUR one?")
            cur = _CURRENCY_SIGNS.get(prev.text, prev.text)
            span.insert(0, prev.i)
        elif nxt is not None and (nxt.text in CURRENCY_CODES or nxt.lower_ in _CURRENCY_WORDS):
            cur = _CURRENCY_WORDS.get(nxt.lower_, nxt.text)
            span.append(nxt.i)
        elif tok.text[:1] in _CURRENCY_SIGNS:
            cur = _CURRENCY_SIGNS[tok.text[:1]]
        if cur is None:
            continue
        try:
            amount = run[0] if run is not None else float(tok.text.lstrip("".join(_CURRENCY_SIGNS)).replace(",", ""))
        except ValueError:
            continue
        amount *= scale
        taken.update(span)
        out.append(Value(frozenset(span), f"{cur} {_fmt(amount)}", f"currency:{cur}", amount))

    # 3. Quantities: a number and the unit word after it, read by pint ("100 GB", "-80 °C",
    #    "a 30-day trial", "half a minute"); else a count of the noun it modifies.
    for tok in doc:
        if tok.i in taken or is_code_token(tok):
            continue
        often = _how_often(doc, tok, taken)
        if often is not None:
            taken.update(often.tokens)
            out.append(often)
            continue
        run = _number_run(doc, tok.i)
        amount, j = (run[0], run[1] + 1) if run is not None else (None, tok.i + 1)
        couple = tok.lower_ == "couple" and j + 1 < len(doc) and doc[j].lower_ == "of" and tok.i > 0 \
            and doc[tok.i - 1].lower_ in ("a", "every", "each")
        if couple:
            amount, j = 2.0, j + 1  # "a couple of days", "every couple of hours"
        elif tok.lower_ in _FRACTIONS:
            # "half a minute", "a quarter of an hour", "three quarters of an hour"
            amount = _FRACTIONS[tok.lower_]
            j += j < len(doc) and doc[j].lower_ == "of"
            j += j < len(doc) and doc[j].lower_ in ("a", "an")
        elif amount is None:
            continue
        elif j + 1 < len(doc) and doc[j].lower_ in _FRACTIONS and doc[j + 1].lower_ == "of":
            # "three quarters of an hour": a count of fractions of the unit
            amount *= _FRACTIONS[doc[j].lower_]
            j += 2
            j += j < len(doc) and doc[j].lower_ in ("a", "an")
        if j < len(doc) and doc[j].tag_ == "HYPH":
            j += 1  # "30-day"
        if j + 1 < len(doc) and doc[j].lower_ in DAY_COUNT_WORDS and (u := _unit_at(doc, j + 1)) is not None \
                and _pint_base(u[0]) and _pint_base(u[0])[0] == "duration":
            j += 1  # "15 business days", whatever the parse attaches the number to (a table cell)
        if j >= len(doc):
            got = None
        elif doc[j].text in ("%", "percent", "per cent"):
            span = frozenset(range(tok.i, j + 1))  # "5 and a half percent"
            taken.update(span)
            out.append(Value(span, f"{_fmt(amount)}%", "percent", amount))
            continue
        else:
            got = _unit_at(doc, j)
        if got is None:
            if couple and j < len(doc) and doc[j].tag_ == "NNS":  # "a couple of guests"
                span = frozenset(range(tok.i, j))
                taken.update(span)
                out.append(Value(span, f"2 {doc[j].lemma_.lower()}", f"count:{doc[j].lemma_.lower()}", 2.0))
            elif tok.like_num:
                v = _count(doc, tok.i, amount, date_tokens, j - 1 if run is not None else None)
                if v is not None:
                    taken.update(v.tokens)
                    out.append(v)
            continue
        name, last = got
        if (tail := _and_a_fraction(doc, last + 1)) is not None:
            amount, last = amount + tail[0], tail[1]  # "2 hours and a half"
        base = _pint_base(name)
        dim, factor, approx = base
        if dim == "[temperature]":
            mag = float(_ureg().Quantity(amount, name).to("kelvin").magnitude)
        else:
            mag = amount * factor
        span = frozenset(range(tok.i, last + 1))
        taken.update(span)
        out.append(Value(span, f"{_fmt(amount)} {name}", dim, mag, approx))
    # 4. Periods without a number: "an hour", "every month", "backups run daily".
    for tok in doc:
        if tok.i in taken:
            continue
        v = _one_period(doc, tok, taken)
        if v is not None:
            taken.update(v.tokens)
            out.append(v)
    out.sort(key=lambda v: min(v.tokens))
    return [_with_rate(doc, v) for v in out]


_RATIO_ONE = re.compile(r"(\d{1,3}):(\d)")  # "1:4" (one digit after the colon is no clock time)
_RATIO_WORDS = (("to",), ("for", "every"), ("for", "each"), ("per",))


def _plain(text: str) -> float | None:
    """A number written in digits ("12", "1,000"), or None ("±0.8", "-3")."""
    return float(text.replace(",", "")) if re.fullmatch(r"(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?", text) else None


def _number_at(doc, i: int) -> tuple[float, int] | None:
    """(number, last token) written at token ``i`` in digits or words ("8", "eight",
    "twenty-five"), or None."""
    if _NUMERIC.fullmatch(doc[i].text):
        return None if (x := _plain(doc[i].text)) is None else (x, i)
    return _whole_run(doc, i)


def _ratio(n: float | None, m: float | None, span) -> Value | None:
    if not n or not m:
        return None
    return Value(frozenset(span), f"1:{_fmt(m / n)}", "ratio", m / n)


def _counted_noun(doc, j: int) -> int | None:
    """The last token of the noun a number at ``j - 1`` counts in a ratio ("adult",
    "member of staff"), or None: a unit or a period is no side of a ratio."""
    if j >= len(doc) or doc[j].pos_ != "NOUN" or not doc[j].is_alpha or _unit_at(doc, j) is not None:
        return None
    if j + 2 < len(doc) and doc[j + 1].lower_ == "of" and doc[j + 2].pos_ == "NOUN":
        return j + 2  # "1 member of staff"
    return j


def _ratios(doc, date_tokens: set[int]) -> list[Value]:
    """Ratios a sentence states: "1 : 3" and "1:4" (one digit after the colon, or a second
    number after a spaced colon), and a count of one noun to, for every or per a count of
    another ("1 adult to 8 children", "one staff to eight kids", "1 lifeguard for every 25
    bathers"). The value is how many of the second each one of the first stands for ("1:8"),
    so "2 adults to 16 children" and "1 : 8" state the same ratio, and neither side is
    read as a count of its own (a cap of 24 children is no ratio)."""
    out: list[Value] = []
    for tok in doc:
        if tok.i in date_tokens:
            continue
        nxt = doc[tok.i + 1] if tok.i + 1 < len(doc) else None
        if (m := _RATIO_ONE.fullmatch(tok.text)) and not (nxt is not None and nxt.lower_ in _MERIDIEM):
            if (v := _ratio(float(m.group(1)), float(m.group(2)), {tok.i})) is not None:
                out.append(v)
            continue
        if _plain(tok.text) and tok.i + 2 < len(doc) and doc[tok.i + 1].text == ":" \
                and _plain(doc[tok.i + 2].text) and " :" in doc[tok.i:tok.i + 3].text \
                and not (tok.i + 3 < len(doc) and doc[tok.i + 3].lower_ in _MERIDIEM):
            if (v := _ratio(_plain(tok.text), _plain(doc[tok.i + 2].text), range(tok.i, tok.i + 3))) is not None:
                out.append(v)
            continue
        if not tok.like_num or (run := _number_at(doc, tok.i)) is None:
            continue
        n = run[0]
        if (last := _counted_noun(doc, run[1] + 1)) is None:
            continue
        for words in _RATIO_WORDS:
            j = last + 1
            if tuple(t.lower_ for t in doc[j:j + len(words)]) != words:
                continue
            k = j + len(words)
            if k >= len(doc) or not doc[k].like_num or k in date_tokens:
                break
            if (other := _number_at(doc, k)) is None or (end := _counted_noun(doc, other[1] + 1)) is None:
                break
            # the numbers and the words between them are the value; the nouns they count
            # stay in the sentence's subject ("instructor", "paddler": a ratio of what)
            numbers = {*range(tok.i, run[1] + 1), *range(last + 1, other[1] + 1)}
            if (v := _ratio(n, other[0], numbers)) is not None:
                out.append(v)
            break
    return out


_NO_COUNT = frozenset({"go", "point", "way"})
_BOUND_WORDS = frozenset("at most least up to no more fewer than a maximum minimum max min of".split())


def _bounded_after(doc, i: int):
    """The plural noun a bare bound after a comma counts: "split into monthly instalments,
    at most 6" (6 instalments), "guests, up to 4"; None otherwise."""
    j = i - 1
    while j >= 0 and doc[j].lower_ in _BOUND_WORDS:
        j -= 1
    if j == i - 1 or j < 1 or doc[j].text not in (",", "(") or doc[j - 1].tag_ != "NNS":
        return None
    return doc[j - 1]


def _count(doc, i: int, value: float, date_tokens: set[int], last: int | None = None) -> Value | None:
    """A number that counts the noun after it ("10 seats", "5 failed login attempts"); a
    number written in words ends at token ``last`` ("two hundred guests")."""
    last = i if last is None else last
    span = frozenset(range(i, last + 1))
    tok = doc[last]
    if i in date_tokens:
        return None  # a year or a day of a month
    if (noun := _bounded_after(doc, i)) is not None:  # "monthly instalments, at most 6"
        return Value(span, f"{_fmt(value)} {noun.lemma_.lower()}", f"count:{noun.lemma_.lower()}", value)
    head = tok.head
    if head.lower_ in _NO_COUNT:
        return None  # "in one go": an idiom, not a count
    if tok.dep_ not in ("nummod", "quantmod") or head.i <= last or head.pos_ not in ("NOUN",) or not head.text[:1].isalpha():
        return None  # "SAML 2.0", "tier 2", "Ticket 482": a label, not a count
    if head.lower_ in _MERIDIEM:
        return None
    dur = _pint_base(head.lemma_.lower())
    if head.lemma_.lower() == "night":
        dur = ("duration", 1.0, False)  # "14 nights in a row": a stay's length, a day for each night ("three weeks")
    if dur is not None and dur[0] == "duration":  # "2 business days", "25 vacation days"
        return Value(span | {head.i}, f"{_fmt(value)} {head.lemma_.lower()}", "duration", value * dur[1],
                      dur[2])
    if i == 0 or (i == 1 and doc[0].is_punct):
        if i + 1 < len(doc) and doc[i + 1].text in (".", ")"):
            return None  # list ordinal
    return Value(span, f"{_fmt(value)} {head.lemma_.lower()}", f"count:{head.lemma_.lower()}", value)


def _for_each_period(doc, j: int):
    """The period a value is charged or counted for from token ``j``: "for each funded
    day", "for every full week", "per booked hour" (at most two describing words between),
    as :func:`_duration_unit`'s tuple, or None."""
    if j + 2 >= len(doc) or doc[j].lower_ not in ("for", "per"):
        return None
    k = j + 1 + (doc[j + 1].lower_ in ("each", "every"))
    if doc[j].lower_ == "for" and k == j + 1:
        return None  # "GBP 40 for a day" is a price for one day, not a rate
    for _ in range(3):
        if k >= len(doc):
            return None
        if (u := _duration_unit(doc, k)) is not None:
            return u
        if doc[k].pos_ not in ("ADJ", "VERB") or not doc[k].is_alpha:
            return None
        k += 1
    return None


def _with_rate(doc, v: Value) -> Value:
    """Add a "per ..." rate to the unit: "100 requests per minute" is count:request/duration
    with its magnitude per day, "EUR 6 per seat" is currency:EUR/seat."""
    j = max(v.tokens) + 1
    if j < len(doc) and v.magnitude is not None and v.unit not in ("duration", "time_of_day"):
        # "USD 425 annually", "EUR 40 a month", "GBP 10 each month": a time rate
        if doc[j].lower_ in _PERIOD_ADVERBS and v.unit.startswith("count:") and doc[j].dep_ == "amod" \
                and doc[j].head.i > j:
            name = None  # "3 monthly instalments": three instalments, each a month apart, not 3 a month
        elif doc[j].lower_ in _PERIOD_ADVERBS:
            name, last = _PERIOD_ADVERBS[doc[j].lower_], j
            days, approx = _period_days(name), name not in ("hour", "day")
        elif doc[j].lower_ in ("a", "an", "each", "every") and (u := _duration_unit(doc, j + 1)) is not None:
            name, last, days, approx = u
        elif (u := _for_each_period(doc, j)) is not None:
            name, last, days, approx = u
        else:
            name = None
        if name is not None:
            return Value(v.tokens | frozenset(range(j, last + 1)), f"{v.value}/{name.split()[-1]}", f"{v.unit}/duration",
                         v.magnitude / days, v.approx or approx)
    heads = {doc[i] for i in v.tokens} | {doc[i].head for i in v.tokens}
    if v.unit.startswith("count:"):
        heads |= {doc[i].head.head for i in v.tokens}
    for h in sorted(heads, key=lambda t: t.i):
        for child in h.children:
            if child.lower_ == "per" and child.i > min(v.tokens) and child.i not in v.tokens:
                obj = next((c for c in child.children if c.dep_ == "pobj"), None)
                if obj is None:
                    continue
                per = _pint_base(obj.lemma_.lower())
                if per and per[0] == "duration" and v.magnitude is not None and v.unit != "duration":
                    return Value(v.tokens | {child.i, obj.i}, f"{v.value}/{obj.lemma_.lower()}",
                                  f"{v.unit}/duration", v.magnitude / per[1], v.approx or per[2])
                return Value(v.tokens | {child.i, obj.i}, f"{v.value}/{obj.lemma_.lower()}",
                              f"{v.unit}/{obj.lemma_.lower()}", v.magnitude, v.approx)
    return v
