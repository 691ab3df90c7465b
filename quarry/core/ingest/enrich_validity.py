"""Envelope enrichment of ``effective_from`` / ``effective_to``: "effective [from / as of /
on] <date>", "in force / in effect from <date>", "takes effect / comes into force on <date>", "applies from
<date>"; "effective / in force / in effect / valid / good / open / available until / to / through <date>",
"expires / sunsets / lapses / ends on <date>" (the date is the last day in force, the field being inclusive) — only where the sentence speaks of this document
(it opens with the phrase, or says "this policy / document / ..." or "these terms / conditions / rules"). A document that says
of itself that it "is rescinded / withdrawn / retired / no longer in force as of / on /
from / with effect from <date>" ends the day before: a document rescinded on 1 March is
not in force on 1 March ("no longer in force after <date>" ends on that date). A rule fronted
by a date ("From 2 March 2026 the ceiling is 20%") that it, or the next sentence, says replaces
another ("This replaces the 15% ceiling") is in force from that date, and so is a document
retiring another's rule from a date ("From 2 March 2026 the weekly rule in section 4 of the
policy no longer applies"; "The rule in section 3 of the 'Handling standard' ... is retired with
effect from 2 March 2026"), to change or amend it from a date ("Two rules in the hot work section of
the permit to work policy change ... from 2 March 2026"), or to replace it ("From 2 March 2026
bundles are lodged 10 days before, in place of the 7 days set in section 3 of the deadlines
policy"; "Hourly testing takes the place of the 2-hourly test in section 5 of the procedure"
after a sentence fronted by the date), unless the document names a day between its
publication and that date (then the date is one rule's, not the document's). A fronted date
("From / On <date>") before this document's own rules ("these rates take over from ...", "the
rules below are used at ...", "they apply at Pennyford") starts it, and so does "They apply at
Hollow Reach from <date>" (where it applies may stand before the date). A sentence ending one part that says the rest goes on ("The
waiver expires after 27 February 2026; every other line of this schedule carries on") ends no
document. A range of two dates that the sentence, or the next one, says the document lapses
after ("These arrangements run from 3 November 2025 until 1 March 2026 and lapse after that
date"; "... up to and including 28 February 2026. The offer lapses after 28 February") bounds
it, unless one of the two says the rest goes on; so does a range "between <date> and <date>"
that the sentence or the next says the document ends with ("the offer ends then"), not on a date
of its own. A subject may follow a fronting clause ("To
bring lapsed members back, the Fenmoor fines amnesty runs from ..."). A weekday before a date
("Monday 2 March 2026") is read past.
"""

from __future__ import annotations

import datetime as dt
import re

from quarry.core.ingest.enrich_supersession import SUPERSEDES_VERB, doc_ids_in, pronoun_ids
from quarry.core.evidence.sentences import may_state_value
from quarry.core.text.markdown import plain_sentence
from quarry.core.text.rule_dates import LIST_ITEM, sentence_starts
from quarry.core.text.nlp import DATE, MONTH_NAMES, parse_date
from quarry.core.text.tokenizer import tokenize

__all__ = ["find_effective"]

_DOC_NOUN = (r"(?:policy|document|agreement|contract|amendment|runbook|page|version|exception|rule|procedure|guideline"
             r"|guidance|notice|memo|standard|schedule|waiver|arrangement|addendum|circular|directive|sop|rate|offer"
             r"|price\s+list|plan|process|instruction|instructions|terms|conditions)")
# "this policy", and with up to two words before the noun: "this local rule", "this interim pricing policy"
_SELF = r"(?:^|\bth(?:is|ese)\s+(?:[\w-]+\s+){0,2}?" + _DOC_NOUN + r"s?\b[^.]*?)"
# Being in force, in its usual words: "effective", "in force / in effect", "takes effect",
# "comes / goes / enters into force / effect", "applies", "valid".
_IN_FORCE = (r"(?:effective|in\s+(?:force|effect)|takes?\s+effect|(?:comes?|goes?|enters?|came|went|entered)\s+into"
             r"\s+(?:force|effect)|applies|apply|valid)")
