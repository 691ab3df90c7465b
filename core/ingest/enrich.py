"""Envelope enrichment at build time (DESIGN §7, after chunking's input is validated):
fill the envelope fields a source left empty from what its text states, extractively
and deterministically, so evidence resolution works on corpora whose facts live only in
prose.

Extracted, each only where the source field is empty (source metadata always wins):

- ``condition``: a stopping condition on a stated state, written as "until <what>" so the
  resolver's matching (``core.conditions``) reads one form:

  * "Acme remains on the 16:00 cutoff until cutover" -> "until cutover" (a bare "until"
    needs a state word in its sentence: remains, stays, keeps, instead of, valid, ...);
  * "... remains in effect / in force / valid until X" -> "until X";
  * "while X is under way / in progress / ongoing" and "for the duration of X" ->
    "until X completes"; "as long as X is in place / active" -> "until X ends";
  * "pending X" -> "until X";
  * "once X is finished, <the rule> applies again / resumes" -> "until X completes";
  * "ceases to apply / no longer applies / lapses when X" -> "until X";
  * "until further notice" (and "until otherwise notified") -> "until further notice":
    kept, but it names nothing a record can prove, so it never ends (``core.conditions``).

  "X is complete / is finished / has been completed / goes live" in the condition is
  written "X completes". The sentence must state a state or a rule, not give an
  instruction: an imperative sentence ("Watch the settlement status until every payout
  shows sent", "Retry until the webhook succeeds") has no condition unless the condition
  is fronted and so scopes the instruction itself ("While the move is under way, route
  orders to Leeds"). Imperatives are told by spaCy's parse (a base-form root verb without
  a subject).
- ``events``: in deployment, rollout, change or migration records, "<subject> completed /
  finished / concluded / went live / was done / was cut over / rolled out [successfully]
  on <date>" and "<subject> is complete as of <date>" -> ("<subject> completed", date);
  "was cut over" -> "<subject> cutover completed". A markdown table with a completion-date
  column ("Completed on", "Completion date", "Went live") gives one event per row, the
  row's first cell as the subject. No entity is added: where the text names none, the
  resolver takes the record's own entity scope (prefixing "acme" would turn "Globex
  cutover completed" in an Acme record into Acme's cutover).
- ``supersedes`` / ``superseded_by``: a sentence naming another doc id (``settlement-runbook``,
  ``refund-policy@1``; in backticks or id-shaped) after "replaces", "supersedes",
  "rescinds", "withdraws", "retires" (-> ``supersedes``), or after "replaced by",
  "superseded by", "succeeded by", "in favour of" / "in favor of" (-> ``superseded_by``);
  and "<id> is rescinded / withdrawn / retired / superseded / no longer in force" (this
  document speaking of the other -> ``supersedes``).
- ``effective_from`` / ``effective_to``: "effective [from / as of / on] <date>", "in force
  from <date>", "takes effect on <date>", "applies from <date>"; "effective / in force /
  valid until / to / through <date>", "expires on <date>" (the date is the last day in
  force, the field being inclusive) — only where the sentence speaks of this document
  (it opens with the phrase, or says "this policy / document / ..."). A document that says
  of itself that it "is rescinded / withdrawn / retired / no longer in force as of / on /
  from / with effect from <date>" ends the day before: a document rescinded on 1 March is
  not in force on 1 March ("no longer in force after <date>" ends on that date).

Dates are read by ``core.nlp.parse_date`` (dateparser): any common full form, never a date
without a year. Only sentences holding a trigger word are looked at further, and only
condition sentences are parsed by spaCy, so the cost on documents without such sentences
is a few regular-expression scans.

Every filled field is named in ``extracted``, so a reader can tell a source fact from an
extracted one. The same function runs in ``core.pipeline.prepare`` and in the Spark
build's chunk stage.
"""

from __future__ import annotations

import datetime as dt
import re

from pydantic import ValidationError

from quarry.core.text import nlp
from quarry.core.text.nlp import DATE, DEFAULT_PIPELINE
from quarry.core.records import Event, SourceDocument
from quarry.core.text.units import line_sentences
from quarry.core.text.tokenizer import tokenize

