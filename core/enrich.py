"""Envelope enrichment at build time (DESIGN §7, after chunking's input is validated):
fill the envelope fields a source left empty from what its text states, extractively
and deterministically, so evidence resolution works on corpora whose facts live only in
prose.

Extracted, each only where the source field is empty (source metadata always wins):

- ``condition``: a stopping condition on a stated state, "Acme remains on the 16:00 cutoff
  until cutover" -> "until cutover". The sentence must state a state that holds (remains,
  stays, keeps, instead of, ...): an instruction such as "watch the status until every
  payout shows sent" is not a validity condition.
- ``events``: in deployment or rollout records, "<subject> completed [successfully] on
  <date>" -> ("<subject> completed", date). No entity is added: where the text names
  none, the resolver takes the record's own entity scope (prefixing "acme" would turn
  "Globex cutover completed" in an Acme record into Acme's cutover).
- ``supersedes`` / ``superseded_by``: "replaces" / "supersedes" / "superseded by" /
  "replaced by" followed, in the same sentence, by a doc id (``settlement-runbook``,
  ``refund-policy@1``; written in backticks or id-shaped).
- ``effective_from`` / ``effective_to``: "effective from <date>", "in force from <date>",
  "takes effect on <date>"; "effective until/to/through <date>", "expires on <date>" —
  only where the sentence speaks of this document ("This policy is effective from ...",
  "Effective from: ...").

Every filled field is named in ``extracted``, so a reader can tell a source fact from an
extracted one. The same function runs in ``core.pipeline.prepare`` and in the Spark
build's chunk stage.
"""

from __future__ import annotations

import datetime as dt
import re

from pydantic import ValidationError

from quarry.core.records import Event, SourceDocument
from quarry.core.text import line_sentences
from quarry.core.tokenizer import tokenize

_MONTHS = {m: i for i, m in enumerate(
    ("january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
     "november", "december"), 1)}
_MONTH = "|".join(m.capitalize() for m in _MONTHS) + "|" + "|".join(_MONTHS)
# ISO, "15 January 2026" and "January 15, 2026"; a date without a year is never guessed.
DATE = (rf"(?:\d{{4}}-\d{{2}}-\d{{2}}|\d{{1,2}}\s+(?:{_MONTH})\s+\d{{4}}|(?:{_MONTH})\s+\d{{1,2}},?\s+\d{{4}})")

_STATE = frozenset(tokenize("remains remain stays stay keeps keep continues continue applies apply valid "
                            "pinned waived instead temporary temporarily holds hold exception"))
_UNTIL = re.compile(r"\buntil\s+(?P<cond>[^.;:!?\n]{2,120})", re.IGNORECASE)
_CUT = re.compile(r",|\s(?:unless|and then|after which|when|at which)\s", re.IGNORECASE)

_COMPLETED = re.compile(
    r"(?P<subj>(?:[\w`'’-]+\s+){0,4}?)(?:was\s+|were\s+|has\s+been\s+)?"
    r"(?P<verb>completed|finished|went\s+live|rolled\s+out)(?:\s+successfully)?\s+on\s+(?P<date>" + DATE + ")",
    re.IGNORECASE)
_EVENT_DOC = re.compile(r"\b(?:rollout|deployment|release|cutover|migration)\s+record\b", re.IGNORECASE)

_SUPERSEDE = re.compile(r"\b(?P<verb>replaces|supersedes|superseded\s+by|replaced\s+by)\b(?P<rest>[^.;!?\n]*)",
                        re.IGNORECASE)
_BACKTICKED = re.compile(r"`([^`\s]+)`")
_IDLIKE = re.compile(r"(?<![\w@#])([A-Za-z][A-Za-z0-9_.:/]*[-_/][A-Za-z0-9_./:-]*[A-Za-z0-9](?:@[A-Za-z0-9_.-]+)?)")
_DOC_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_./:-]{0,200}(?:@[A-Za-z0-9][A-Za-z0-9_.-]{0,40})?$")

_SELF = r"(?:^|\bthis\s+(?:policy|document|agreement|contract|amendment|runbook|page|version|exception|rule)\b[^.]*?)"
_FROM = re.compile(_SELF + r"\b(?:is\s+)?(?:effective|in\s+force|takes\s+effect|applies)\s*"
                   r"(?:from|on|as\s+of)?:?\*{0,2}\s*(?P<date>" + DATE + ")", re.IGNORECASE)
