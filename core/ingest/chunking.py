"""Structure-aware chunking: split a SourceDocument at the seams its author put there
(headings, list items, tables, code fences, def/class boundaries, paragraphs), and fall
back to sentence windows with overlap only for prose that has no structure left.

Anchor scheme (DESIGN §2):

* A section anchor is the slug of its *leaf* heading ("## EUR cutoff" -> "eur-cutoff",
  like GitHub's anchors, so ``source_url#anchor`` tends to resolve); a repeated slug gets
  "-2", "-3", ... in document order. Text before the first heading is section "top";
  python module-level code is "module"; a python def/class is its name; format "text" has
  the single section "top".
* ``parent_id = "{doc_id}@{version}#{section_anchor}"``.
* Passage anchors are always ``"{section_anchor}.{i}"`` with i from 1. Section anchors never
  contain ".", so a passage id can never equal a parent id.

Token counts and sentence boundaries are :mod:`quarry.core.text.units`'s; markdown line syntax is
:mod:`quarry.core.text.markdown`'s.

Every passage text is an exact (stripped) slice of ``doc.text``; heading lines are carried
in ``heading_path`` rather than in ``text``. A section with no body of its own (a heading
directly followed by a sub-heading) yields no parent and no passage.
"""

from __future__ import annotations

import ast
import logging
import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from quarry.core.text.markdown import FENCE, HEADING, LIST_ITEM, TABLE_DELIM
from quarry.core.records import DEFAULT_AUTHORITY, Envelope, ParentSection, Passage, SourceDocument
from quarry.core.text.units import count_tokens, sentence_spans, spans_between, strip_span, token_starts

log = logging.getLogger(__name__)

CHUNKER_VERSION = "struct-1"
HARD_LIMIT_FACTOR = 4  # a code fence is split only past HARD_LIMIT_FACTOR * max_tokens

@dataclass(frozen=True)
class ChunkSettings:
    max_tokens: int = 200
    overlap_sentences: int = 1  # only used by the sentence-window fallback
    min_tokens: int = 8  # a trailing packed chunk below this borrows blocks from its predecessor

    def __post_init__(self) -> None:
        for name in ("max_tokens", "overlap_sentences", "min_tokens"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool):
                raise ValueError(f"{name} must be an int, got {v!r}")
        if self.max_tokens < 1:
            raise ValueError("max_tokens must be >= 1")
        if self.overlap_sentences < 0:
            raise ValueError("overlap_sentences must be >= 0")
        if not 0 <= self.min_tokens <= self.max_tokens:
            raise ValueError("min_tokens must be between 0 and max_tokens")

    @property
    def hard_limit(self) -> int:
        return HARD_LIMIT_FACTOR * self.max_tokens


@dataclass(frozen=True)
class Section:
    anchor: str
    heading_path: tuple[str, ...]
    spans: tuple[tuple[int, int], ...]  # body spans in doc.text; several only for python "module"


@dataclass(frozen=True)
class Block:
    """A span of doc.text that is never broken by packing."""

    start: int
    end: int
    kind: str  # paragraph | list | table | code | sentences
    atomic: bool = False  # a table/code block allowed to exceed max_tokens
    standalone: bool = False  # a sentence window: overlaps its neighbours, so never packed


@dataclass(frozen=True)
class Chunk:
    start: int
    end: int
    kinds: tuple[str, ...]
    oversized: bool  # over max_tokens on purpose (an atomic table or code block)


# ---------------------------------------------------------------------------- lines

def _lines(text: str, start: int, end: int) -> list[tuple[int, int, str]]:
    """(start, end-without-newline, content) for each line of text[start:end]."""
    out = []
    pos = start
    while pos < end:
        nl = text.find("\n", pos, end)
        stop = end if nl < 0 else nl
        out.append((pos, stop, text[pos:stop]))
        pos = stop + 1
    return out


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" \t"))


def _blank(line: str) -> bool:
    return not line.strip()


# ---------------------------------------------------------------------------- sentences

def _token_pieces(text: str, start: int, end: int, max_tokens: int) -> list[tuple[int, int]]:
    """Last resort for a run with no seam: cut at every max_tokens-th token start. Cutting at
    token starts keeps each piece's count exact (no word is split)."""
    return spans_between(text, start, token_starts(text, start, end)[max_tokens::max_tokens], end)


