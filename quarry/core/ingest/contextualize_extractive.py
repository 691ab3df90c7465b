"""The ``extractive`` contextualizer (the default): title, doc type, entity scope, heading
path and the document's lead sentence. Deterministic and free."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from quarry.core.ingest.contextualize import CostAccount, check_same_doc
from quarry.core.records import Passage, SourceDocument
from quarry.core.text.markdown import FENCE, HEADING, HTML_ONLY, LIST_ITEM, QUOTE, SETEXT_UNDERLINE, TABLE_ROW, THEMATIC_BREAK
from quarry.core.text.units import section_path, split_sentences

__all__ = ["ExtractiveContextualizer", "clip", "lead_sentences"]

_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
_CODE = re.compile(r"`([^`]*)`")
_STRONG = re.compile(r"(\*\*|__)(.+?)\1")
_EM = re.compile(r"(?<![\w*])[*_](?![\s*_])(.+?)(?<![\s*_])[*_](?![\w*])")  # guards snake_case
_TAG = re.compile(r"<[^>]+>")
_WS = re.compile(r"\s+")
_PY_DOCSTRING = re.compile(r"\A(?:\s|#[^\n]*\n)*[rRuU]?(\"\"\"|''')(.*?)\1", re.S)


def _strip_markdown(line: str) -> str:
    line = QUOTE.sub("", line)
    line = LIST_ITEM.sub("", line)
    line = _LINK.sub(r"\1", line)
    line = _CODE.sub(r"\1", line)
    line = _STRONG.sub(r"\2", line)
    line = _EM.sub(r"\1", line)
    return _TAG.sub("", line)


def _first_paragraph(text: str, markdown: bool, skip_quotes: bool = False) -> str:
    """The first run of prose lines: no headings, code fences, tables or rules."""
    lines = text.splitlines()
    para: list[str] = []
    in_fence = False
    for i, line in enumerate(lines):
        if markdown and FENCE.match(line):
            in_fence = not in_fence
            if para:
                break
            continue
        if in_fence:
            continue
        blank = not line.strip()
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        structural = markdown and (
            HEADING.match(line) or THEMATIC_BREAK.match(line) or TABLE_ROW.match(line) or HTML_ONLY.match(line)
            or SETEXT_UNDERLINE.match(line) or (line.strip() and SETEXT_UNDERLINE.match(nxt) and nxt.strip())
            or (skip_quotes and QUOTE.match(line))
        )  # fmt: skip
        if blank or structural:
            if para:
                break
            continue
        para.append(_strip_markdown(line) if markdown else line)
    return _WS.sub(" ", " ".join(para)).strip()


def lead_sentences(doc: SourceDocument, max_sentences: int = 1) -> str:
    """The document's opening sentence(s), markdown syntax removed."""
    if doc.format == "python":
        m = _PY_DOCSTRING.match(doc.text)
        para = _first_paragraph(m.group(2), markdown=False) if m else ""
    else:
        md = doc.format == "markdown"
        # Callouts ("> Owner: ...") say less about the document than its first prose; use
        # them only when there is nothing else.
        para = _first_paragraph(doc.text, md, skip_quotes=md) or _first_paragraph(doc.text, md)
    if not para:
        return ""
    sentences = split_sentences(para)
    lead = " ".join(sentences[:max_sentences]).strip()
    return lead if lead[-1:] in ".!?" else lead + "."


def clip(text: str, max_chars: int) -> str:
    if len(text) <= max_chars:
        return text
    cut = text[: max_chars - 1]
    space = cut.rfind(" ")
    if space > max_chars // 2:  # prefer a word boundary unless it loses too much
        cut = cut[:space]
    return cut.rstrip(" ,;:-—") + "…"


class ExtractiveContextualizer:
    """``From <title> (<doc_type>, <entities>) — section: A > B. <lead sentence>``."""

    name = "extractive"

    def __init__(self, max_lead_sentences: int = 1, max_chars: int = 300) -> None:
        if max_lead_sentences < 0 or max_chars < 20:
            raise ValueError("max_lead_sentences must be >= 0 and max_chars >= 20")
        self.max_lead_sentences = max_lead_sentences
        self.max_chars = max_chars
        self.account = CostAccount()  # always zero: kept so jobs report every kind alike

    def _header(self, doc: SourceDocument) -> str:
        scope = ", ".join([doc.doc_type, *doc.entities])
        return f"From {doc.title.strip() or doc.doc_id} ({scope})"

    def preamble(self, doc: SourceDocument, heading_path: Sequence[str], lead: str) -> str:
        path = section_path(doc.title, heading_path)
        out = self._header(doc)
        if path:
            out += " — section: " + " > ".join(path)
        out += "."
        if lead:
            out += " " + lead
        return clip(out, self.max_chars)

    def contextualize(self, doc: SourceDocument, passages: Sequence[Passage]) -> list[str]:
        check_same_doc(doc, passages)
        lead = lead_sentences(doc, self.max_lead_sentences) if self.max_lead_sentences else ""
        return [self.preamble(doc, p.heading_path, lead) for p in passages]

    def contextualize_many(self, items: Sequence[tuple[SourceDocument, Sequence[Passage]]]) -> list[list[str]]:
        return [self.contextualize(d, ps) for d, ps in items]

    @property
    def cost(self) -> dict[str, Any]:
        return self.account.snapshot()