FIELDS = ("condition", "events", "supersedes", "superseded_by", "effective_from", "effective_to")  # what it may fill


def parse_date(text: str) -> dt.date | None:
    """A full written date (``core.nlp.parse_date``); None otherwise."""
    return nlp.parse_date(text)


def _clean(s: str) -> str:
    """A sentence without markdown emphasis, code ticks and curly quotes."""
    s = s.replace("`", "").replace("’", "'").replace("“", '"').replace("”", '"')
    return re.sub(r"(?<!\w)[*_]{1,2}|[*_]{1,2}(?!\w)", "", s).strip()


# ----------------------------------------------------------------------------- conditions

_STATE = frozenset(tokenize("remains remain stays stay keeps keep continues continue applies apply valid "
                            "pinned waived instead temporary temporarily holds hold exception suspended "
                            "frozen paused effect force"))
_CLAUSE = r"(?P<cond>[^.;:!?\n]{2,120})"
_CUT = re.compile(r",|\s(?:unless|and\s+then|and\s+that|after\s+which|when|at\s+which|whichever|or\s+until|which|who"
                  r"|whereas|but)\s", re.IGNORECASE)
_MAX_COND_WORDS = 10  # a stopping condition names one thing: a longer clause is prose, not a condition

_OPEN_ENDED = re.compile(r"\buntil\s+(?:further\s+notice|otherwise\s+(?:notified|instructed|stated|announced|advised)"
                         r"|revoked|withdrawn|rescinded)\b", re.IGNORECASE)
_IN_EFFECT_UNTIL = re.compile(r"\b(?:remains?|stays?|is|are|continues?\s+to\s+be)\s+(?:in\s+(?:effect|force|place)"
                              r"|valid|active|applicable)\s+(?:until|till)\s+" + _CLAUSE, re.IGNORECASE)
_UNTIL = re.compile(r"\b(?:until|till)\s+" + _CLAUSE, re.IGNORECASE)
_FRONT_UNTIL = re.compile(r"^\W*(?:until|till)\s+(?P<cond>[^.;:!?\n,]{2,120}),", re.IGNORECASE)
_ONGOING = (r"(?:under\s*way|in\s+progress|ongoing|running|being\s+\w+|not\s+yet\s+(?:complete|completed|finished"
            r"|done))")
_IN_PLACE = r"(?:in\s+(?:place|effect|force)|active|open|on)"
_WHILE = re.compile(r"\b(?:while|whilst)\s+(?P<cond>[^.;:!?\n,]{2,100}?)\s+(?:is|are|remains?|stays?)\s+"
                    + _ONGOING + r"\b", re.IGNORECASE)
_AS_LONG_AS = re.compile(r"\b(?:as|so)\s+long\s+as\s+(?P<cond>[^.;:!?\n,]{2,100}?)\s+(?:is|are|remains?|stays?)\s+"
                         r"(?P<state>" + _ONGOING + "|" + _IN_PLACE + r")\b", re.IGNORECASE)
_DURATION = re.compile(r"\b(?:for|during)\s+the\s+(?:duration|course|length)\s+of\s+" + _CLAUSE, re.IGNORECASE)
_PENDING = re.compile(r"(?:(?:^|[,;(]\s*)pending\s+(?=(?:the|a|an|its|their|our|this|that|[\w-]+'s)\s)|\b(?:held"
                      r"|frozen|suspended|paused|deferred|on\s+hold|blocked|postponed|waived|applies|apply|remains?"
                      r"|stays?|continues?)\s+pending\s+)" + _CLAUSE, re.IGNORECASE)
_ONCE_AGAIN = re.compile(r"\bonce\s+(?P<cond>[^.;:!?\n,]{2,100}?)\s*(?:,|\s(?=\S+\s+(?:again|resumes?)\b))"
                         r"(?P<main>(?:[^.;:!?\n]|(?<=\d)[:.](?=\d))*?\b(?:applies\s+again"
                         r"|apply\s+again|resumes?|is\s+restored|are\s+restored"
                         r"|reverts?\s+to|returns?\s+to|is\s+reinstated|are\s+reinstated|takes\s+effect\s+again)\b)",
                         re.IGNORECASE)
