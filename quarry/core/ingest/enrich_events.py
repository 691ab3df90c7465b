"""Envelope enrichment of ``events``: in deployment, rollout, change or migration
records, "<subject> completed / finished / concluded / went live / was done / was cut over / switched
(over) / moved / migrated / rolled out /
signed off / closed out / wrapped up / finalised / accepted / handed over [successfully] [by <whom>] on <date>" and "<subject> is complete as of <date>" -> ("<subject> completed", date);
"<who> has closed <subject>", "<subject> is closed", in a sentence with a date, and a title
"<subject> closed ..." -> "<subject> closed" (a recall or an incident closed);
"<subject> returned to service / came back into use / reopened on <date>" and "<subject> resume(s) /
restart(s) ... from <date>" -> "<subject> reopened, back in service"; "<who> lifted / withdrew <the
notice ...> on <date>" and "<the ban> was lifted / withdrawn on <date>" -> "<it> ended";
"was cut over", "switched over", "moved", "migrated" -> "<subject> cutover completed"; "<subject>
has been <doing> on/in <System> since ... <date>" -> "<subject> to <system> cutover completed". A markdown table with a completion-date
column ("Completed on", "Completion date", "Went live") gives one event per row, the
row's first cell as the subject. No entity is added: where the text names none, the
resolver takes the record's own entity scope (prefixing "acme" would turn "Globex
cutover completed" in an Acme record into Acme's cutover).
"""

from __future__ import annotations

import datetime as dt
import re

from quarry.core.records import Event, SourceDocument
from quarry.core.text.markdown import plain_sentence
from quarry.core.text.nlp import DATE, MONTH_NAMES, parse_date
from quarry.core.text.units import logical_lines

__all__ = ["find_events"]

# ----------------------------------------------------------------------------- events

# back in use after a closure or an outage: "the van returned to service on 2 March"
_RESTORED = (r"returned\s+to\s+(?:service|use)|(?:came|went)\s+back\s+(?:into|in)\s+(?:service|use)"
             r"|back\s+in\s+(?:service|use)|back\s+on\s+the\s+road|re-?opened"
             # what was suspended starts again: "kerbside glass collections resume ... from 16 March"
             r"|resum(?:e|es|ed)|restart(?:s|ed)?")
_EVENT_VERB = (r"(?P<verb>completed|finished|concluded|went\s+live|rolled\s+out|done|cut\s+over|closed\s+out"
               r"|switched\s+over|switched|changed\s+over|moved|migrated|transitioned"
               r"|signed\s+off|wrapped\s+up|finali[sz]ed|accepted|handed\s+over"
               r"|complete\s+as\s+of|completed\s+as\s+of|live\s+as\s+of|finished\s+as\s+of"
               r"|" + _RESTORED + r")")
# Who signed it off stands between the verb and the date: "signed off by the city building
# inspector on 16 February 2026".
_AGENT = r"(?:by\s+(?:[\w'-]+\s+){1,5}?(?=on\s))?"
# A span of days ends on its last: "over the weekend of 14 and 15 March 2026", "during the
# night of 3 to 4 May".
_SPAN_LEAD = (r"(?:over|during)\s+the\s+(?:weekend|night|evening)\s+of\s+"
              r"(?:\d{1,2}(?:st|nd|rd|th)?\s+(?:and|to|-|–)\s+)?")
_COMPLETED = re.compile(
    r"(?P<subj>(?:[\w'-]+\s+){0,9}?)(?:was\s+|were\s+|has\s+been\s+|have\s+been\s+|had\s+been\s+|is\s+|are\s+|got\s+)?"
    + _EVENT_VERB + r"(?:\s+(?:successfully|fully|in\s+full))?\s+" + _AGENT
    # what it went live on or cut over to stands between the verb and the date: "went live on
    # Tessera in production on 9 March 2026", "cut over to FlowStock on 16 March 2026"
    # ("went live for the North West on ...")
    + r"(?P<comp>(?:to|onto|on|into|in|at|for)\s+(?!\d)(?:[\w'-]+\s+){1,4}?(?=on\s|from\s|" + _SPAN_LEAD + r"))?"
    + r"(?:on\s+|from\s+|as\s+of\s+|at\s+|by\s+|" + _SPAN_LEAD + r")?(?:\w+day,?\s+)?"
    r"(?P<date>" + DATE + ")", re.IGNORECASE)