# Being good up to a date ("valid / good / open / available / in effect through"), or
# ending on one ("expires / sunsets / lapses / ends / terminates / runs out on").
_HOLDS = r"(?:effective|in\s+(?:force|effect)|valid|good|open|available|applies|apply|runs|run|lasts|last)"
_ENDS = (r"(?:expires|sunsets|lapses|ends|terminates|runs\s+out|(?:will\s+)?(?:expire|sunset|lapse|end|terminate)"
         r"|run\s+out)(?:\s+at\s+the\s+(?:end|close)\s+of)?")
# what it takes the place of, or which day of a calendar it starts on, may stand before the date:
# "takes effect in place of the 2024 loan agreement on 5 January 2026", "applies from the first
# day of term 3 on 23 March 2026"
_BETWEEN = (r"(?:\s+(?:in\s+place\s+of|instead\s+of|replacing)\s+(?:[\w'-]+\s+){1,8}?(?=on\s|from\s)"
            r"|\s+from\s+the\s+(?:first|start|beginning)\s+(?:[\w'-]+\s+){1,5}?(?=on\s))?")
# where it applies may stand between the verb and the date: "They apply at Hollow Reach from 5 January"
_AT_PLACE = r"(?:\s+(?:at|in|to)\s+(?:the\s+)?(?-i:[A-Z])[\w'-]*(?:\s+(?-i:[A-Z])[\w'-]*){0,3}(?=\s+(?:from|on)\s))?"
_FROM = re.compile(r"(?:^(?:it|this|they|these)\s+|" + _SELF + r")\b(?:is\s+|are\s+|becomes\s+|will\s+be\s+)?" + _IN_FORCE
                   + _AT_PLACE + _BETWEEN + r"\s*(?:from|on|as\s+of|starting|beginning|with\s+effect\s+from)?:?\s*(?P<date>"
                   + DATE + ")", re.IGNORECASE)
_TO = re.compile(_SELF + r"\b(?:is\s+|are\s+|remains\s+|stays\s+)?" + _HOLDS + r"\s+(?:until|till"
                 r"|to|through|thru|up\s+to\s+and\s+including)\s*:?\s*(?P<date>" + DATE + r")"
                 r"|(?:^|\bthis\s+" + _DOC_NOUN + r"\b[^.]*?|\b(?:it|and)\s+)\b" + _ENDS + r"\s+(?:on\s+)?(?P<date2>"
                 + DATE + ")", re.IGNORECASE)
_RANGE = re.compile(_SELF + r"\b(?:is\s+)?(?:effective|in\s+force|valid|applies)\s+from\s+(?P<a>" + DATE
                    + r")\s+(?:until|till|to|through)\s+(?P<b>" + DATE + ")", re.IGNORECASE)
# (the words between "this standard" and "is withdrawn" name no other document the verb is of:
# "This standard replaces SA-2, which is withdrawn on ..." ends SA-2, not this one)
_ENDED = re.compile(r"(?:^|\bthis\s+" + _DOC_NOUN
                    + r"\b(?:(?!\b(?:which|that|replaces|supersedes|takes|succeeds)\b)[^.])*?\b(?:is|are|was|has\s+been"
                    r"|will\s+be|stands)\s+(?:hereby\s+)?)"
                    r"(?P<what>rescinded|withdrawn|retired|revoked|no\s+longer\s+in\s+(?:force|effect)|no\s+longer"
                    r"\s+valid|cancelled|canceled)\s+(?:(?P<rel>as\s+of|on|from"
                    r"|effective|effective\s+from|with\s+effect"
                    r"\s+from|after|from\s+and\s+including)\s+)?(?P<date>" + DATE + ")", re.IGNORECASE)