_AGAIN_ONCE = re.compile(r"\b(?:applies\s+again|apply\s+again|resumes?|is\s+restored|are\s+restored|reverts?\s+to"
                         r"[^.;:!?\n]*?|returns?\s+to[^.;:!?\n]*?"
                         r"|is\s+reinstated|are\s+reinstated)\s+(?:once|when|after"
                         r"|as\s+soon\s+as)\s+" + _CLAUSE, re.IGNORECASE)
_CEASES = re.compile(r"\b(?:ceases?\s+to\s+(?:apply|be\s+valid|have\s+effect)|stops?\s+applying|no\s+longer\s+applies"
                     r"|lapses?|expires?|falls?\s+away)\s+(?:when|once|after|as\s+soon\s+as|upon|on|at)\s+"
                     + _CLAUSE, re.IGNORECASE)
_COND_TRIGGER = re.compile(r"\b(?:until|till|while|whilst|long\s+as|duration|course|length|pending|once|ceases?|stops?"
                           r"|no\s+longer|lapses?|expires?|falls?\s+away)\b", re.IGNORECASE)

_DONE = re.compile(r"\s+(?:(?:is|are|has\s+been|have\s+been|gets?|becomes?|was|were)\s+)?(?:complete|completed|finished"
                   r"|done|over|concluded|finali[sz]ed)$|\s+(?:has|have)\s+(?:completed|finished|concluded)$"
                   r"|\s+(?:goes|go|has\s+gone|have\s+gone|is|are)\s+live$|\s+(?:finishes|concludes|finish|conclude)$",
                   re.IGNORECASE)
# "until 31 March", "until the end of the quarter": a date is validity (find_effective), not an event.
_WHEN = re.compile(r"(?:\d|(?:" + nlp.MONTH_NAMES + r")\b|(?:mon|tues|wednes|thurs|fri|satur|sun)day\b"
                   r"|(?:the\s+)?end\s+of"
                   r"\s+(?:the\s+)?(?:day|week|month|quarter|year|financial|fiscal|q\d)"
                   r"|(?:the\s+|this\s+|that\s+)?(?:day|night|week|month|year|quarter|shift)\b"
                   r"|tomorrow|next\s+(?:week|month|year"
                   r"|quarter)|midnight|noon|today|then\b|now\b)", re.IGNORECASE)
_LEAD = re.compile(r"^(?:the\s+end\s+of\s+|completion\s+of\s+)", re.IGNORECASE)


def _clause(text: str) -> str:
    """A condition's clause up to its first cut, its completion predicate written "completes"."""
    c = _LEAD.sub("", _CUT.split(text, maxsplit=1)[0].strip(" \"'()"))
    return _DONE.sub(" completes", c).strip()


_FRONTED = re.compile(r"^(?:while|whilst|pending|once|until|till|as\s+long\s+as|so\s+long\s+as|during|for\s+the\s+"
                      r"(?:duration|course|length)\s+of)\b[^,]*,\s*", re.IGNORECASE)
_YOU_MUST = re.compile(r"^(?:you|operators|agents)\s+(?:must|should|need\s+to|have\s+to)\b|^(?:do\s+not|don't|never"
                       r"|always)\b", re.IGNORECASE)
_FINITE = frozenset({"VBZ", "VBD", "VBP", "VBN", "MD"})


def _instruction_at(sent: str, name: str) -> int | None:
    """Where the main clause starts when the sentence is an instruction; None for a
    statement. The main clause follows a fronted condition ("While X, route ..."). It is
    an instruction when it opens with "you must", "do not", ... or with a base-form verb
    not followed by a finite one (spaCy's small pipeline tags a sentence-initial "Retry" as
    a noun, so the clause is read as "please <clause>", which it tags reliably)."""
    m = _FRONTED.match(sent)
    at = m.end() if m else 0
    clause = sent[at:]
    if _YOU_MUST.match(clause):
        return at
    if not clause[:1].isalpha():
        return None
    toks = nlp.pipeline(name)("please " + clause[0].lower() + clause[1:])
    if len(toks) > 1 and toks[1].tag_ == "VB" and (len(toks) < 3 or toks[2].tag_ not in _FINITE):
        return at
    return None