# "We completed the ERP migration on <date>": the object is what completed.
_COMPLETED_OBJ = re.compile(
    r"\b(?:we|they|the\s+team|ops|engineering|it)\s+(?:have\s+|has\s+|had\s+)?(?:successfully\s+)?(?P<verb>completed"
    r"|finished|concluded|rolled\s+out|cut\s+over)\s+(?P<subj>(?:[\w'-]+\s+){1,6}?)(?:successfully\s+)?on\s+"
    r"(?:\w+day,?\s+)?(?P<date>" + DATE + ")", re.IGNORECASE)
# A state reached on a date: "Saltby Library has been issuing on Lendwise since it opened on
# 10 March 2026", "Torbury departures have been handled in Corvus since the first flight on
# Monday 9 March 2026": the subject's cutover to the named system completed on that date.
_SINCE = re.compile(
    r"(?P<subj>(?:[\w'-]+\s+){1,5}?)(?i:has|have)\s+been\s+(?:[\w'-]+,?\s+){0,12}?(?i:on|in|onto|into|using)\s+"
    r"(?:the\s+)?(?P<sys>[A-Z][\w-]*(?:\s+[A-Z][\w-]*){0,2})(?:\s+(?:app|system|platform|portal))?\s+since\s+(?:[\w':-]+\s+){0,6}?(?i:on\s+)?(?:\w+day,?\s+)?"
    r"(?P<date>(?i:" + DATE + "))")
# A notice, a ban or a restriction lifted: "Fellwater lifted the boil water notice at Raven Ghyll on
# Friday 6 March 2026", "the hosepipe ban was withdrawn on 2 May": "<it> ended", what a condition
# waiting while it is in force waits for.
_LIFT_VERB = r"lifted|withdrawn|withdrew|rescinded|revoked|stood\s+down"
_LIFTED = re.compile(
    r"(?:\b(?:" + _LIFT_VERB + r")\s+(?P<obj>(?:the|a|an|its|our|their)\s+(?:[\w'-]+\s+){1,6}?)"
    r"|(?P<subj>(?:[\w'-]+\s+){1,6}?)(?:was|were|has\s+been|have\s+been|is|are)\s+(?:" + _LIFT_VERB + r")\s+)"
    r"(?:on\s+|from\s+|with\s+effect\s+from\s+)?(?:\w+day,?\s+)?(?P<date>" + DATE + ")", re.IGNORECASE)
_SUCCESS_FIRST = re.compile(r"\bsuccessfully\s+(?=completed|finished|concluded|went|rolled|cut)", re.IGNORECASE)
_EVENT_DOC = re.compile(r"\b(?:rollout|roll-out|deployment|release|cutover|migration|change|go-live|upgrade)\s+"
                        r"(?:record|log|report|ticket|request|note|summary)\b", re.IGNORECASE)
_EVENT_TYPES = frozenset({"deployment", "rollout", "change", "migration", "release", "change-record", "cutover"})
_EVENT_TRIGGER = re.compile(r"\b(?:completed|finished|concluded|live|rolled|done|cut\s+over|complete|closed|signed|since"
                            r"|returned|back|re-?opened|resum\w*|restart\w*|lifted|withdr[ae]wn?|rescinded|revoked"
                            r"|stood"
                            r"|switched|changed|moved|migrated|transitioned"
                            r"|wrapped|finali[sz]ed|accepted|handed)\b",
                            re.IGNORECASE)
_SUBJ_DROP = frozenset({"the", "a", "an", "its", "our", "their", "and", "then", "finally", "it", "this", "that",
                        "all", "we", "has", "have", "had", "was", "were", "is", "are"})
_COMPLETION_COLUMN = re.compile(r"^(?:completed|completion|completion\s+date|date\s+completed|completed\s+on|finished"
                                r"|finished\s+on|went\s+live|go-live\s+date|live\s+on|done|done\s+on|cut\s+over"
                                r"|cutover\s+date)$", re.IGNORECASE)


