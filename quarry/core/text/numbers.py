"""Numbers in text, read one way everywhere: the citation checks (a claim's numbers must
appear in its quote) and the statement reader's date facts use this one reader."""

from __future__ import annotations

import re
from collections.abc import Iterator


# Longest forms first so "2026-01-15" is one date, not 2026, 01 and 15, and "16:00" is
# one time. The look-arounds keep "150" from matching inside "1500" and vice versa.
_NUMBER = re.compile(
    r"(?=\d)(?<!\d)(?:"  # the look-ahead first: a position without a digit fails at once (3x faster)
    r"(?P<date>\d{4}-\d{2}-\d{2})"
    r"|(?P<time>\d{1,2}:\d{2}(?::\d{2})?)"
    r"|(?P<num>\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?)(?P<pct>\s?(?:%|percent\b))?"
    r")(?![\d])",
    re.IGNORECASE,
)


def _canonical(m: re.Match[str]) -> str:
    if m.group("date"):
        return m.group("date")
    if m.group("time"):
        h, rest = m.group("time").split(":", 1)
        return f"{int(h)}:{rest}"  # "09:00" and "9:00" are the same time
    num = m.group("num").replace(",", "")  # "1,000" == "1000"
    if "." in num:
        whole, frac = num.split(".", 1)
        num = f"{int(whole)}.{frac}"
    else:
        num = str(int(num))
    return num + ("%" if m.group("pct") else "")


def number_spans(text: str) -> Iterator[tuple[int, int, str, str]]:
    """(start, end, canonical, kind) for each number in ``text``; kind is one of date,
    time, percent, number. The one number reader: the resolver's statements use it too."""
    for m in _NUMBER.finditer(text):
        kind = ("date" if m.group("date") else "time" if m.group("time")
                else "percent" if m.group("pct") else "number")
        yield m.start(), m.end(), _canonical(m), kind


def extract_numbers(text: str) -> tuple[str, ...]:
    """Canonical number tokens in ``text``, in order (duplicates kept)."""
    return tuple(c for _, _, c, _ in number_spans(text))
