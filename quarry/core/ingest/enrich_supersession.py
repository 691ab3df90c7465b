"""Envelope enrichment of ``supersedes`` / ``superseded_by``: a sentence naming another
doc id (``settlement-runbook``, ``refund-policy@1``; in backticks or id-shaped) after
"replaces", "supersedes", "rescinds", "withdraws", "retires", "takes over from", "takes the place
of", "succeeds", "closes", "discontinues", "is closing" (-> ``supersedes``), or after "replaced by",
"superseded by", "succeeded by", "in favour of" / "in favor of" (-> ``superseded_by``);
and "<id> is rescinded / withdrawn / retired / superseded / no longer in force" (this
document speaking of the other -> ``supersedes``), also as "It is withdrawn ..." right after a
sentence naming the other. Named by title instead ("takes over from 'Mooring charges (2025)'"),
the other document is a phrase matched when resolved, when the verb's subject is this document:
"this standard", "these charges" (the plural verb, "take over from"), or its title's own code
("SP-4 takes over from Slipway Procedure SP-3" in "Slipway Procedure SP-4").
"""

from __future__ import annotations

import re

from quarry.core.records import SourceDocument

__all__ = ["SUPERSEDES_VERB", "doc_ids_in", "find_supersession", "pronoun_ids"]

# The active verbs by which this document ends another (also read by the validity enricher:
# "takes over from X from 2 March" makes this document in force from then).
SUPERSEDES_VERB = (r"(?:replaces?|supersedes?|rescinds|withdraws|retires|revokes|takes?\s+over\s+from|stands?\s+in\s+for"
                   r"|takes?\s+the\s+place\s+of|succeeds|(?:is|are)\s+(?:closing|withdrawing|discontinuing|retiring)"
                   r"|closes|discontinues)")
_SUPERSEDE = re.compile(r"\b(?P<verb>superseded\s+by|replaced\s+by|succeeded\s+by|in\s+favou?r\s+of|"
                        + SUPERSEDES_VERB + r")\b(?P<rest>[^.;!?\n]*)", re.IGNORECASE)
_PASSIVE = re.compile(r"(?P<head>[^.;!?\n]*?)\b(?:is|are|was|were|has\s+been|have\s+been|hereby|now)\s+(?:hereby\s+)?"
                      r"(?:rescinded|withdrawn|retired|superseded|replaced|revoked|deprecated|no\s+longer\s+in\s+"
                      r"(?:force|effect))\b(?P<rest>[^.;!?\n]*)", re.IGNORECASE)
_BACKTICKED = re.compile(r"`([^`\s]+)`")
_IDLIKE = re.compile(r"(?<![\w@#])([A-Za-z][A-Za-z0-9_.:/]*[-_/][A-Za-z0-9_./:-]*[A-Za-z0-9](?:@[A-Za-z0-9_.-]+)?)")
# An id written without backticks must look like one: a digit, "@" or "_" in it, or a
# document noun as its last part (``onboarding-guide``, ``travel-policy``).
_ID_SHAPED = re.compile(r"[\d@_]|[-/](?:policy|policies|runbook|guide|sop|page|doc|handbook|manual|procedure|playbook"
                        r"|standard|notice|faq|wiki|process|agreement|contract|terms|schedule|rates?|card)$",
                        re.IGNORECASE)
_DOC_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_./:-]{0,200}(?:@[A-Za-z0-9][A-Za-z0-9_.-]{0,40})?$")
_SUP_TRIGGER = re.compile(r"\b(?:supersed|replac|succeed|favou?r|rescind|withdr[ae]w|retir|revok|deprecat|stands\s+in"
                          r"|no\s+longer|takes?\s+over|takes?\s+the\s+place|clos|discontinu)", re.IGNORECASE)
# "We are closing the scheme (`old-page`). It is withdrawn from 16 February": a sentence whose
# subject is only a pronoun speaks of the document the sentence before it named.
_PRONOUN = re.compile(r"^\W*(?:it|they|this|these)\W*$", re.IGNORECASE)


def pronoun_ids(head: str, previous: str, own: str) -> list[str]:
    """The ids of the sentence before, when ``head`` (a sentence's subject) is a pronoun."""
    return doc_ids_in(previous, own, first=False) if _PRONOUN.match(head) else []


def doc_ids_in(rest: str, own: str, first: bool = True) -> list[str]:
    """The other documents' ids ``rest`` names (in backticks, or id-shaped), never ``own``:
    the first (``first``) or the last one."""
    ticked = _BACKTICKED.findall(rest)
    found = ticked or _IDLIKE.findall(rest)
    ids = []
    for f in found:
        f = f.strip(".,)(")
        if not (_DOC_ID.match(f) and any(c in f for c in "-_@") and not re.fullmatch(r"[\d./-]+", f)):
            continue
        if f not in ticked and not _ID_SHAPED.search(f):
            continue  # "full-length", "non-initiating": a hyphenated word, not a doc id
        if f.split("@")[0] != own and f not in ids:
            ids.append(f)
    return ids[-1:] if not first else ids[:1]  # the id nearest the verb: "replaces X, which replaced Y" names X


