"""Units that fit ``max_tokens`` and chunks packed from them: sentence windows with
overlap for prose without structure, seams inside over-limit code, token-start cuts as
the last resort, and greedy packing of consecutive blocks. Token counts and sentence
boundaries are :mod:`quarry.core.text.units`'s."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from quarry.core.ingest.chunk_blocks import Block, indent_of, is_blank, lines_of, text_blocks
from quarry.core.text.units import count_tokens, sentence_spans, spans_between, strip_span, token_starts

__all__ = ["Chunk", "code_segments", "line_pieces", "pack_blocks", "sentence_windows", "token_pieces"]


@dataclass(frozen=True)
class Chunk:
    start: int
    end: int
    kinds: tuple[str, ...]
    oversized: bool  # over max_tokens on purpose (an atomic table or code block)


def token_pieces(text: str, start: int, end: int, max_tokens: int) -> list[tuple[int, int]]:
    """Last resort for a run with no seam: cut at every max_tokens-th token start. Cutting at
    token starts keeps each piece's count exact (no word is split)."""
    return spans_between(text, start, token_starts(text, start, end)[max_tokens::max_tokens], end)


def sentence_windows(text: str, start: int, end: int, max_tokens: int, overlap: int) -> list[Block]:
    """Windows of whole sentences up to max_tokens; each window repeats the last ``overlap``
    sentences of the previous one (fewer if they would not fit with the next sentence)."""
    units: list[tuple[int, int]] = []
    for s, e in sentence_spans(text, start, end):
        units.extend(token_pieces(text, s, e, max_tokens) if count_tokens(text[s:e]) > max_tokens else [(s, e)])
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


def code_segments(text: str, start: int, end: int, python: bool) -> list[tuple[int, int]]:
    """Seams inside an over-limit code block: def/class lines at the shallowest indent where
    there are several (python), else blank-line groups."""
    lines = lines_of(text, start, end)
    if python:
        heads = [(i, indent_of(l)) for i, (_, _, l) in enumerate(lines)
                 if re.match(r"[ \t]*(?:async[ \t]+def|def|class|@)\b", l)]
        for depth in sorted({d for _, d in heads}):
            cut = [i for i, d in heads if d == depth and not (i > 0 and re.match(r"[ \t]*@", lines[i - 1][2]))]
            if len(cut) > 1 or (cut and cut[0] > 0):
                bounds = sorted({0, *cut})
                stops = [lines[b][0] for b in bounds[1:]] + [end]
                spans = [strip_span(text, lines[b][0], stop) for b, stop in zip(bounds, stops)]
                return [sp for sp in spans if sp]
    return [(b.start, b.end) for b in text_blocks(text, start, end)]


def line_pieces(text: str, start: int, end: int, max_tokens: int) -> list[Block]:
    units = []
    for s, e, line in lines_of(text, start, end):
        if not is_blank(line):
            units.extend(Block(a, b, "code") for a, b in
                         (token_pieces(text, s, e, max_tokens) if count_tokens(line) > max_tokens else [(s, e)]))
    return units


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