def _event_doc(doc: SourceDocument) -> bool:
    return doc.doc_type in _EVENT_TYPES or bool(_EVENT_DOC.search(f"{doc.title}\n{doc.text[:300]}"))


# Verbs of a changeover: the event is the thing's cutover ("Elmfield switched over to
# ClinixPro" is "elmfield to clinixpro cutover completed"), which a condition naming a
# switch, move or migration of it waits for.
_CHANGEOVER_VERB = re.compile(r"cut\s+over|switched(?:\s+over)?|changed\s+over|moved|migrated|transitioned", re.IGNORECASE)


_RESTORED_VERB = re.compile(_RESTORED, re.IGNORECASE)


def _event(subject: str, verb: str, on: dt.date) -> Event | None:
    words = [w for w in re.split(r"\s+", subject.strip(" ,:-")) if w]
    # Only the subject's own clause: "... and then the Globex cutover" starts after "then".
    for i in range(len(words) - 1, -1, -1):
        w = words[i].lower()
        # "and" joins two nouns of one subject ("heating and fire-system renovation") unless
        # a new clause follows it ("and then the Globex cutover", "and the migration")
        nxt = words[i + 1].lower() if i + 1 < len(words) else ""
        if w in ("then", "after", "before", "when", "once", "so", "but") or (
                w == "and" and nxt in _SUBJ_DROP | {"then", "finally"}):
            words = words[i + 1:]
            break
    while words and words[0].lower() in _SUBJ_DROP:
        words = words[1:]
    while words and words[-1].lower() in _SUBJ_DROP:
        words = words[:-1]
    if not words:
        return None
    what = " ".join(words).lower()
    if verb == "ended":
        what = f"{what} ended"  # a notice or a ban lifted: what a condition "while it is in force" waits for
    elif _RESTORED_VERB.fullmatch(verb):
        what = f"{what} reopened, back in service"  # what a closure or an outage waits for, in both words
    else:
        what = f"{what} cutover completed" if _CHANGEOVER_VERB.fullmatch(verb) and "cutover" not in what \
            else f"{what} completed"
    return Event(what=what, on=on) if 3 <= len(what) <= 300 else None


# "Calora has closed recall CR-0126 for Quenby Venues", "the PH-9 recall is closed for our shops
# from Friday 13 March 2026": what was open (a recall, an incident) closed, on the sentence's
# (last) date; a title saying so ("Recall R-26-0117 closed for the Carraway fleet") closes it on
# the date of a closure its text states, else on the record's publication. ("closed out" is a
# completion, read above.)
_CLOSED_OBJ = re.compile(r"\b(?:has|have|had)\s+(?:now\s+)?closed\s+(?P<subj>(?:[\w'-]+\s+){0,3}?[\w'-]+)"
                         r"(?=\s+(?:for|at|on|from|as|in)\b|[,.;]|$)", re.IGNORECASE)
_CLOSED_SUBJ = re.compile(r"(?P<subj>(?:[\w'-]+\s+){1,5}?)(?:is|are|was|were|has\s+been|have\s+been)\s+(?:now\s+)?"
                          r"closed\b(?!\s+out)", re.IGNORECASE)
_CLOSED_TITLE = re.compile(r"^(?P<subj>(?:[\w'-]+\s+){1,5}?)closed\b", re.IGNORECASE)
_DATE_IN = re.compile(DATE, re.IGNORECASE)


def _closures(s: str, tenant: str) -> list[Event]:
    """The closures one sentence (plain, years written in) states, on its last date; none
    without a date. Dates are parsed only where a closure is said."""
    said = [*_CLOSED_OBJ.finditer(s), *_CLOSED_SUBJ.finditer(s)]
    if not said:
        return []
    dates = [d for m in _DATE_IN.finditer(s) if (d := parse_date(m.group(0), tenant=tenant)) is not None]
    return [ev for m in said if dates and (ev := _closed(m.group("subj"), max(dates)))]


def _title_closure(title: str, closed: list[Event], published: dt.date | None) -> Event | None:
    """A title "<what> closed ...", on the date of a closure the text states, else the publication."""
    if (m := _CLOSED_TITLE.match(plain_sentence(title))) and (
            on := max((e.on for e in closed), default=None) or published):
        return _closed(m.group("subj"), on)
    return None


