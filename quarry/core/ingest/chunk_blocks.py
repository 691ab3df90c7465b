"""The blocks of a section body: spans of ``doc.text`` that packing never breaks. Markdown
bodies split into fenced code, tables (with an adjacent caption line), top-level list
items (with their nested lines) and paragraphs; plain text and python module-level code
into blank-line separated paragraphs. Markdown line syntax is
:mod:`quarry.core.text.markdown`'s."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from quarry.core.text.markdown import FENCE, LIST_ITEM, TABLE_DELIM, interrupts_paragraph

__all__ = ["Block", "fence_close", "indent_of", "is_blank", "lines_of", "markdown_blocks", "text_blocks"]


@dataclass(frozen=True)
class Block:
    """A span of doc.text that is never broken by packing."""

    start: int
    end: int
    kind: str  # paragraph | list | table | code | sentences
    atomic: bool = False  # a table/code block allowed to exceed max_tokens
    standalone: bool = False  # a sentence window: overlaps its neighbours, so never packed


def lines_of(text: str, start: int, end: int) -> list[tuple[int, int, str]]:
    """(start, end-without-newline, content) for each line of text[start:end]."""
    out = []
    pos = start
    while pos < end:
        nl = text.find("\n", pos, end)
        stop = end if nl < 0 else nl
        out.append((pos, stop, text[pos:stop]))
        pos = stop + 1
    return out


def indent_of(line: str) -> int:
    return len(line) - len(line.lstrip(" \t"))


def is_blank(line: str) -> bool:
    return not line.strip()


_CAPTION = re.compile(r"^\s*(?:table(?:\s+\d+[a-z]?)?\s*[:.].*|\*[^*].*\*|_[^_].*_|\*\*.+\*\*)\s*$", re.I)


def fence_close(lines: Sequence[tuple[int, int, str]], i: int) -> int:
    """Index of the closing fence line for the fence opened at lines[i] (or the last line)."""
    m = FENCE.match(lines[i][2])
    assert m
    marker = m.group(1)
    closer = re.compile(rf"^ {{0,3}}{re.escape(marker[0])}{{{len(marker)},}}\s*$")
    for j in range(i + 1, len(lines)):
        if closer.match(lines[j][2]):
            return j
    return len(lines) - 1


def _is_table_start(lines: Sequence[tuple[int, int, str]], i: int) -> bool:
    line = lines[i][2]
    if line.lstrip().startswith("|"):
        return True
    return "|" in line and i + 1 < len(lines) and "-" in lines[i + 1][2] and bool(TABLE_DELIM.match(lines[i + 1][2]))


def _starts_block(lines: Sequence[tuple[int, int, str]], i: int, prev: str) -> bool:
    """Whether lines[i] starts a fence, a table or a list item after the line ``prev``: a
    list item only where it interrupts (:func:`interrupts_paragraph`; a wrapped "2026. From
    then on ..." continues the line before)."""
    line = lines[i][2]
    return bool(FENCE.match(line) or (LIST_ITEM.match(line) and interrupts_paragraph(line, prev))) \
        or _is_table_start(lines, i)


def _list_item_end(lines: Sequence[tuple[int, int, str]], i: int) -> int:
    """Index one past the last line of the top-level list item starting at lines[i]:
    nested items, indented lines, lazy continuations and indented lines after blanks."""
    base = indent_of(lines[i][2])
    j = i + 1
    last = i
    while j < len(lines):
        line = lines[j][2]
        if is_blank(line):
            k = j
            while k < len(lines) and is_blank(lines[k][2]):
                k += 1
            if k < len(lines) and indent_of(lines[k][2]) > base + 1:
                j = k
                continue
            break
        deeper = indent_of(line) > base + 1
        if not deeper and _starts_block(lines, j, lines[i][2]):
            break
        if deeper and FENCE.match(line.lstrip(" \t")):  # a nested fence stays in its item
            j = fence_close(lines, j)
        last = j
        j += 1
    return last + 1


def markdown_blocks(text: str, start: int, end: int) -> list[Block]:
    """Blocks of a section body: fenced code, tables (with an adjacent caption line), top-level
    list items (with their nested lines) and paragraphs. Blocks cover every non-blank line."""
    lines = lines_of(text, start, end)
    raw: list[Block] = []
    i = 0
    while i < len(lines):
        line = lines[i][2]
        if is_blank(line):
            i += 1
            continue
        fence = FENCE.match(line)
        if fence:
            j = fence_close(lines, i)
            lang = fence.group(2).lower()
            raw.append(Block(lines[i][0], lines[j][1], "code-python" if lang in ("python", "py", "python3") else "code"))
            i = j + 1
        elif _is_table_start(lines, i):
            j = i
            while j + 1 < len(lines) and not is_blank(lines[j + 1][2]) and "|" in lines[j + 1][2]:
                j += 1
            raw.append(Block(lines[i][0], lines[j][1], "table", atomic=True))
            i = j + 1
        elif LIST_ITEM.match(line):
            j = _list_item_end(lines, i)
            raw.append(Block(lines[i][0], lines[j - 1][1], "list"))
            i = j
        else:
            j = i
            while j + 1 < len(lines) and not is_blank(lines[j + 1][2]) and not _starts_block(lines, j + 1, lines[j][2]):
                j += 1
            raw.append(Block(lines[i][0], lines[j][1], "paragraph"))
            i = j + 1
    return _attach_captions(text, raw)


def _is_caption(text: str, b: Block) -> bool:
    chunk = text[b.start:b.end]
    return b.kind == "paragraph" and "\n" not in chunk.strip() and bool(_CAPTION.match(chunk))


def _attach_captions(text: str, blocks: list[Block]) -> list[Block]:
    """A table keeps a one-line caption paragraph directly before or after it."""
    out: list[Block] = []
    i = 0
    while i < len(blocks):
        b = blocks[i]
        if b.kind == "table":
            start, end = b.start, b.end
            if out and _is_caption(text, out[-1]) and _near(text, out[-1].end, b.start):
                start = out.pop().start
            if i + 1 < len(blocks) and _is_caption(text, blocks[i + 1]) and _near(text, b.end, blocks[i + 1].start):
                end = blocks[i + 1].end
                i += 1
            b = Block(start, end, "table", atomic=True)
        out.append(b)
        i += 1
    return out


def _near(text: str, a: int, b: int) -> bool:
    """At most one blank line between two blocks."""
    return text[a:b].count("\n") <= 2


def text_blocks(text: str, start: int, end: int, kind: str = "paragraph") -> list[Block]:
    """Blank-line separated paragraphs (format "text", python module-level code)."""
    out, first, last = [], None, None
    for s, e, line in lines_of(text, start, end):
        if is_blank(line):
            if first is not None:
                out.append(Block(first, last, kind))
            first = None
        else:
            first = s if first is None else first
            last = e
    if first is not None:
        out.append(Block(first, last, kind))
    return out