def sentence_windows(text: str, start: int, end: int, max_tokens: int, overlap: int) -> list[Block]:
    """Windows of whole sentences up to max_tokens; each window repeats the last ``overlap``
    sentences of the previous one (fewer if they would not fit with the next sentence)."""
    units: list[tuple[int, int]] = []
    for s, e in sentence_spans(text, start, end):
        units.extend(_token_pieces(text, s, e, max_tokens) if count_tokens(text[s:e]) > max_tokens else [(s, e)])
    sizes = [count_tokens(text[s:e]) for s, e in units]
    out, i = [], 0
    while i < len(units):
        j, total = i, 0
        while j < len(units) and (j == i or total + sizes[j] <= max_tokens):
            total += sizes[j]
            j += 1
        out.append(Block(units[i][0], units[j - 1][1], "sentences", standalone=True))
        if j >= len(units):
            break
        k = max(j - overlap, i + 1)  # always make progress
        while k < j and sum(sizes[k:j]) + sizes[j] > max_tokens:
            k += 1
        i = k
    return out


# ---------------------------------------------------------------------------- markdown structure

_CAPTION = re.compile(r"^\s*(?:table(?:\s+\d+[a-z]?)?\s*[:.].*|\*[^*].*\*|_[^_].*_|\*\*.+\*\*)\s*$", re.I)


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


def _fence_close(lines: Sequence[tuple[int, int, str]], i: int) -> int:
    """Index of the closing fence line for the fence opened at lines[i] (or the last line)."""
    m = FENCE.match(lines[i][2])
    assert m
    marker = m.group(1)
    closer = re.compile(rf"^ {{0,3}}{re.escape(marker[0])}{{{len(marker)},}}\s*$")
    for j in range(i + 1, len(lines)):
        if closer.match(lines[j][2]):
            return j
    return len(lines) - 1


def parse_markdown_sections(text: str) -> list[Section]:
    """ATX headings (fence-aware) split the text into sections; each keeps only its own
    body (up to the next heading of any level)."""
    lines = _lines(text, 0, len(text))
    heads: list[tuple[int, int, int, str]] = []  # (line start, body start, level, title)
    i = 0
    while i < len(lines):
        s, e, line = lines[i]
        if FENCE.match(line):
            i = _fence_close(lines, i) + 1
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


def _is_table_start(lines: Sequence[tuple[int, int, str]], i: int) -> bool:
    line = lines[i][2]
    if line.lstrip().startswith("|"):
        return True
    return "|" in line and i + 1 < len(lines) and "-" in lines[i + 1][2] and bool(TABLE_DELIM.match(lines[i + 1][2]))


def _starts_block(lines: Sequence[tuple[int, int, str]], i: int) -> bool:
    line = lines[i][2]
    return bool(FENCE.match(line) or LIST_ITEM.match(line)) or _is_table_start(lines, i)


def _list_item_end(lines: Sequence[tuple[int, int, str]], i: int) -> int:
    """Index one past the last line of the top-level list item starting at lines[i]:
    nested items, indented lines, lazy continuations and indented lines after blanks."""
    base = _indent(lines[i][2])
    j = i + 1
    last = i
    while j < len(lines):
        line = lines[j][2]
        if _blank(line):
            k = j
            while k < len(lines) and _blank(lines[k][2]):
                k += 1
            if k < len(lines) and _indent(lines[k][2]) > base + 1:
                j = k
                continue
            break
        deeper = _indent(line) > base + 1
        if not deeper and (LIST_ITEM.match(line) or FENCE.match(line) or _is_table_start(lines, j)):
            break
        if deeper and FENCE.match(line.lstrip(" \t")):  # a nested fence stays in its item
            j = _fence_close(lines, j)
        last = j
        j += 1
    return last + 1


def markdown_blocks(text: str, start: int, end: int) -> list[Block]:
    """Blocks of a section body: fenced code, tables (with an adjacent caption line), top-level
    list items (with their nested lines) and paragraphs. Blocks cover every non-blank line."""
    lines = _lines(text, start, end)
    raw: list[Block] = []
    i = 0
    while i < len(lines):
        line = lines[i][2]
        if _blank(line):
            i += 1
            continue
        fence = FENCE.match(line)
        if fence:
            j = _fence_close(lines, i)
            lang = fence.group(2).lower()
            raw.append(Block(lines[i][0], lines[j][1], "code-python" if lang in ("python", "py", "python3") else "code"))
            i = j + 1
        elif _is_table_start(lines, i):
            j = i
            while j + 1 < len(lines) and not _blank(lines[j + 1][2]) and "|" in lines[j + 1][2]:
                j += 1
            raw.append(Block(lines[i][0], lines[j][1], "table", atomic=True))
            i = j + 1
        elif LIST_ITEM.match(line):
            j = _list_item_end(lines, i)
            raw.append(Block(lines[i][0], lines[j - 1][1], "list"))
            i = j
        else:
            j = i
            while j + 1 < len(lines) and not _blank(lines[j + 1][2]) and not _starts_block(lines, j + 1):
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
    for s, e, line in _lines(text, start, end):
        if _blank(line):
            if first is not None:
                out.append(Block(first, last, kind))
            first = None
        else:
            first = s if first is None else first
            last = e
    if first is not None:
        out.append(Block(first, last, kind))
    return out