# where a phrase naming a document by title ends: a clause or an aside after it
# (a year in brackets is the title's own: "the File Retention Schedule RS-3 (2024), which ...")
_PHRASE_END = re.compile(r"\s*(?:[,;:]|\((?!(?:19|20)\d\d\))|\s-\s|\b(?:which|that|who|because|so(?![-\d])|and\s+(?:is|are|was)|on\s+(?:that|the\s+same)"
                         r"\s+(?:date|day)|with\s+effect|from\s+\d|as\s+from|as\s+of|effective|for\s+(?:any|all)"
                         r"|on\s+(?:(?:mon|tues|wednes|thurs|fri|satur|sun)day\b|\d)"
                         r")\b)", re.IGNORECASE)
# this document as the subject of an active verb: "this standard stands in for", "it replaces",
# "these charges take over from", "from that day they replace"
_SELF_SUBJECT = re.compile(r"\b(?:this|it|these|they)\b(?:\s+[\w-]+){0,3}\s*$", re.IGNORECASE)
_CODE = re.compile(r"[A-Za-z]+[-/]?\d[\w/-]*")


def _self_subject(head: str, doc: SourceDocument) -> bool:
    """The words before an active verb name this document: "this standard", "these charges",
    or its title's own code ("CP-8 takes over from ..." in "Changeover Cleaning Procedure CP-8")."""
    if _SELF_SUBJECT.search(head):
        return True
    own = {c.lower() for c in _CODE.findall(doc.title or "")}
    return bool(own) and any(w.strip(".,;:()\"'").lower() in own for w in head.split()[-4:])


# a phrase names a document only with a document noun in it ("the fee schedule issued in
# April 2025"; not "the controllers and motors")
_DOC_NOUN = re.compile(r"\b(?:polic(?:y|ies)|schedules?|standards?|handbooks?|guides?|guidance|guidelines|runbooks?"
                       r"|manuals?|procedures?|playbooks?|memos?|memorandum|notices?|agreements?|terms|rules|plans?"
                       r"|price\s+lists?|tariffs?|charters?|codes?|pages?|faqs?|wikis?|sops?|circulars?|directives?"
                       r"|instructions|process|timetables?|rate\s+cards?|protocols?|regulations?|bulletins?)\b",
                       re.IGNORECASE)


# a title in quotes: "takes over from 'Community room hire: charges and conditions (2025)'"
_QUOTED = re.compile(r"\s*(?:the\s+)?(?:\"([^\"\n]{3,160})\"|\u201c([^\u201d\n]{3,160})\u201d|'([^'\n]{3,160})'(?!\w)"
                     r"|\u2018([^\u2019\n]{3,160})\u2019)")


def _title_phrase(text: str) -> str | None:
    """The words naming a document: a title in quotes, whole (a quoted name is a title, with
    or without a document noun); else the words up to the first clause or aside after them."""
    if (q := _QUOTED.match(text)) and 2 <= len((t := next(g for g in q.groups() if g)).split()) <= 20:
        return t.strip()
    words = _PHRASE_END.split(text.strip(), maxsplit=1)[0].strip(" .\"'`")
    if re.match(r"(?:this|it|these|they)\b", words, re.IGNORECASE):
        return None  # this document itself
    return words if 2 <= len(words.split()) <= 14 and _DOC_NOUN.search(words) else None


def find_supersession(doc: SourceDocument, sents: list[str]) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """(doc ids this document supersedes, doc ids it is superseded by, phrases naming by
    title a document it supersedes: ``Envelope.supersedes_titles``, matched when resolved)."""
    sup: list[str] = []
    by: list[str] = []
    titles: list[str] = []
    previous = ""
    for s in sents:
        before, previous = previous, s
        if not _SUP_TRIGGER.search(s):
            continue
        for m in _SUPERSEDE.finditer(s):
            verb = m.group("verb").lower()
            passive = verb.endswith(" by") or "favo" in verb
            if passive and doc_ids_in(s[:m.start()], doc.doc_id):
                continue  # "`a` is superseded by `b`": a link between two other documents
            target = by if passive else sup
            ids = doc_ids_in(m.group("rest"), doc.doc_id)
            for i in ids:
                if i not in target:
                    target.append(i)
            # a phrase naming the document by title, unless an id in backticks names it
            if not passive and not _BACKTICKED.search(m.group("rest")) and _self_subject(s[:m.start()], doc) and (
                    t := _title_phrase(m.group("rest"))) and t not in titles:
                titles.append(t)
        for m in _PASSIVE.finditer(s):
            if re.match(r"\s*(?:by|in\s+favou?r\s+of)\s+(?!this\b)", m.group("rest"), re.IGNORECASE):
                continue  # "<a> is superseded by <b>": a link between two others, or ours above
            ids = doc_ids_in(m.group("head"), doc.doc_id, first=False) or pronoun_ids(m.group("head"), before,
                                                                                      doc.doc_id)
            for i in ids:
                if i not in sup and i not in by:
                    sup.append(i)
            if not _BACKTICKED.search(m.group("head")) and (t := _title_phrase(m.group("head"))) and t not in titles:
                titles.append(t)
    return tuple(sorted(sup)), tuple(sorted(by)), tuple(titles)