def _conditions_in(s: str) -> list[tuple[int, str]]:
    """(offset, normalised condition) candidates of one cleaned sentence, by phrasing."""
    out: list[tuple[int, str]] = []
    if m := _OPEN_ENDED.search(s):
        out.append((m.start(), "until further notice"))
    for m in _IN_EFFECT_UNTIL.finditer(s):
        if not re.match(r"(?:further\s+notice|otherwise)\b", m.group("cond"), re.IGNORECASE):
            out.append((m.start(), f"until {_clause(m.group('cond'))}"))
    for m in _WHILE.finditer(s):
        out.append((m.start(), f"until {_clause(m.group('cond'))} completes"))
    for m in _AS_LONG_AS.finditer(s):
        ongoing = re.fullmatch(_ONGOING, m.group("state"), re.IGNORECASE)
        out.append((m.start(), f"until {_clause(m.group('cond'))} {'completes' if ongoing else 'ends'}"))
    for m in _DURATION.finditer(s):
        out.append((m.start(), f"until {_clause(m.group('cond'))} completes"))
    for m in _PENDING.finditer(s):
        out.append((m.end() - len(m.group("cond")) - 8, f"until {_clause(m.group('cond'))}"))
    for m in _ONCE_AGAIN.finditer(s):
        out.append((m.start(), f"until {_clause(m.group('cond'))}"))
    for m in _AGAIN_ONCE.finditer(s):
        out.append((m.start(), f"until {_clause(m.group('cond'))}"))
    for m in _CEASES.finditer(s):
        out.append((m.start(), f"until {_clause(m.group('cond'))}"))
    return out


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


def find_condition(sents: list[str], pipeline: str = DEFAULT_PIPELINE) -> str | None:
    """The first stopping condition the sentences state (see the module doc), normalised."""
    for raw in sents:
        if not _COND_TRIGGER.search(raw):
            continue
        s = _clean(raw)
        found = _conditions_in(s)
        found += [(m.start(), f"until {_clause(m.group('cond'))}") for m in _UNTIL.finditer(s)
                  if not _OPEN_ENDED.match(s, m.start()) and _STATE & set(tokenize(s[:m.start()]))]
        # a fronted "Until X, <rule>" limits the rule that follows, whatever its verb
        if (m := _FRONT_UNTIL.match(s)) and not _OPEN_ENDED.match(s):
            found.append((0, f"until {_clause(m.group('cond'))}"))
        found = [(at, c) for at, c in found
                 if c != "until" and not _WHEN.match(c[6:]) and len(c.split()) <= _MAX_COND_WORDS + 1]
        if not found:
            continue
        verb_at = _instruction_at(s, pipeline)
        for at, cond in sorted(found):
            if verb_at is None or at < verb_at:  # "retry until X": how long to act, not how long a rule holds
                return cond
    return None


# ----------------------------------------------------------------------------- events

_EVENT_VERB = (r"(?P<verb>completed|finished|concluded|went\s+live|rolled\s+out|done|cut\s+over|closed\s+out"
               r"|complete\s+as\s+of|completed\s+as\s+of|live\s+as\s+of|finished\s+as\s+of)")
_COMPLETED = re.compile(
    r"(?P<subj>(?:[\w'-]+\s+){0,6}?)(?:was\s+|were\s+|has\s+been\s+|have\s+been\s+|had\s+been\s+|is\s+|are\s+|got\s+)?"
    + _EVENT_VERB + r"(?:\s+(?:successfully|fully|in\s+full))?\s+(?:on\s+|as\s+of\s+|at\s+|by\s+)?(?:\w+day,?\s+)?"
    r"(?P<date>" + DATE + ")", re.IGNORECASE)