# ---------------------------------------------------------------------------- python structure

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


# ---------------------------------------------------------------------------- oversize handling

def _code_segments(text: str, start: int, end: int, python: bool) -> list[tuple[int, int]]:
    """Seams inside an over-limit code block: def/class lines at the shallowest indent where
    there are several (python), else blank-line groups."""
    lines = _lines(text, start, end)
    if python:
        heads = [(i, _indent(l)) for i, (_, _, l) in enumerate(lines)
                 if re.match(r"[ \t]*(?:async[ \t]+def|def|class|@)\b", l)]
        for depth in sorted({d for _, d in heads}):
            cut = [i for i, d in heads if d == depth and not (i > 0 and re.match(r"[ \t]*@", lines[i - 1][2]))]
            if len(cut) > 1 or (cut and cut[0] > 0):
                bounds = sorted({0, *cut})
                stops = [lines[b][0] for b in bounds[1:]] + [end]
                spans = [strip_span(text, lines[b][0], stop) for b, stop in zip(bounds, stops)]
                return [sp for sp in spans if sp]
    return [(b.start, b.end) for b in text_blocks(text, start, end)]


def _line_pieces(text: str, start: int, end: int, max_tokens: int) -> list[Block]:
    units = []
    for s, e, line in _lines(text, start, end):
        if not _blank(line):
            units.extend(Block(a, b, "code") for a, b in
                         (_token_pieces(text, s, e, max_tokens) if count_tokens(line) > max_tokens else [(s, e)]))
    return units


def expand_block(text: str, block: Block, settings: ChunkSettings) -> list[Block]:
    """Turn one block into packable units that respect the ceilings: tables stay whole; code
    stays whole up to the hard limit; prose falls back to sentence windows."""
    n = count_tokens(text[block.start:block.end])
    if n <= settings.max_tokens:
        return [Block(block.start, block.end, block.kind.split("-")[0])]
    if block.kind == "table":
        return [block]
    if block.kind.startswith("code"):
        if n <= settings.hard_limit:
            return [Block(block.start, block.end, "code", atomic=True)]
        out: list[Block] = []
        for s, e in _code_segments(text, block.start, block.end, block.kind == "code-python"):
            m = count_tokens(text[s:e])
            if m <= settings.hard_limit:
                out.append(Block(s, e, "code", atomic=m > settings.max_tokens))
            else:
                out.extend(_line_pieces(text, s, e, settings.max_tokens))
        return out
    if block.kind == "list":
        # Nested items are the next seam inside a long item.
        lines = _lines(text, block.start, block.end)
        cuts = [0] + [i for i, (_, _, l) in enumerate(lines) if i and LIST_ITEM.match(l)]
        parts = [strip_span(text, lines[c][0], lines[cuts[k + 1] - 1][1] if k + 1 < len(cuts) else block.end)
                 for k, c in enumerate(cuts)]
        if len(parts) > 1:
            return [u for p in parts if p for u in expand_block(text, Block(*p, "paragraph"), settings)]
    return sentence_windows(text, block.start, block.end, settings.max_tokens, settings.overlap_sentences)


# ---------------------------------------------------------------------------- packing

def pack_blocks(text: str, blocks: Sequence[Block], max_tokens: int, min_tokens: int = 0) -> list[Chunk]:
    """Greedily pack consecutive blocks into chunks of at most max_tokens, never breaking a
    block. Atomic (oversized) blocks and sentence windows stand alone. A trailing chunk
    smaller than min_tokens borrows whole blocks from the previous chunk when they fit."""
    groups: list[list[Block]] = []
    sizes: list[int] = []
    cur: list[Block] = []
    size = 0
    for b in blocks:
        n = count_tokens(text[b.start:b.end])
        alone = b.standalone or n > max_tokens
        if cur and (alone or size + n > max_tokens or cur[-1].standalone):
            groups.append(cur)
            sizes.append(size)
            cur, size = [], 0
        cur.append(b)
        size += n
    if cur:
        groups.append(cur)
        sizes.append(size)
    if len(groups) >= 2 and sizes[-1] < min_tokens and not any(b.standalone for b in groups[-1]):
        prev, tail = groups[-2], groups[-1]
        while len(prev) > 1 and sizes[-1] < min_tokens and not prev[-1].standalone:
            n = count_tokens(text[prev[-1].start:prev[-1].end])
            if sizes[-1] + n > max_tokens:
                break
            tail.insert(0, prev.pop())
            sizes[-2] -= n
            sizes[-1] += n
    return [Chunk(g[0].start, g[-1].end, tuple(b.kind for b in g), s > max_tokens) for g, s in zip(groups, sizes)]