# "`other-policy` is rescinded with effect from 1 February 2026": this document's rescission
# (its own rule) takes effect then, so it is in force from that date.
_OTHER_ENDS = re.compile(r"\b(?:(?:is|are|was|were|will\s+be)\s+(?:hereby\s+)?(?:rescinded|withdrawn|retired|revoked"
                         r"|replaced|superseded)|(?:is|are|will\s+be)\s+(?:hereby\s+)?amended|change|will\s+change"
                         r"|no\s+longer\s+appl(?:y|ies))\b[^.]*?\b(?:with\s+effect\s+from|effective\s+from|effective\s+as\s+of"
                         r"|effective|as\s+of|from|on)\s+(?P<date>" + DATE + ")", re.IGNORECASE)
# "This schedule takes over from `fees-2025` for every appointment from Monday 2 March 2026":
# this document replaces another from a date, so it is in force from then (the active voice
# of :data:`_OTHER_ENDS`)
# "From 2 March 2026 the ceiling is 20%. This replaces the 15% ceiling in the playbook": a
# rule fronted by its start date, which the same or the next sentence says replaces another
_FRONTED_FROM = re.compile(r"^\W*(?:from|on|as\s+of|with\s+effect\s+from|starting|beginning)\s+(?:\w+day,?\s+)?(?P<date>"
                           + DATE + ")", re.IGNORECASE)
# "From Monday 2 March 2026 bundles are lodged 10 days before, in place of the 7 days set in
# section 3 of the deadlines policy"; "Hourly testing takes the place of the 2-hourly test set in
# section 5 of the procedure" (after a sentence fronted by its date): what the rule replaces is
# another document's rule, named by a document noun or a section
_IN_PLACE_OF = re.compile(r"\b(?:" + SUPERSEDES_VERB + r"|in\s+place\s+of|instead\s+of|rather\s+than|replacing)"
                          r"\s+(?P<what>(?:[^.;]|\.(?=\d))*)", re.IGNORECASE)  # ("GBP 2.10 a litre": a decimal point ends nothing)
_THIS_DOC = re.compile(r"\bth(?:is|ese)\s+(?:[\w-]+\s+){0,2}?" + _DOC_NOUN + r"s?\b", re.IGNORECASE)
# "From Monday 8 December 2025 the rules below are used at Kilnworth Pool": this document's own
# rules, fronted by the date they start
_OWN_RULES = re.compile(r"^(?:these|this|they|the\s+following|the\s+(?:[\w-]+\s+){1,2}below)\b"
                        r"(?:(?!\bno\s+longer\b|\bnot\b)[^.])*?\b(?:apply|applies|are\s+used"
                        r"|is\s+used|are\s+in\s+(?:force|effect)|is\s+in\s+(?:force|effect)|take\s+effect|takes\s+effect)\b",
                        re.IGNORECASE)
_THIS_REPLACES = re.compile(r"(?:^\W*|[,;]\s*)(?:this|it|that|these|they)\s+(?:[\w-]+\s+){0,2}?" + SUPERSEDES_VERB + r"\b",
                            re.IGNORECASE)
_REPLACES_FROM = re.compile(r"\b" + SUPERSEDES_VERB + r"\b[^.]*?\b(?:with\s+effect\s+from|effective\s+from"
                            r"|effective\s+as\s+of|effective|as\s+of|from|starting|beginning)\s+(?:\w+day,?\s+)?(?P<date>"
                            + DATE + ")", re.IGNORECASE)
# a word of a subject: not a negation ("The winter timetable no longer applies from ..." is
# read by _NO_LONGER below, not as a four-word subject "winter timetable no longer")
_WORD = r"(?!(?:no|not|never|longer)\b)[\w-]+"
# "The allowance is a pilot and is valid through 31 December 2025": the sentence's subject,
# the noun phrase before the verb (up to four words: "The Coats for Winter appeal runs from
# ..."), is checked against the document's title.
_TITLED = re.compile(r"^(?:the|our|this|these)\s+(?P<subj>(?:"+_WORD+r"\s+){0,3}"+_WORD+r")\s+(?:(?:is|are|remains|stays)\b[^.]*?\b)?"
                     # ("valid for collections from ...": what it is valid for may stand between)
                     r"(?:" + _HOLDS + r"|" + _IN_FORCE + r")(?:\s+for\s+[\w'-]+(?:\s+[\w'-]+)?)?\s+(?P<dir>until|till|through|thru|to|from"
                     r"|as\s+of)\s+(?:the\s+end\s+of\s+(?:[\w'-]+\s+){1,4}?on\s+)?(?P<date>" + DATE + ")"
                     r"|^(?:the|our|this|these)\s+(?P<subj2>(?:"+_WORD+r"\s+){0,3}"+_WORD+r")\s+" + _ENDS
                     + r"\s+(?:on\s+|after\s+)?(?P<date2>" + DATE + ")", re.IGNORECASE)