# "We completed the ERP migration on <date>": the object is what completed.
_COMPLETED_OBJ = re.compile(
    r"\b(?:we|they|the\s+team|ops|engineering|it)\s+(?:have\s+|has\s+|had\s+)?(?:successfully\s+)?(?P<verb>completed"
    r"|finished|concluded|rolled\s+out|cut\s+over)\s+(?P<subj>(?:[\w'-]+\s+){1,6}?)(?:successfully\s+)?on\s+"
    r"(?:\w+day,?\s+)?(?P<date>" + DATE + ")", re.IGNORECASE)
_SUCCESS_FIRST = re.compile(r"\bsuccessfully\s+(?=completed|finished|concluded|went|rolled|cut)", re.IGNORECASE)
_EVENT_DOC = re.compile(r"\b(?:rollout|roll-out|deployment|release|cutover|migration|change|go-live|upgrade)\s+"
                        r"(?:record|log|report|ticket|request|note|summary)\b", re.IGNORECASE)
_EVENT_TYPES = frozenset({"deployment", "rollout", "change", "migration", "release", "change-record", "cutover"})
_EVENT_TRIGGER = re.compile(r"\b(?:completed|finished|concluded|live|rolled|done|cut\s+over|complete|closed)\b",
                            re.IGNORECASE)
_SUBJ_DROP = frozenset({"the", "a", "an", "its", "our", "their", "and", "then", "finally", "it", "this", "that",
                        "all", "we", "has", "have", "had", "was", "were", "is", "are"})
_COMPLETION_COLUMN = re.compile(r"^(?:completed|completion|completion\s+date|date\s+completed|completed\s+on|finished"
                                r"|finished\s+on|went\s+live|go-live\s+date|live\s+on|done|done\s+on|cut\s+over"
                                r"|cutover\s+date)$", re.IGNORECASE)


def _event_doc(doc: SourceDocument) -> bool:
    return doc.doc_type in _EVENT_TYPES or bool(_EVENT_DOC.search(f"{doc.title}\n{doc.text[:300]}"))


def _event(subject: str, verb: str, on: dt.date) -> Event | None:
    words = [w for w in re.split(r"\s+", subject.strip(" ,:-")) if w]
    # Only the subject's own clause: "... and then the Globex cutover" starts after "then".
    for i in range(len(words) - 1, -1, -1):
        if words[i].lower() in ("and", "then", "after", "before", "when", "once", "so", "but"):
            words = words[i + 1:]
            break
    while words and words[0].lower() in _SUBJ_DROP:
        words = words[1:]
    while words and words[-1].lower() in _SUBJ_DROP:
        words = words[:-1]
    if not words:
        return None
    what = " ".join(words).lower()
    what = f"{what} cutover completed" if re.fullmatch(r"cut\s+over", verb, re.IGNORECASE) and "cutover" not in what \
        else f"{what} completed"
    return Event(what=what, on=on) if 3 <= len(what) <= 300 else None


def _table_events(lines: list[str]) -> list[Event]:
    out: list[Event] = []
    col: int | None = None
    for line in lines:
        if not line.startswith("|"):
            col = None
            continue
        cells = [_clean(c) for c in line.strip().strip("|").split("|")]
        if all(re.fullmatch(r":?-{2,}:?", c) for c in cells if c):
            continue
        if col is None:
            hits = [i for i, c in enumerate(cells) if _COMPLETION_COLUMN.match(c)]
            col = hits[0] if hits and hits[0] > 0 else -1
            continue
        if col < 0 or col >= len(cells):
            continue
        on = parse_date(cells[col])
        if on is not None and (ev := _event(cells[0], "completed", on)):
            out.append(ev)
    return out


