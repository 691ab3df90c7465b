"""Text concepts every stage shares, each defined once.

- **Token estimate** (:func:`count_tokens`): every run of word characters and every other
  non-space character is one token (``"EUR-4471 at 16:00."`` -> EUR - 4471 at 16 : 00 . = 8).
  Cheap, deterministic and within ~30% of BPE counts for English prose: chunking's ceilings,
  the delivered-token ceiling and the reranker's token units all use it.
- **Sentences** (:func:`sentence_spans`, :func:`split_sentences`): a boundary is ``[.!?]``
  followed by whitespace and a capital or digit, never after an abbreviation or initial.
  :func:`line_sentences` first joins wrapped paragraph lines and keeps table rows, list
  items, headings and fences as lines of their own.
- **Heading trail** (:func:`heading_trail`, :func:`heading_text`): the title then the heading
  path, without a top heading that restates the title. What the legs index, what the
  reranker reads and what a result shows above its excerpt.
- **Identifiers** (:func:`is_identifier`, :data:`IDENTIFIER`): alphanumeric runs joined by
  ``-``, ``_``, ``.`` or ``/`` (``E-4471``, ``SSO-104``, ``v2.3``, ``reconcile_settlement``),
  or one run mixing letters and digits (``INC2291``, ``4xx``). The tokenizer keeps them
  whole; the lexical leg pins exact identifier hits; the learned ranker's ``ident_*``
  features and the resolver's condition terms use the same definition.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from quarry.core.text import markdown

__all__ = [
    "IDENTIFIER",
    "JOINED_IDENTIFIER",
    "count_tokens",
    "token_starts",
    "strip_span",
    "spans_between",
    "sentence_spans",
    "split_sentences",
    "logical_lines",
    "line_sentences",
    "section_path",
    "heading_trail",
    "heading_text",
    "is_identifier",
    "identifiers_in",
]

# ---------------------------------------------------------------------------- tokens

_TOKEN_UNIT = re.compile(r"\w+|[^\w\s]")


def count_tokens(text: str) -> int:
    """Number of ``\\w+|[^\\w\\s]`` tokens in ``text`` (the estimate used for every ceiling)."""
    return len(_TOKEN_UNIT.findall(text))


def token_starts(text: str, start: int = 0, end: int | None = None) -> list[int]:
    """Offsets where each token of text[start:end] begins (cutting there splits no token)."""
    return [m.start() for m in _TOKEN_UNIT.finditer(text, start, len(text) if end is None else end)]


# ---------------------------------------------------------------------------- spans


def strip_span(text: str, start: int, end: int) -> tuple[int, int] | None:
    """text[start:end] without surrounding whitespace, as a span; None when it is blank."""
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return (start, end) if start < end else None


def spans_between(text: str, start: int, cuts: Sequence[int], end: int) -> list[tuple[int, int]]:
    """The non-blank, whitespace-trimmed spans of text[start:end] between successive cuts."""
    out, prev = [], start
    for c in [*cuts, end]:
        span = strip_span(text, prev, c)
        if span:
            out.append(span)
        prev = c
    return out


# ---------------------------------------------------------------------------- sentences

_SENT_END = re.compile(r"[.!?]+[\"')\]]*(?=\s+[\"'(\[]?[A-Z0-9])")
_ABBREV = frozenset({"e.g.", "i.e.", "etc.", "vs.", "mr.", "mrs.", "ms.", "dr.", "no.", "fig.", "approx.",
                     "cf.", "al.", "st.", "inc.", "ltd.", "jr.", "sr.", "p.", "pp.", "sec.", "eq."})
_INITIALS = re.compile(r"(?:[a-z]\.)+")


def sentence_spans(text: str, start: int = 0, end: int | None = None) -> list[tuple[int, int]]:
    """Sentence spans (stripped) in text[start:end]. A boundary is [.!?] followed by
    whitespace and a capital or digit; abbreviations ("e.g.") and initials ("J.", "U.S.")
    are not boundaries, and "v2.3.1", "16:00", "3.5" never match because no whitespace follows."""
    end = len(text) if end is None else end
    cuts = []
    for m in _SENT_END.finditer(text, start, end):
        word = text[start:m.end()].split()[-1].lower().lstrip("\"'([")
        if word in _ABBREV or _INITIALS.fullmatch(word):
            continue
        cuts.append(m.end())
    return spans_between(text, start, cuts, end)


def split_sentences(text: str) -> list[str]:
    return [text[s:e] for s, e in sentence_spans(text)]


def logical_lines(text: str) -> list[str]:
    """Wrapped paragraph lines joined into one; table rows, list items, headings, quotes and
    code fences stay lines of their own. Markdown strong emphasis (** __) is removed."""
    out: list[str] = []
    prev_blank = True
    for line in re.sub(r"\*\*|__", "", text).split("\n"):
        if not line.strip():
            prev_blank = True
            continue
        if out and not prev_blank and not markdown.interrupts_paragraph(line, out[-1]) and not markdown.stands_alone(out[-1]):
            out[-1] = f"{out[-1]} {line.strip()}"
        else:
            out.append(line.strip())
        prev_blank = False
    return out


def line_sentences(text: str) -> list[str]:
    """Sentences of wrapped paragraphs, and each table row or list item on its own."""
    return [line[a:b] for line in logical_lines(text) for a, b in sentence_spans(line)]


# ---------------------------------------------------------------------------- heading trail


def section_path(title: str, heading_path: Sequence[str]) -> list[str]:
    """The heading path, stripped, without empty headings and without a top heading that
    restates the title (case-insensitively): an H1 repeating the title adds nothing."""
    path = [h.strip() for h in heading_path if h.strip()]
    if path and title.strip() and path[0].lower() == title.strip().lower():
        path = path[1:]
    return path


def heading_trail(title: str, heading_path: Sequence[str]) -> list[str]:
    """Title then headings (:func:`section_path`); the title is left out when empty."""
    title = title.strip()
    return [title, *section_path(title, heading_path)] if title else section_path(title, heading_path)


def heading_text(title: str, heading_path: Sequence[str]) -> str:
    """The heading trail joined with `` > ``: ``"Refund policy > Exceptions"``."""
    return " > ".join(heading_trail(title, heading_path))


# ---------------------------------------------------------------------------- identifiers

# Two or more alphanumeric runs joined by separators (the tokenizer keeps these whole).
JOINED_IDENTIFIER = r"[^\W_]+(?:[-_./][^\W_]+)+"
# One alphanumeric run holding both a letter and a digit.
_MIXED = r"(?=[^\W_]*\d)(?=[^\W_]*[^\W\d_])[^\W_]+"
IDENTIFIER = re.compile(rf"{JOINED_IDENTIFIER}|{_MIXED}", re.UNICODE)


def is_identifier(token: str) -> bool:
    """Whether ``token`` is an identifier: ``E-4471``, ``SSO-104``, ``v2.3``, ``ord_4821``,
    ``INC2291``, ``4xx``; not ``payout``, ``2291`` or ``16:00``."""
    return IDENTIFIER.fullmatch(token) is not None


def identifiers_in(text: str) -> list[str]:
    """The distinct identifiers written in ``text``, lower-cased, in order of first
    appearance: whole ones only (``"IP3R-mediated"`` gives ``ip3r-mediated``, not also
    ``ip3r``), unlike the tokenizer, which also emits the parts of a joined identifier."""
    return list(dict.fromkeys(m.group(0).lower() for m in IDENTIFIER.finditer(text)))