_TO = re.compile(_SELF + r"\b(?:is\s+)?(?:effective|in\s+force|valid)\s+(?:until|to|through)\s*:?\*{0,2}\s*(?P<date>"
                 + DATE + r")|\bexpires\s+on\s+(?P<date2>" + DATE + ")", re.IGNORECASE)

FIELDS = ("condition", "events", "supersedes", "superseded_by", "effective_from", "effective_to")  # what it may fill


def parse_date(text: str) -> dt.date | None:
    """A date written as ISO, "15 January 2026" or "January 15, 2026"; None otherwise."""
    t = text.strip().replace(",", "")
    try:
        if re.fullmatch(r"\d{4}-\d{2}-\d{2}", t):
            return dt.date.fromisoformat(t)
        parts = t.split()
        if len(parts) == 3 and parts[0].isdigit():
            return dt.date(int(parts[2]), _MONTHS[parts[1].lower()], int(parts[0]))
        if len(parts) == 3:
            return dt.date(int(parts[2]), _MONTHS[parts[0].lower()], int(parts[1]))
    except (KeyError, ValueError):
        return None
    return None


def find_condition(sents: list[str]) -> str | None:
    for s in sents:
        for m in _UNTIL.finditer(s):
            if _STATE & set(tokenize(s[:m.start()])):
                cond = _CUT.split(m.group("cond"), maxsplit=1)[0].replace("`", "").strip(" *_")
                if cond:
                    return f"until {cond}"
    return None


def find_events(doc: SourceDocument, sents: list[str]) -> tuple[Event, ...]:
    if doc.doc_type != "deployment" and not _EVENT_DOC.search(f"{doc.title}\n{doc.text[:300]}"):
        return ()
    out: dict[tuple[str, dt.date], Event] = {}
    for s in sents:
        for m in _COMPLETED.finditer(s):
            on = parse_date(m.group("date"))
            words = [w.strip("`") for w in m.group("subj").split()]
            while words and words[0].lower() in ("the", "a", "an", "its", "our", "their", "and", "then"):
                words = words[1:]
            if on is None or not words:
                continue
            what = f"{' '.join(words).lower()} completed"
            if len(what) >= 3:
                out.setdefault((what, on), Event(what=what, on=on))
    return tuple(sorted(out.values(), key=lambda e: (e.on, e.what)))


def _ids_in(rest: str, own: str) -> list[str]:
    found = _BACKTICKED.findall(rest) or _IDLIKE.findall(rest)
    ids = []
    for f in found:
        f = f.strip(".,)(")
        if _DOC_ID.match(f) and any(c in f for c in "-_@"):
            if f.split("@")[0] != own and f not in ids:
                ids.append(f)
    return ids[:1]  # the first id after the verb: "replaces X, which replaced Y" names X


def find_supersession(doc: SourceDocument, sents: list[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    sup: list[str] = []
    by: list[str] = []
    for s in sents:
        for m in _SUPERSEDE.finditer(s):
            target = by if "by" in m.group("verb").lower() else sup
            for i in _ids_in(m.group("rest"), doc.doc_id):
                if i not in target:
                    target.append(i)
    return tuple(sorted(sup)), tuple(sorted(by))


def find_effective(sents: list[str]) -> tuple[dt.date | None, dt.date | None]:
    start = end = None
    for s in sents:
        if start is None and (m := _FROM.search(s)):
            start = parse_date(m.group("date"))
        if end is None and (m := _TO.search(s)):
            end = parse_date(m.group("date") or m.group("date2"))
    return start, end


def enrich(doc: SourceDocument) -> SourceDocument:
    """``doc`` with empty envelope fields filled from its text and named in ``extracted``.
    Returns ``doc`` itself when nothing was found."""
    sents = line_sentences(doc.text)
    found: dict[str, object] = {}
    if doc.condition is None and (c := find_condition(sents)):
        found["condition"] = c
    if not doc.events and (ev := find_events(doc, sents)):
        found["events"] = ev
    sup, by = find_supersession(doc, sents) if not (doc.supersedes and doc.superseded_by) else ((), ())
    if not doc.supersedes and sup:
        found["supersedes"] = sup
    if not doc.superseded_by and by:
        found["superseded_by"] = by
    start, end = find_effective(sents)
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