def find_events(doc: SourceDocument, sents: list[str]) -> tuple[Event, ...]:
    if not _event_doc(doc):
        return ()
    out: dict[tuple[str, dt.date], Event] = {}
    for raw in sents:
        if not _EVENT_TRIGGER.search(raw):
            continue
        s = _SUCCESS_FIRST.sub("", _clean(raw))
        for m in (*_COMPLETED_OBJ.finditer(s), *_COMPLETED.finditer(s)):
            on = parse_date(m.group("date"))
            if on is not None and (ev := _event(m.group("subj"), m.group("verb"), on)):
                out.setdefault((ev.what, on), ev)
    if "|" in doc.text:
        from quarry.core.text.units import logical_lines

        for ev in _table_events(logical_lines(doc.text)):
            out.setdefault((ev.what, ev.on), ev)
    return tuple(sorted(out.values(), key=lambda e: (e.on, e.what)))


# ----------------------------------------------------------------------------- supersession

_SUPERSEDE = re.compile(r"\b(?P<verb>superseded\s+by|replaced\s+by|succeeded\s+by|in\s+favou?r\s+of|replaces|supersedes"
                        r"|rescinds|withdraws|retires|revokes)\b(?P<rest>[^.;!?\n]*)", re.IGNORECASE)
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
_SUP_TRIGGER = re.compile(r"\b(?:supersed|replac|succeeded|favou?r|rescind|withdr[ae]w|retire|revok|deprecat"
                          r"|no\s+longer)", re.IGNORECASE)


def _ids_in(rest: str, own: str, first: bool = True) -> list[str]:
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


