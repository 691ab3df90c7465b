"""Envelope enrichment at build time (DESIGN §7, after chunking's input is validated):
fill the envelope fields a source left empty from what its text states, extractively
and deterministically, so evidence resolution works on corpora whose facts live only in
prose.

Extracted, each only where the source field is empty (source metadata always wins):

- ``condition`` (:mod:`.enrich_conditions`): a stopping condition on a stated state,
  written as "until <what>" so the resolver's matching (``core.evidence.conditions``)
  reads one form;
- ``events`` (:mod:`.enrich_events`): completion events with their dates in deployment,
  rollout, change or migration records;
- ``supersedes`` / ``superseded_by`` (:mod:`.enrich_supersession`): the other documents a
  sentence says this one replaces or is replaced by;
- ``effective_from`` / ``effective_to`` (:mod:`.enrich_validity`): the dates this document
  says of itself that it is in force from or until.

Dates are read by ``core.text.nlp.parse_date`` (dateparser): any common full form, never a
date without a year. Only sentences holding a trigger word are looked at further, and
only condition sentences are parsed by spaCy, so the cost on documents without such
sentences is a few regular-expression scans.

Every filled field is named in ``extracted``, so a reader can tell a source fact from an
extracted one. The same function runs in ``core.ingest.pipeline.prepare`` and in the
Spark build's chunk stage.
"""

from __future__ import annotations

import re

from pydantic import ValidationError

from quarry.core.ingest.enrich_conditions import find_condition
from quarry.core.ingest.enrich_events import find_events
from quarry.core.ingest.enrich_supersession import find_supersession
from quarry.core.ingest.enrich_validity import find_effective
from quarry.core.records import SourceDocument
from quarry.core.text.nlp import DEFAULT_PIPELINE
from quarry.core.text.units import line_sentences

__all__ = ["FIELDS", "enrich"]

FIELDS = ("condition", "events", "supersedes", "superseded_by", "supersedes_titles", "effective_from", "effective_to")  # what it may fill

_ABBREV_MONTH = re.compile(r"\b(?:jan|feb|mar|apr|jun|jul|aug|sep|sept|oct|nov|dec)\.$", re.IGNORECASE)


def _rejoin(sents: list[str]) -> list[str]:
    """Sentences with a date cut after an abbreviated month ("Jan." | "20, 2026") joined."""
    out: list[str] = []
    for s in sents:
        if out and _ABBREV_MONTH.search(out[-1]) and s[:1].isdigit():
            out[-1] = f"{out[-1]} {s}"
        else:
            out.append(s)
    return out


def enrich(doc: SourceDocument, pipeline: str = DEFAULT_PIPELINE) -> SourceDocument:
    """``doc`` with empty envelope fields filled from its text and named in ``extracted``.
    Returns ``doc`` itself when nothing was found. ``pipeline`` names the spaCy pipeline
    that tells instructions from statements (loaded once per process)."""
    sents = _rejoin(line_sentences(doc.text))
    found: dict[str, object] = {}
    if doc.condition is None and (c := find_condition(sents, pipeline)):
        found["condition"] = c
    if not doc.events and (ev := find_events(doc, sents)):
        found["events"] = ev
    sup, by, titles = find_supersession(doc, sents) if not (doc.supersedes and doc.superseded_by) else ((), (), ())
    if not doc.supersedes and sup:
        found["supersedes"] = sup
    if not doc.supersedes and not doc.supersedes_titles and titles:
        found["supersedes_titles"] = titles
    if not doc.superseded_by and by:
        found["superseded_by"] = by
    start, end = find_effective(sents, doc.doc_id, doc.title, tenant=doc.tenant, published=doc.published_at,
                                text=doc.text) if doc.effective_from is None or doc.effective_to is None else (None, None)
    if doc.effective_from is None and start is not None:
        found["effective_from"] = start
    if doc.effective_to is None and end is not None:
        found["effective_to"] = end
    if not found:
        return doc
    data = doc.model_dump()
    extracted = tuple(sorted(set(doc.extracted) | set(found)))
    try:
        return SourceDocument.model_validate({**data, **found, "extracted": extracted})
    except ValidationError:
        # Extracted dates that contradict the source's own (end before start): drop them.
        found = {k: v for k, v in found.items() if k not in ("effective_from", "effective_to")}
        if not found:
            return doc
        extracted = tuple(sorted(set(doc.extracted) | set(found)))
        return SourceDocument.model_validate({**data, **found, "extracted": extracted})
