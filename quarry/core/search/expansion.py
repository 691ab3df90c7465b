"""Expansion (DESIGN §4): the survivors delivered in order, each expanded to its parent
section when that fits the token budget, and the one envelope view of a passage
(:func:`excerpt`) that search delivers and fetch returns."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence

from quarry.core.index.filters import validity
from quarry.core.index.shards import TenantIndex
from quarry.core.records import Excerpt, Passage, Principal, StageReport
from quarry.core.search.records import Expansion, FirstStage
from quarry.core.search.settings import SearchSettings
from quarry.core.text.units import count_tokens


def truncate_tokens(text: str, limit: int) -> str:
    """The longest prefix of ``text`` (cut at a word boundary) within ``limit`` tokens."""
    if count_tokens(text) <= limit:
        return text
    words = text.split(" ")
    lo, hi = 0, len(words)
    while lo < hi:  # binary search on word count
        mid = (lo + hi + 1) // 2
        if count_tokens(" ".join(words[:mid])) <= limit:
            lo = mid
        else:
            hi = mid - 1
    return " ".join(words[:lo])


def excerpt(p: Passage, text: str | None = None, expanded_to: str | None = None, truncated: bool = False,
            valid_at: dt.date | None = None, token_count: int | None = None) -> Excerpt:
    """The one envelope view of a passage, as search delivers it and fetch returns it:
    ``text`` is what is shown (default the passage's own), ``expanded_to`` the parent
    section it was expanded to; ``token_count`` is text's count when the caller has it
    (the index stores one per passage and section)."""
    e = p.envelope
    text = p.text if text is None else text
    return Excerpt(
        passage_id=p.passage_id, doc_id=e.doc_id, version=e.version, anchor=p.anchor, heading_path=p.heading_path,
        parent_id=p.parent_id,
        title=e.title, doc_type=e.doc_type, text=text, expanded_to=expanded_to, truncated=truncated,
        effective_from=e.effective_from, effective_to=e.effective_to, validity=validity(e, valid_at),
        authority=e.authority, authority_rank=e.authority_rank, entities=e.entities, supersedes=e.supersedes,
        superseded_by=e.superseded_by, condition=e.condition, events=e.events, source_url=e.source_url,
        token_count=count_tokens(text) if token_count is None else token_count,
    )


def expand(
    index: TenantIndex, principal: Principal, passages: Sequence[Passage], ceiling: int,
    valid_at: dt.date | None, do_expand: bool = True,
) -> tuple[list[Excerpt], bool]:
    """Deliver survivors in order, each expanded to its parent section when that fits the
    remaining token budget, else its own text, else a truncated prefix (flagged). The
    total never exceeds ``ceiling``; anything cut or left out sets ``truncated``."""
    out: list[Excerpt] = []
    left, truncated = ceiling, False
    delivered_parents: set[str] = set()
    for p in passages:
        if left <= 0:
            truncated = True
            break
        parent = index.parent(p.parent_id, principal) if do_expand else None
        if parent is not None and parent.parent_id not in delivered_parents and parent.text != p.text:
            n = parent.token_count  # counted at build time (count_tokens), like p.token_count
            if n <= left:
                out.append(excerpt(p, parent.text, parent.parent_id, False, valid_at, n))
                delivered_parents.add(parent.parent_id)
                left -= n
                continue
        n = p.token_count
        if n <= left:
            out.append(excerpt(p, p.text, None, False, valid_at, n))
            left -= n
        else:
            cut = truncate_tokens(p.text, left)
            truncated = True
            if cut:
                ex = excerpt(p, cut, None, True, valid_at)
                out.append(ex)
                left -= ex.token_count
            break
    return out, truncated


def survivor_passages(index: TenantIndex, first: FirstStage, survivors: Sequence[str],
                      parsed: Mapping[str, Passage] | None = None) -> list[Passage]:
    """The survivors' passages in delivered order, read by row (the first stage's mask let
    them through), reusing any the second stage already parsed."""
    rows = {c.passage_id: c.row for c in first.candidates}
    parsed = parsed or {}
    return [parsed.get(pid) or index.passage_at(rows[pid]) for pid in survivors]


def pool_ids(ranked: Sequence[str], known: Sequence[str], width: int) -> list[str]:
    """The ranked ids after ``known`` (the delivered survivors), in rank order, until
    ``width`` ids in all: what resolution decides over beside the delivered passages, so
    that a narrower ``top_k`` does not change the decision."""
    seen = set(known)
    return [pid for pid in ranked if pid not in seen][: max(0, width - len(seen))]


def pool_passages(index: TenantIndex, first: FirstStage, known: Sequence[str], width: int,
                  parsed: Mapping[str, Passage] | None = None) -> list[Passage]:
    """The passages of :func:`pool_ids` over the first stage's candidates (fused order),
    read by row: the first stage's mask let them through."""
    rows, parsed = {c.passage_id: c.row for c in first.candidates}, parsed or {}
    return [parsed.get(pid) or index.passage_at(rows[pid])
            for pid in pool_ids([c.passage_id for c in first.candidates], known, width)]


def expansion(index: TenantIndex, principal: Principal, passages: Sequence[Passage],
              settings: SearchSettings, valid_at: dt.date | None) -> Expansion:
    excerpts, truncated = expand(index, principal, passages, settings.delivered_token_ceiling, valid_at,
                                 settings.expand)
    return Expansion(excerpts=tuple(excerpts), truncated=truncated,
                     report=StageReport(name="expand", kept=len(excerpts), dropped=len(passages) - len(excerpts),
                                        note="truncated" if truncated else ""))


def nothing_expanded() -> Expansion:
    return Expansion(excerpts=(), truncated=False, report=StageReport(name="expand", kept=0))