def find_supersession(doc: SourceDocument, sents: list[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    sup: list[str] = []
    by: list[str] = []
    for s in sents:
        if not _SUP_TRIGGER.search(s):
            continue
        for m in _SUPERSEDE.finditer(s):
            verb = m.group("verb").lower()
            passive = verb.endswith(" by") or "favo" in verb
            if passive and _ids_in(s[:m.start()], doc.doc_id):
                continue  # "`a` is superseded by `b`": a link between two other documents
            target = by if passive else sup
            for i in _ids_in(m.group("rest"), doc.doc_id):
                if i not in target:
                    target.append(i)
        for m in _PASSIVE.finditer(s):
            if re.match(r"\s*(?:by|in\s+favou?r\s+of)\s+(?!this\b)", m.group("rest"), re.IGNORECASE):
                continue  # "<a> is superseded by <b>": a link between two others, or ours above
            for i in _ids_in(m.group("head"), doc.doc_id, first=False):
                if i not in sup and i not in by:
                    sup.append(i)
    return tuple(sorted(sup)), tuple(sorted(by))


# ----------------------------------------------------------------------------- validity

_DOC_NOUN = (r"(?:policy|document|agreement|contract|amendment|runbook|page|version|exception|rule|procedure|guideline"
             r"|guidance|notice|memo|standard|schedule|waiver|arrangement|addendum|circular|directive|sop|rate|offer"
             r"|price\s+list|plan|process|instruction|instructions)")
_SELF = r"(?:^|\bthis\s+" + _DOC_NOUN + r"\b[^.]*?)"
_FROM = re.compile(_SELF + r"\b(?:is\s+|are\s+|becomes\s+)?(?:effective|in\s+force|takes\s+effect|applies|apply"
                   r"|valid)\s*(?:from|on|as\s+of|starting|beginning|with\s+effect\s+from)?:?\s*(?P<date>" + DATE
                   + ")", re.IGNORECASE)
_TO = re.compile(_SELF + r"\b(?:is\s+|are\s+|remains\s+)?(?:effective|in\s+force|valid|applies|apply)\s+(?:until|till"
                 r"|to|through|thru|up\s+to\s+and\s+including)\s*:?\s*(?P<date>" + DATE + r")"
                 r"|(?:^|\bthis\s+" + _DOC_NOUN + r"\b[^.]*?|\b(?:it|and)\s+)\bexpires\s+(?:on\s+)?(?P<date2>" + DATE
                 + ")", re.IGNORECASE)
_RANGE = re.compile(_SELF + r"\b(?:is\s+)?(?:effective|in\s+force|valid|applies)\s+from\s+(?P<a>" + DATE
                    + r")\s+(?:until|till|to|through)\s+(?P<b>" + DATE + ")", re.IGNORECASE)
_ENDED = re.compile(r"(?:^|\bthis\s+" + _DOC_NOUN
                    + r"\b[^.]*?\b(?:is|are|was|has\s+been|will\s+be|stands)\s+(?:hereby\s+)?)"
                    r"(?P<what>rescinded|withdrawn|retired|revoked|no\s+longer\s+in\s+(?:force|effect)|no\s+longer"
                    r"\s+valid|cancelled|canceled)\s+(?:(?P<rel>as\s+of|on|from"
                    r"|effective|effective\s+from|with\s+effect"
                    r"\s+from|after|from\s+and\s+including)\s+)?(?P<date>" + DATE + ")", re.IGNORECASE)
# "`other-policy` is rescinded with effect from 1 February 2026": this document's rescission
# (its own rule) takes effect then, so it is in force from that date.
_OTHER_ENDS = re.compile(r"\b(?:is|are|was|were|will\s+be)\s+(?:hereby\s+)?(?:rescinded|withdrawn|retired|revoked"
                         r"|replaced|superseded)\b[^.]*?\b(?:with\s+effect\s+from|effective\s+from|effective\s+as\s+of"
                         r"|effective|as\s+of|from|on)\s+(?P<date>" + DATE + ")", re.IGNORECASE)
# "The allowance is a pilot and is valid through 31 December 2025": the sentence's subject,
# the noun phrase before the verb, is checked against the document's title.
_TITLED = re.compile(r"^(?:the|our|this)\s+(?P<subj>(?:[\w-]+\s+){0,2}[\w-]+)\s+(?:is|are|remains|stays)\b[^.]*?\b"
                     r"(?:valid|effective|in\s+force|applies|available)\s+(?P<dir>until|till|through|thru|to|from"
                     r"|as\s+of)\s+(?P<date>" + DATE + ")", re.IGNORECASE)
_EFF_TRIGGER = re.compile(r"\b(?:effective|effect|force|valid|applies|apply|expires|rescinded|withdrawn|retired|replaced|superseded"
                          r"|revoked|no\s+longer|cancell?ed|canceled)\b", re.IGNORECASE)


def find_effective(sents: list[str], own: str | None = None, title: str = "") -> tuple[dt.date | None, dt.date | None]:
    """(effective_from, effective_to) this document states; ``own`` is its doc id, so a
    sentence ending another document from a date makes this one effective then; a
    sentence whose subject is what the ``title`` names ("The allowance is valid through
    ...", in "Wellbeing allowance 2025") speaks of this document."""
    start = end = None
    named = frozenset(tokenize(title))
    for raw in sents:
        if not _EFF_TRIGGER.search(raw):
            continue
        s = _clean(raw)
        if m := _RANGE.search(s):
            start = start or parse_date(m.group("a"))
            end = end or parse_date(m.group("b"))
        if end is None and (m := _ENDED.search(s)):
            if (d := parse_date(m.group("date"))) is not None:
                end = d if (m.group("rel") or "").lower() == "after" else d - dt.timedelta(days=1)
        if start is None and own and (m := _OTHER_ENDS.search(s)) and _ids_in(s, own):
            start = parse_date(m.group("date"))
        if start is None and (m := _FROM.search(s)) and not (_ENDED.search(s)):
            start = parse_date(m.group("date"))
        if end is None and (m := _TO.search(s)):
            end = parse_date(m.group("date") or m.group("date2"))
        if (m := _TITLED.search(s)) and set(tokenize(m.group("subj"))) & named:
            d = parse_date(m.group("date"))
            if m.group("dir").lower().startswith(("until", "till", "through", "thru", "to")):
                end = end or d
            else:
                start = start or d
    return start, end


# ----------------------------------------------------------------------------- enrich


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
    sup, by = find_supersession(doc, sents) if not (doc.supersedes and doc.superseded_by) else ((), ())
    if not doc.supersedes and sup:
        found["supersedes"] = sup
    if not doc.superseded_by and by:
        found["superseded_by"] = by
    start, end = find_effective(sents, doc.doc_id, doc.title) if doc.effective_from is None or doc.effective_to is None else (None, None)
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