# "The winter timetable no longer applies after 27 February 2026" (its last day), "... from 2
# March" (the day before is its last)
_NO_LONGER = re.compile(r"^(?:the|our|this|these)\s+(?P<subj>(?:[\w-]+\s+){0,2}[\w-]+)\s+(?:will\s+)?no\s+longer\s+"
                        r"(?:applies|apply|runs|run|operates|operate|holds|be\s+valid|is\s+valid|is\s+in\s+(?:force"
                        r"|effect|use))\s+(?P<rel>after|from|on|as\s+of)\s+(?:\w+day,?\s+)?(?P<date>" + DATE + ")",
                        re.IGNORECASE)
# "The offer applies from 1 March 2026 and is valid through 30 April 2026": the second
# half of a sentence that :data:`_TITLED` found speaking of this document
_AND_UNTIL = re.compile(r"\b(?:and|but)\s+(?:(?:is\s+|are\s+|remains\s+|remain\s+|stays\s+|stay\s+)?" + _HOLDS
                        + r"\s+(?:until|till|to|through|thru)|" + _ENDS + r"(?:\s+on)?)\s+(?P<date>" + DATE + ")",
                        re.IGNORECASE)
# "The offer runs from 2 February 2026 to 31 March 2026": the end of a range right after its start
_RANGE_END = re.compile(r"\s*(?:to|until|till|through|thru|up\s+to(?:\s+and\s+including)?|-|–)\s*(?:\w+day,?\s+)?(?P<date>"
                        + DATE + ")",
                        re.IGNORECASE)
_EFF_TRIGGER = re.compile(r"\b(?:effective|effect|force|change|amended|valid|good|open|available|runs|lasts|applies"
                          r"|apply|expires|replaces|take|place|instead|rather|replacing|used|supersedes|rescinds|withdraws"
                          r"|retires|revokes|takes|succeeds"
                          r"|sunsets|lapses|ends|terminates|expire|sunset|lapse|end|terminate|rescinded|withdrawn|retired|replaced|superseded"
                          r"|revoked|no\s+longer|cancell?ed|canceled)\b", re.IGNORECASE)


_DATE_RX = re.compile(DATE, re.IGNORECASE)
# "These arrangements run from 3 November 2025 until 1 March 2026 and lapse after that date";
# "The offer applies to events held from 2 March 2026 up to and including 30 April 2026, and
# lapses after that date": a dated range that the sentence, or the next one ("The offer lapses
# after 28 February"), says this document lapses after
_SPAN = re.compile(r"\b(?:from|between)\s+(?P<a>" + DATE + r")\s*,?\s+(?:until|till|to|through|thru|and|up\s+to(?:\s+and\s+including)?)\s+(?P<b>"
                   + DATE + ")", re.IGNORECASE)
_LAPSES_AFTER = re.compile(r"\b(?:lapses?|expires?|ends?|stops?|runs?\s+out)\s+(?:(?:after|on|at\s+the\s+end\s+of)\s+(?:that"
                           r"\s+(?:date|day)|then|\d{1,2}\s+[a-z]+|" + DATE + ")|then)", re.IGNORECASE)
