"""The sections of a document and their anchors (the anchor scheme is :mod:`.chunking`'s):
ATX headings split markdown (fence-aware), top-level defs and classes split python."""

from __future__ import annotations

import ast
import re
import unicodedata
from dataclasses import dataclass

from quarry.core.ingest.chunk_blocks import fence_close, lines_of
from quarry.core.text.markdown import FENCE, HEADING

__all__ = ["Section", "parse_markdown_sections", "parse_python_sections", "slugify", "unique_anchor"]


@dataclass(frozen=True)
class Section:
    anchor: str
    heading_path: tuple[str, ...]
    spans: tuple[tuple[int, int], ...]  # body spans in doc.text; several only for python "module"


def _heading_text(raw: str | None) -> str:
    raw = (raw or "").strip()
    raw = re.sub(r"(?:^|[ \t]+)#+$", "", raw)  # optional closing sequence "## Title ##"
    return raw.strip()


def slugify(text: str) -> str:
    ascii_ = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    slug = re.sub(r"[^a-z0-9]+", "-", ascii_.lower()).strip("-")
    return slug or "section"


def unique_anchor(base: str, used: set[str]) -> str:
    anchor, n = base, 1
    while anchor in used:
        n += 1
        anchor = f"{base}-{n}"
    used.add(anchor)
    return anchor


def parse_markdown_sections(text: str) -> list[Section]:
    """ATX headings (fence-aware) split the text into sections; each keeps only its own
    body (up to the next heading of any level)."""
    lines = lines_of(text, 0, len(text))
    heads: list[tuple[int, int, int, str]] = []  # (line start, body start, level, title)
    i = 0
    while i < len(lines):
        s, e, line = lines[i]
        if FENCE.match(line):
            i = fence_close(lines, i) + 1
            continue
        m = HEADING.match(line.rstrip("\r"))
        if m:
            heads.append((s, min(e + 1, len(text)), len(m.group(1)), _heading_text(m.group(2))))
        i += 1
    used: set[str] = {"top"}
    sections = [Section("top", (), ((0, heads[0][0] if heads else len(text)),))]
    stack: list[tuple[int, str]] = []
    for n, (_, body, level, title) in enumerate(heads):
        while stack and stack[-1][0] >= level:
            stack.pop()
        stack.append((level, title))
        stop = heads[n + 1][0] if n + 1 < len(heads) else len(text)
        anchor = unique_anchor(slugify(title), used)
        sections.append(Section(anchor, tuple(t for _, t in stack), ((body, stop),)))
    return sections


_PY_DEF = re.compile(r"^(?:async[ \t]+def|def|class)[ \t]+(\w+)")


def _python_ranges(text: str) -> list[tuple[int, int, str]]:
    """(first line, last line, name), 1-based inclusive, of top-level defs/classes, decorators
    included. ast when the module parses; else a column-0 ``def``/``class`` regex."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        lines = text.split("\n")
        starts = [(n, m.group(1)) for n, line in enumerate(lines, 1) if (m := _PY_DEF.match(line))]
        return [(n, (starts[k + 1][0] - 1) if k + 1 < len(starts) else len(lines), name)
                for k, (n, name) in enumerate(starts)]
    out = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            out.append((first, node.end_lineno or node.lineno, node.name))
    return out


def parse_python_sections(text: str) -> list[Section]:
    lines = text.split("\n")
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line) + 1)
    ranges = _python_ranges(text)
    used = {"module"}
    defs: list[Section] = []
    module_spans: list[tuple[int, int]] = []
    cursor = 1
    for first, last, name in ranges:
        while first - 1 >= cursor and lines[first - 2].startswith("#"):  # a comment block directly above
            first -= 1
        if first > cursor:
            module_spans.append((offsets[cursor - 1], offsets[first - 1]))
        defs.append(Section(unique_anchor(name, used), (name,), ((offsets[first - 1], min(offsets[last], len(text))),)))
        cursor = last + 1
    if cursor <= len(lines):
        module_spans.append((offsets[cursor - 1], len(text)))
    return [Section("module", (), tuple(module_spans)), *defs]
