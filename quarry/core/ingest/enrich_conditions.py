"""Envelope enrichment of ``condition``: a stopping condition on a stated state, written
as "until <what>" so the resolver's matching (``core.evidence.conditions``) reads one form:

* "Acme remains on the 16:00 cutoff until cutover" -> "until cutover" (a bare "until"
  needs a state word in its sentence: remains, stays, keeps, instead of, valid, ...);
* "... remains in effect / in force / valid until X" -> "until X";
* "while X is under way / in progress / ongoing" and "for the duration of X" ->
  "until X completes"; "as long as / however long X is in place / active / out of service /
  down / off the road" -> "until X ends"; "as long as X stays / keeps running on Y" (a
  named system) -> "until X on Y ends", so only a record naming both ends it;
* "pending X" -> "until X";
* a fronted "Until X, <rule>" -> "until X", also with no comma where the rule's subject (a
  pronoun, "staff") marks the clause's end ("Until the plant has moved we work on paper");
* "once X is finished, <the rule> applies again / resumes" -> "until X completes";
* "ceases to apply / no longer applies / lapses when X" -> "until X";
* "until further notice" (and "until otherwise notified") -> "until further notice":
  kept, but it names nothing a record can prove, so it never ends (``core.evidence.conditions``).

"X is complete / is finished / has been completed / goes live" in the condition is
written "X completes". The sentence must state a state or a rule, not give an
instruction: an imperative sentence ("Watch the settlement status until every payout
shows sent", "Retry until the webhook succeeds") has no condition unless the condition
is fronted and so scopes the instruction itself ("While the move is under way, route
orders to Leeds"). Imperatives are told by spaCy's parse (a base-form root verb without
a subject); a help page's "Yes." or "No." before its answer is read past first ("No. Stay at
home until you have been clear of sickness" is an instruction).
"""

from __future__ import annotations

import re

from quarry.core.text import nlp
from quarry.core.text.markdown import plain_sentence
from quarry.core.text.nlp import DEFAULT_PIPELINE
from quarry.core.text.tokenizer import tokenize

__all__ = ["find_condition"]

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
# (after a connective: "So, until the hotel has moved to the new PMS: take ...")
_FRONT_UNTIL = re.compile(r"^\W*(?:(?:so|and|but|then|now|therefore|meanwhile),?\s+)?(?:until|till)\s+"
                          r"(?P<cond>[^.;:!?\n,]{2,120})[,:]", re.IGNORECASE)
_ONGOING = (r"(?:under\s*way|in\s+progress|ongoing|running|being\s+\w+|going\s+on|continuing|happening|taking\s+place"
            r"|not\s+yet\s+(?:complete|completed|finished|done))")
_IN_PLACE = r"(?:in\s+(?:place|effect|force)|active|open|on)"
# a disruption that lasts: "as long as the exchanges are out of service", "so long as the lift is down"
_DISRUPTED = (r"(?:out\s+of\s+(?:service|action|use|order)|off\s+the\s+road|down|offline|unavailable|closed|shut"
              r"|flooded|disrupted|not\s+(?:available|working|in\s+service))")
# "while the works continue", "as long as the strike lasts": the verb itself says it is under way
_GOES_ON = r"(?:continues?|lasts?|goes\s+on|go\s+on|persists?|carries\s+on|carry\s+on)"
_WHILE = re.compile(r"\b(?:while|whilst)\s+(?P<cond>[^.;:!?\n,]{2,100}?)\s+(?:(?:is|are|remains?|stays?)\s+"
                    + _ONGOING + "|" + _GOES_ON + r")\b", re.IGNORECASE)
_AS_LONG_AS = re.compile(r"\b(?:(?:as|so)\s+long\s+as|however\s+long)\s+(?P<cond>[^.;:!?\n,]{2,100}?)\s+(?:"
                         # "as long as Whitcombe stays on CaseVault", "so long as Kilnworth keeps running on CentreMate":
                         # what it stays on is part of the state
                         r"(?:stays?|remains?|keeps?\s+(?:running|working|operating))\s+on\s+"
                         r"(?P<on>(?-i:[A-Z])[\w-]*(?:\s+(?-i:[A-Z])[\w-]*)*)|"
                         r"(?:is|are|remains?|stays?)\s+"
                         r"(?P<state>" + _ONGOING + "|" + _IN_PLACE + "|" + _DISRUPTED + r")|(?P<goes>" + _GOES_ON
                         + r"))\b", re.IGNORECASE)
_DURATION = re.compile(r"\b(?:for|during)\s+the\s+(?:duration|course|length)\s+of\s+" + _CLAUSE, re.IGNORECASE)
_PENDING = re.compile(r"(?:(?:^|[,;(]\s*)pending\s+(?=(?:the|a|an|its|their|our|this|that|(?:[\w-]+\s+){0,3}[\w-]+'s)\s)|\b(?:held"
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
                     r"|lapses?|expires?|falls?\s+away)\s+(?:when|once|after|as\s+soon\s+as|upon|on\s+the\s+day"
                     r"|on|at)\s+"
                     + _CLAUSE, re.IGNORECASE)