# what a range "between <date> and <date>" must be said to end with: the range itself ("the
# offer ends then"), not a date of its own ("This notice expires on 2 January 2026" after the
# arrival dates "between 22 December 2025 and 1 January 2026" the notice is about)
_LAPSES_THEN = re.compile(r"\b(?:then|that\s+(?:date|day))\W*$", re.IGNORECASE)
# "Monday 2 March 2026": a weekday before a date says nothing the date does not
_WEEKDAY = re.compile(r"\b(?:mon|tues|wednes|thurs|fri|satur|sun)day,?\s+(?=\d|(?:jan|feb|mar|apr|may|jun|jul|aug|sep|oct"
                      r"|nov|dec)[a-z]*\b)", re.IGNORECASE)
# the words before "is retired": another document's rule, named by title or by a document noun
# ("The rule in section 3 of the 'Object handling and care standard' ... is retired with effect
# from 2 March 2026"); not this document itself
_OTHERS_RULE = re.compile(r"\b(?:rule|section|clause|paragraph|part|" + _DOC_NOUN + r")s?\b", re.IGNORECASE)
_SELF_HEAD = re.compile(r"^\W*(?:this|it|these|they)\b", re.IGNORECASE)
_SUBJECT_AFTER_DATE = re.compile(r"^(?:onwards?|on)\b[\s,]*", re.IGNORECASE)
# "From 2 March 2026 the weekly swabbing rule in section 4 of the policy no longer applies":
# another's rule retired from the date that fronts the sentence
_RETIRES = re.compile(r"\bno\s+longer\s+(?:applies|apply|binds|holds)\b|\b(?:is|are)\s+(?:now\s+)?(?:retired|withdrawn"
                      r"|rescinded|replaced|superseded|scrapped)\b", re.IGNORECASE)


# what a sentence ending one part says of the rest: "The waiver expires after 27 February 2026;
# every other line of this schedule carries on as written" ends the waiver, not the schedule
_REST_GOES_ON = re.compile(r"\b(?:every|all|each)\s+other\s+(?:line|rule|part|section|term|price|charge|item"
                           r"|provision|clause)s?\b|\bthe\s+rest\s+of\s+(?:this|the)\b", re.IGNORECASE)


def _plain(sentence: str) -> str:
    return _WEEKDAY.sub("", plain_sentence(sentence))


_BARE_DOC = re.compile(r"^(?:[a-z-]+\s+){0,2}" + _DOC_NOUN + "$", re.IGNORECASE)


def _speaks_of_itself(subject: str, named: frozenset[str], sentence: str, own: str | None) -> bool:
    """Whether a sentence's subject ("the allowance", "the waiver") is this document: it
    shares a word with the title, or it is a bare document noun ("the waiver", no year or
    version that could name another one) in a sentence naming no other document."""
    if set(tokenize(subject)) & named:
        return True
    return bool(_BARE_DOC.match(subject.strip())) and not doc_ids_in(sentence, own or "")


def _last_day(m: re.Match, tenant: str) -> dt.date | None:
    """The last day in force of a document that ends at ``m``'s date: that day after "after",
    the day before otherwise (a document rescinded on 1 March is not in force on 1 March)."""
    d = parse_date(m.group("date"), tenant=tenant)
    if d is None:
        return None
    return d if (m.group("rel") or "").lower() == "after" else d - dt.timedelta(days=1)


def _acts_before(sents: list[str], start: dt.date, published: dt.date | None, tenant: str) -> bool:
    """Whether the document names a day between its publication and ``start`` (applications
    reopen on 16 March, in a memo whose new charge applies from 1 April): some of it acts
    before that rule's date, so the date is the rule's, not the document's."""
    if published is None:
        return False
    return any(d is not None and published <= d < start
               for s in sents for m in _DATE_RX.finditer(_plain(s)) for d in [parse_date(m.group(0), tenant=tenant)])


def _after_lead(s: str) -> str:
    """A sentence less a fronted clause ("To bring lapsed members back, ..."), or "" without one."""
    head, sep, rest = s.partition(", ")
    return rest if sep and len(head.split()) <= 15 and not _DATE_RX.search(head) else ""