def _closed(subject: str, on: dt.date) -> Event | None:
    words = [w for w in re.split(r"\s+", subject.strip(" ,:-")) if w]
    while words and words[0].lower() in _SUBJ_DROP:
        words = words[1:]
    if not words or len(words) > 6:
        return None
    return Event(what=" ".join(words).lower() + " closed", on=on)


def _table_events(lines: list[str], tenant: str) -> list[Event]:
    out: list[Event] = []
    col: int | None = None
    for line in lines:
        if not line.startswith("|"):
            col = None
            continue
        cells = [plain_sentence(c) for c in line.strip().strip("|").split("|")]
        if all(re.fullmatch(r":?-{2,}:?", c) for c in cells if c):
            continue
        if col is None:
            hits = [i for i, c in enumerate(cells) if _COMPLETION_COLUMN.match(c)]
            col = hits[0] if hits and hits[0] > 0 else -1
            continue
        if col < 0 or col >= len(cells):
            continue
        on = parse_date(cells[col], tenant=tenant)
        if on is not None and (ev := _event(cells[0], "completed", on)):
            out.append(ev)
    return out


# A day and month written without a year ("over the weekend of 7 and 8 March"), not followed by one.
_YEARLESS = re.compile(r"\b(?P<day>\d{1,2})(?:st|nd|rd|th)?\s+(?:of\s+)?(?P<month>" + MONTH_NAMES
                       + r")(?!\w|,?\s+\d{4})", re.IGNORECASE)


def _with_years(text: str, published: dt.date | None, tenant: str) -> str:
    """``text`` with the year a record's reader assumes written after each day and month
    that lack one: the year putting the date nearest the record's publication ("the weekend
    of 7 and 8 March" in a change record published on 9 March 2026 is in 2026; "29 December"
    in one published on 4 January 2026 is in 2025). Unchanged without a publication date."""
    if published is None:
        return text

    def year(m: re.Match) -> str:
        dates = [d for y in (published.year - 1, published.year, published.year + 1)
                 if (d := parse_date(f"{m.group('day')} {m.group('month')} {y}", tenant=tenant)) is not None]
        if not dates:
            return m.group(0)
        return f"{m.group(0)} {min(dates, key=lambda d: abs((d - published).days)).year}"
    return _YEARLESS.sub(year, text)


def find_events(doc: SourceDocument, sents: list[str]) -> tuple[Event, ...]:
    if not _event_doc(doc):
        return ()
    out: dict[tuple[str, dt.date], Event] = {}
    closed: list[Event] = []
    for raw in sents:
        if not _EVENT_TRIGGER.search(raw):
            continue
        s = _with_years(_SUCCESS_FIRST.sub("", plain_sentence(raw)), doc.published_at, doc.tenant)
        closed += _closures(s, doc.tenant)
        for m in (*_COMPLETED_OBJ.finditer(s), *_COMPLETED.finditer(s)):
            on = parse_date(m.group("date"), tenant=doc.tenant)
            comp = m.groupdict().get("comp") or ""
            if on is not None and (ev := _event(f"{m.group('subj')} {comp}", m.group("verb"), on)):
                out.setdefault((ev.what, on), ev)
        for m in _LIFTED.finditer(s):
            on = parse_date(m.group("date"), tenant=doc.tenant)
            if on is not None and (ev := _event(m.group("obj") or m.group("subj"), "ended", on)):
                out.setdefault((ev.what, on), ev)
        for m in _SINCE.finditer(s):
            on = parse_date(m.group("date"), tenant=doc.tenant)
            if on is not None and (ev := _event(f"{m.group('subj')} to {m.group('sys')}", "moved", on)):
                out.setdefault((ev.what, on), ev)
    for ev in (*closed, _title_closure(doc.title, closed, doc.published_at)):
        if ev is not None:
            out.setdefault((ev.what, ev.on), ev)
    if "|" in doc.text:
        for ev in _table_events(logical_lines(doc.text), doc.tenant):
            out.setdefault((ev.what, ev.on), ev)
    return tuple(sorted(out.values(), key=lambda e: (e.on, e.what)))