_COND_TRIGGER = re.compile(r"\b(?:until|till|while|whilst|long\s+as|however\s+long|duration|course|length|pending|once"
                           r"|ceases?|stops?|no\s+longer|lapses?|expires?|falls?\s+away)\b", re.IGNORECASE)

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


# "Until the plant has moved to the new system we record faults on paper": a fronted
# condition with no comma, closed where the main clause's subject, a pronoun or "staff", starts
# a lead-in whose "until" clause ends at the colon that opens a list: the listed rules hold
# until then ("The centre manager and I have agreed how we work until Marshgate has been
# moved over to Kinetiq:")
_LEAD_IN_UNTIL = re.compile(r"\b(?:until|till)\s+(?P<cond>[^.;:!?\n,]{2,120}?)\s*:\s*$", re.IGNORECASE)
_BARE_FRONT_UNTIL = re.compile(r"^\W*(?:until|till)\s+(?P<cond>[^.;:!?\n,]{2,120}?)\s+(?=(?:we|they|you|i|everyone"
                               r"|everybody|staff|all\s+staff)\s+\w)", re.IGNORECASE)


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
        if m.group("on"):
            out.append((m.start(), f"until {_clause(m.group('cond'))} on {m.group('on')} ends"))
            continue
        ongoing = m.group("goes") or re.fullmatch(_ONGOING, m.group("state"), re.IGNORECASE)
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


# Where a long condition's noun phrase gives way to where or how it happens: "the switch of
# building permits | to the new permitting system".
_TRAILING_PP = re.compile(r"\s(?:to|into|onto|from|at|for|with|on|in|by|via|across)\s", re.IGNORECASE)


def _shortened(cond: str) -> str:
    """A condition longer than ``_MAX_COND_WORDS`` cut before its first trailing
    prepositional phrase (not "of": "the switch of building permits" keeps what switches),
    so a long noun phrase still names the thing; a short one is kept whole ("until the
    move to Leeds completes" names where)."""
    if len(cond.split()) <= _MAX_COND_WORDS + 1:
        return cond
    head = _TRAILING_PP.split(cond, maxsplit=1)[0]
    completes = " completes" if cond.endswith(" completes") and not head.endswith(" completes") else ""
    return head + completes if len(head.split()) >= 3 else cond


# "... and lapse after that date": a date, not an event (the validity enricher reads the date)
_A_DATE = re.compile(r"until\s+(?:that|this|the\s+same|the\s+end)\s+(?:date|day)|until\s+then", re.IGNORECASE)


# a help page's "Yes." or "No." before its answer: the answer's own sentence is what is read
# ("No. Stay at home until you have been clear of sickness" is an instruction, not a state)
_ANSWER_WORD = re.compile(r"^\W*(?:yes|no)\s*[.,!;:]\s+", re.IGNORECASE)


def find_condition(sents: list[str], pipeline: str = DEFAULT_PIPELINE) -> str | None:
    """The first stopping condition the sentences state (see the module doc), normalised."""
    for raw in sents:
        if not _COND_TRIGGER.search(raw):
            continue
        s = _ANSWER_WORD.sub("", plain_sentence(raw))
        found = _conditions_in(s)
        found += [(m.start(), f"until {_clause(m.group('cond'))}") for m in _UNTIL.finditer(s)
                  if not _OPEN_ENDED.match(s, m.start()) and _STATE & set(tokenize(s[:m.start()]))]
        # a fronted "Until X, <rule>" limits the rule that follows, whatever its verb
        if (m := _FRONT_UNTIL.match(s)) and not _OPEN_ENDED.match(s):
            found.append((0, f"until {_clause(m.group('cond'))}"))
        elif (m := _BARE_FRONT_UNTIL.match(s)) and not _OPEN_ENDED.match(s) and len(m.group("cond").split()) >= 2:
            found.append((0, f"until {_clause(m.group('cond'))}"))
        elif (m := _LEAD_IN_UNTIL.search(s)) and not _OPEN_ENDED.match(s, m.start()) \
                and not re.match(r"\W*please\b", s, re.IGNORECASE):  # "Please retry until it succeeds:"
            found.append((m.start(), f"until {_clause(m.group('cond'))}"))
        found = [(at, _shortened(c)) for at, c in found]
        found = [(at, c) for at, c in found
                 if c != "until" and not _WHEN.match(c[6:]) and len(c.split()) <= _MAX_COND_WORDS + 1
                 and not _A_DATE.fullmatch(c)]
        if not found:
            continue
        verb_at = _instruction_at(s, pipeline)
        for at, cond in sorted(found):
            if verb_at is None or at < verb_at:  # "retry until X": how long to act, not how long a rule holds
                return cond
    return None