def find_effective(sents: list[str], own: str | None = None, title: str = "", *,
                   tenant: str, published: dt.date | None = None,
                   text: str | None = None) -> tuple[dt.date | None, dt.date | None]:
    """(effective_from, effective_to) this document states; ``own`` is its doc id, so a
    sentence ending another document from a date makes this one effective then; a
    sentence whose subject is what the ``title`` names ("The allowance is valid through
    ...", in "Wellbeing allowance 2025") speaks of this document. ``tenant`` owns the text.
    A date fronting a rule that replaces or retires another document's rule is this
    document's start unless another part of ``text`` (the document, when given) acts at
    once: then that date is the rule's (:mod:`quarry.core.text.rule_dates`)."""
    start = end = None
    rule = False  # the start is a rule's fronted date
    named = frozenset(tokenize(title))
    previous = ""
    for i, raw in enumerate(sents):
        before, previous = previous, raw
        s = _plain(raw)
        span = _SPAN.search(s)
        if not span and not _EFF_TRIGGER.search(raw):
            continue
        if span and (start is None or end is None):
            after = _plain(sents[i + 1]) if i + 1 < len(sents) else ""
            lapse = _LAPSES_AFTER.search(s, span.end()) or _LAPSES_AFTER.search(after)
            if lapse and (not span.group(0).lower().startswith("between") or _LAPSES_THEN.search(lapse.group(0))) \
                    and not _REST_GOES_ON.search(s) and not _REST_GOES_ON.search(after):  # (one line's waiver)
                start = start or parse_date(span.group("a"), tenant=tenant)
                end = end or parse_date(span.group("b"), tenant=tenant)
        if m := _RANGE.search(s):
            start = start or parse_date(m.group("a"), tenant=tenant)
            end = end or parse_date(m.group("b"), tenant=tenant)
        if end is None and (m := _ENDED.search(s)):
            end = _last_day(m, tenant)
        # (the other document's id is read from the sentence as written: its backticks, which
        # the plain text drops, are what mark "`marlow-page-green-choice`" as an id)
        # ("It is withdrawn with effect from ...", after the sentence naming it)
        if start is None and own and (m := _OTHER_ENDS.search(s) or _REPLACES_FROM.search(s)) and (
                doc_ids_in(raw, own) or doc_ids_in(s, own)
                or pronoun_ids(s[:m.start()], before, own)
                or (_OTHERS_RULE.search(s[:m.start()]) and not _SELF_HEAD.match(s[:m.start()]))
                # "This standard replaces the Supplier Standard SA-2, which is withdrawn on 2 February"
                or (m.re is _OTHER_ENDS and _THIS_REPLACES.search(s[:m.start()]))):
            start = parse_date(m.group("date"), tenant=tenant)
        if start is None and _THIS_REPLACES.search(s) and (
                (m := _FRONTED_FROM.search(s)) or (m := _FRONTED_FROM.search(_plain(before)))):
            start = parse_date(m.group("date"), tenant=tenant)
            rule = True
        # "With effect from 1 March 2026 this standard stands in for ...": the date fronts the
        # sentence whose subject, this document, replaces another
        if start is None and (m := _FRONTED_FROM.search(s)) and _THIS_REPLACES.match(s[m.end():].lstrip(" ,")):
            start = parse_date(m.group("date"), tenant=tenant)
        if start is None and (m := _FRONTED_FROM.search(s)) and (r := _RETIRES.search(s, m.end())) and (
                _OTHERS_RULE.search(s, m.end(), r.start()) and not _SELF_HEAD.match(s[m.end():].lstrip(" ,"))):
            start = parse_date(m.group("date"), tenant=tenant)  # another's rule retired from the date: this one's starts
            rule = True
        if start is None and (r := _IN_PLACE_OF.search(s)) and _OTHERS_RULE.search(r.group("what")) \
                and not _THIS_DOC.search(r.group("what")) and (
                (m := _FRONTED_FROM.search(s)) or (not _DATE_RX.search(s) and (m := _FRONTED_FROM.search(_plain(before))))):
            d = parse_date(m.group("date"), tenant=tenant)  # a rule taking another's place from the date
            start = None if d is None or _acts_before(sents, d, published, tenant) else d
            # ("they are used at ... instead of": the document itself, not one of its rules)
            rule = not _SELF_HEAD.match(_SUBJECT_AFTER_DATE.sub("", s[m.end():].lstrip(" ,")))
        if start is None and (m := _FRONTED_FROM.search(s)) and _OWN_RULES.match(s[m.end():].lstrip(" ,")):
            d = parse_date(m.group("date"), tenant=tenant)
            start = None if d is None or _acts_before(sents, d, published, tenant) else d
        if start is None and (m := _FROM.search(s)) and not (_ENDED.search(s)):
            start = parse_date(m.group("date"), tenant=tenant)
        if end is None and (m := _TO.search(s)):
            end = parse_date(m.group("date") or m.group("date2"), tenant=tenant)
        if end is None and (m := _NO_LONGER.search(s)) and _speaks_of_itself(m.group("subj"), named, s, own):
            end = _last_day(m, tenant)
        # ("To bring lapsed members back, the Fenmoor fines amnesty runs from ...": a clause may front the subject)
        lead = s if _TITLED.search(s) else _after_lead(s)
        if (m := _TITLED.search(lead)) and _speaks_of_itself(m.group("subj") or m.group("subj2"), named, s, own):
            s = lead  # (the match's offsets are the lead's)
            d = parse_date(m.group("date") or m.group("date2"), tenant=tenant)
            if m.group("date2") or m.group("dir").lower().startswith(("until", "till", "through", "thru", "to")):
                if not _REST_GOES_ON.search(s, m.end()):  # one part ends; the rest of the document goes on
                    end = end or d
            else:
                start = start or d
                if end is None and (m2 := _AND_UNTIL.search(s, m.end()) or _RANGE_END.match(s, m.end())):
                    end = parse_date(m2.group("date"), tenant=tenant)
    if rule and start is not None and text is not None and _acts_at_once(text, tenant):
        start = None
    return start, end