# ---------------------------------------------------------------------------- documents

def envelope_for(doc: SourceDocument, authority: Mapping[str, int] = DEFAULT_AUTHORITY) -> Envelope:
    name = doc.authority or doc.doc_type
    return Envelope(
        doc_id=doc.doc_id, version=doc.version, tenant=doc.tenant, title=doc.title, acl=doc.acl,
        entities=doc.entities, doc_type=doc.doc_type, authority=name,
        authority_rank=authority.get(name, authority.get("unknown", 0)), source_url=doc.source_url,
        published_at=doc.published_at, ingested_at=doc.ingested_at, effective_from=doc.effective_from,
        effective_to=doc.effective_to, supersedes=doc.supersedes, superseded_by=doc.superseded_by,
        condition=doc.condition, events=doc.events, extracted=doc.extracted,
    )


def _section_blocks(doc: SourceDocument, section: Section) -> list[Block]:
    text = doc.text
    out: list[Block] = []
    for s, e in section.spans:
        if doc.format == "markdown":
            out.extend(markdown_blocks(text, s, e))
        elif doc.format == "text":
            out.extend(text_blocks(text, s, e))
        elif section.anchor == "module" and section.heading_path == ():
            out.extend(text_blocks(text, s, e, kind="code-python"))
        elif (span := strip_span(text, s, e)):
            out.append(Block(*span, "code-python"))
    return out


def plan_chunks(doc: SourceDocument, settings: ChunkSettings = ChunkSettings()) -> list[tuple[Section, list[Chunk]]]:
    """Sections with their chunks (spans into doc.text), before records are built. Exposed so
    callers and tests can see which chunks are deliberately oversized."""
    if doc.format == "markdown":
        sections = parse_markdown_sections(doc.text)
    elif doc.format == "python":
        sections = parse_python_sections(doc.text)
    else:
        sections = [Section("top", (), ((0, len(doc.text)),))]
    plan = []
    for section in sections:
        chunks: list[Chunk] = []
        # Pack within each span only: python "module" spans are not adjacent in the source.
        for s, e in section.spans:
            span_section = Section(section.anchor, section.heading_path, ((s, e),))
            units = [u for b in _section_blocks(doc, span_section) for u in expand_block(doc.text, b, settings)]
            chunks.extend(pack_blocks(doc.text, units, settings.max_tokens, settings.min_tokens))
        if chunks:
            plan.append((section, chunks))
    return plan


def chunk_document(
    doc: SourceDocument,
    settings: ChunkSettings = ChunkSettings(),
    authority: Mapping[str, int] = DEFAULT_AUTHORITY,
) -> tuple[list[Passage], list[ParentSection]]:
    """Passages (retrieval units) and parent sections (expansion units) of one document."""
    envelope = envelope_for(doc, authority)
    passages: list[Passage] = []
    parents: list[ParentSection] = []
    for section, chunks in plan_chunks(doc, settings):
        parent_id = f"{doc.key}#{section.anchor}"
        body = "\n\n".join(doc.text[s:e].strip() for s, e in section.spans if doc.text[s:e].strip())
        parents.append(ParentSection(parent_id=parent_id, anchor=section.anchor, heading_path=section.heading_path,
                                     text=body, token_count=count_tokens(body), envelope=envelope))
        for i, chunk in enumerate(chunks, 1):
            text = doc.text[chunk.start:chunk.end].strip()
            if chunk.oversized:
                log.debug("%s: %s chunk over max_tokens kept whole", parent_id, "/".join(chunk.kinds))
            anchor = f"{section.anchor}.{i}"
            passages.append(Passage(
                passage_id=f"{doc.key}#{anchor}", anchor=anchor, heading_path=section.heading_path,
                parent_id=parent_id, text=text, context="", chunker_version=CHUNKER_VERSION,
                token_count=count_tokens(text), envelope=envelope,
            ))
    return passages, parents
