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

Where each part lives: :mod:`.chunk_sections` splits a document into sections,
:mod:`.chunk_blocks` a section body into blocks, :mod:`.chunk_packing` cuts over-limit
blocks into units and packs units into chunks; this module holds the settings, the
over-limit policy (:func:`expand_block`) and the passages and parents built from a plan.

Token counts and sentence boundaries are :mod:`quarry.core.text.units`'s; markdown line syntax is
:mod:`quarry.core.text.markdown`'s.

Every passage text is an exact (stripped) slice of ``doc.text``; heading lines are carried
in ``heading_path`` rather than in ``text``. A section with no body of its own (a heading
directly followed by a sub-heading) yields no parent and no passage.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from quarry.core.ingest.chunk_blocks import Block, lines_of, markdown_blocks, text_blocks
from quarry.core.ingest.chunk_packing import Chunk, code_segments, line_pieces, pack_blocks, sentence_windows
from quarry.core.ingest.chunk_sections import Section, parse_markdown_sections, parse_python_sections
from quarry.core.records import DEFAULT_AUTHORITY, Envelope, ParentSection, Passage, SourceDocument
from quarry.core.text.markdown import LIST_ITEM
from quarry.core.text.units import count_tokens, strip_span

__all__ = ["CHUNKER_VERSION", "ChunkSettings", "chunk_document", "envelope_for", "expand_block", "plan_chunks"]

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
        for s, e in code_segments(text, block.start, block.end, block.kind == "code-python"):
            m = count_tokens(text[s:e])
            if m <= settings.hard_limit:
                out.append(Block(s, e, "code", atomic=m > settings.max_tokens))
            else:
                out.extend(line_pieces(text, s, e, settings.max_tokens))
        return out
    if block.kind == "list":
        # Nested items are the next seam inside a long item.
        lines = lines_of(text, block.start, block.end)
        cuts = [0] + [i for i, (_, _, l) in enumerate(lines) if i and LIST_ITEM.match(l)]
        parts = [strip_span(text, lines[c][0], lines[cuts[k + 1] - 1][1] if k + 1 < len(cuts) else block.end)
                 for k, c in enumerate(cuts)]
        if len(parts) > 1:
            return [u for p in parts if p for u in expand_block(text, Block(*p, "paragraph"), settings)]
    return sentence_windows(text, block.start, block.end, settings.max_tokens, settings.overlap_sentences)


# ---------------------------------------------------------------------------- documents

def envelope_for(doc: SourceDocument, authority: Mapping[str, int] = DEFAULT_AUTHORITY) -> Envelope:
    name = doc.authority or doc.doc_type
    return Envelope(
        doc_id=doc.doc_id, version=doc.version, tenant=doc.tenant, title=doc.title, acl=doc.acl,
        entities=doc.entities, doc_type=doc.doc_type, authority=name,
        authority_rank=authority.get(name, authority.get("unknown", 0)), source_url=doc.source_url,
        published_at=doc.published_at, ingested_at=doc.ingested_at, effective_from=doc.effective_from,
        effective_to=doc.effective_to, supersedes=doc.supersedes, superseded_by=doc.superseded_by,
        supersedes_titles=doc.supersedes_titles,
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
