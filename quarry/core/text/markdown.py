"""Markdown line syntax (CommonMark's block starts), defined once for the chunker, the
extractive contextualizer and the statement finder; and a sentence with its inline
markup removed (:func:`plain_sentence`), for the envelope enrichment's patterns."""

from __future__ import annotations

import re

__all__ = ["HEADING", "FENCE", "LIST_ITEM", "TABLE_ROW", "TABLE_DELIM", "QUOTE", "SETEXT_UNDERLINE",
           "THEMATIC_BREAK", "HTML_ONLY", "interrupts_paragraph", "opens_block", "plain_sentence", "stands_alone"]

# ATX heading; group 1 the #'s, group 2 the raw title (may keep a closing "##").
HEADING = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?[ \t]*$")
# Code fence opener; group 1 the marker (``` or ~~~, 3 or more), group 2 the info string's language.
FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})\s*([^`\s]*)")
# List item marker; group 1 the indent.
LIST_ITEM = re.compile(r"^([ \t]*)(?:[-*+]|\d{1,9}[.)])(?:[ \t]+|$)")
TABLE_ROW = re.compile(r"^\s*\|")
TABLE_DELIM = re.compile(r"^\s*\|?\s*:?-{1,}:?\s*(?:\|\s*:?-{1,}:?\s*)*\|?\s*$")
QUOTE = re.compile(r"^\s*>+\s?")
SETEXT_UNDERLINE = re.compile(r"^\s{0,3}(=+|-+)\s*$")
THEMATIC_BREAK = re.compile(r"^\s{0,3}([-*_])(\s*\1){2,}\s*$")
HTML_ONLY = re.compile(r"^\s*<[^>]+>\s*$")


def opens_block(line: str) -> bool:
    """A line that starts a block of its own: heading, fence, list item, table row or quote."""
    return any(p.match(line) for p in (HEADING, FENCE, LIST_ITEM, TABLE_ROW, QUOTE))


# Ordered list item marker; group 1 its number.
_ORDERED = re.compile(r"^[ \t]*(\d{1,9})[.)](?:[ \t]+|$)")


def interrupts_paragraph(line: str, prev: str) -> bool:
    """Whether ``line``, right after ``prev`` (a paragraph's or list item's line, no blank
    between), starts a block of its own rather than continuing it (CommonMark's rule): a
    block opener (:func:`opens_block`), except a list item with nothing after its marker
    and an ordered item numbered other than 1 that is no sibling of an ordered item
    ``prev`` opens. So a year wrapped to the start of a line ("... from Monday 2 March" /
    "2026. From then on ...") continues the sentence."""
    if not opens_block(line):
        return False
    if (m := LIST_ITEM.match(line)) is None:
        return True
    if not line[m.end():].strip():
        return False
    n = _ORDERED.match(line)
    return n is None or int(n.group(1)) == 1 or _ORDERED.match(prev) is not None


def stands_alone(line: str) -> bool:
    """A line that never absorbs the next one as a wrapped continuation: heading, fence,
    table row (a list item or quote does: lazy continuation)."""
    return any(p.match(line) for p in (HEADING, FENCE, TABLE_ROW))


def plain_sentence(s: str) -> str:
    """A sentence without markdown emphasis, code ticks and curly quotes."""
    s = s.replace("`", "").replace("’", "'").replace("“", '"').replace("”", '"')
    return re.sub(r"(?<!\w)[*_]{1,2}|[*_]{1,2}(?!\w)", "", s).strip()