# a memo's address lines and what it says of itself ("please keep this memo within the team")
_ADDRESS = re.compile(r"^\W*(?:from|to|cc|date|subject|re)\s*:", re.IGNORECASE)
_OF_ITSELF = re.compile(r"\bth(?:is|ese)\s+(?:memo|email|letter|note|notice|document)s?\b", re.IGNORECASE)


# a paragraph set apart by a short label: "Separately:", "For the diary:", "Weekly arrears report:"
_LABELLED = re.compile(r"^\W*(?:[\w'-]+\s+){0,3}[\w'-]+:\s")
# a day and month, with or without a year ("before 1 April"): a date, not a value
_DAY_MONTH = re.compile(r"\b\d{1,2}(?:st|nd|rd|th)?\s+(?:of\s+)?(?:" + MONTH_NAMES + r")\b\.?(?:,?\s+\d{4})?"
                        r"|\b(?:" + MONTH_NAMES + r")\.?\s+\d{1,2}(?:st|nd|rd|th)?\b(?:,?\s+\d{4})?", re.IGNORECASE)


def _acts_at_once(text: str, tenant: str) -> bool:
    """Whether, besides its dated rule, the document states a rule with a value that acts
    at once: a sentence saying so ("From now on the store is checked every Friday before
    15:00"), or, after the dated rule, a paragraph (not a list item) set apart by a short
    label stating a value ("Supervision: on the first Tuesday of each month at 14:00"). Background before the
    rule ("pouches more than a year old were found") and the rule's own detail ("To help,
    the marshals note each group's time at the 9th green") do not act at once."""
    dated = False
    for s in sentence_starts(text, tenant=tenant):
        dated = dated or s.kind == "dated"
        if _OF_ITSELF.search(s.sentence):
            continue
        if s.kind == "now" or (dated and s.kind == "other" and _LABELLED.match(s.sentence) and not LIST_ITEM.match(s.sentence)
                               and not _ADDRESS.match(s.sentence) and may_state_value(_DAY_MONTH.sub(" ", s.sentence))):
            return True
    return False
