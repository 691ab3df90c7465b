"""Value statements in passage text: the build-time entry (:func:`statements_batch`) and
the per-passage one (:func:`statements`).

A :class:`.statement.Statement` is one value with what it is a value *of*, read from a
dependency parse rather than from a word window. One sentence is read in four steps:

1. :mod:`.sentences` picks the sentences to parse: only those holding a free-standing
   number, each with the header of the table it is a row of;
2. :mod:`.quantities` finds the values (**value, unit, magnitude**: pint units, currencies,
   clock times, counts, rates);
3. :mod:`.anchors` finds what each value is of (**predicate** and **subject**), keyed
   through :data:`.subjects.SYNONYMS`;
4. this module adds the **scope** (the entities the sentence itself names: the passage's
   envelope entities found in it, and proper nouns the parse makes a subject, owner or
   "for"/"with"/"by" object, not a capitalised plural such as "Webhooks are ..."; no NER
   is run), folds restated equivalents ("GBP 35 (EUR 40)") into their value, and builds
   the statements.

Whether two statements are about one subject is :mod:`.subjects`; whether they conflict,
:mod:`.conflict`. The parse is spaCy's ``en_core_web_sm`` from
:func:`quarry.core.text.nlp.pipeline` (one loader per process, NER excluded;
configurable: ``nlp_name``). Nothing here imports spaCy, pint or dateparser at import
time: ``import quarry.core`` stays light.
"""

from __future__ import annotations

import calendar
import threading
from dataclasses import replace
from collections.abc import Sequence
from functools import lru_cache

from quarry.core.evidence.anchors import predicate_key, table_anchor, value_anchor
from quarry.core.evidence.quantities import (CURRENCY_CODES, DAY_COUNT_WORDS, TIMEZONES, Value, is_code_token,
                                            names_duration, sentence_values)
from quarry.core.evidence.sentences import clock_words, numeric_sentences_with_topics
from quarry.core.evidence.statement import Statement
from quarry.core.evidence.subjects import CANON, GENERIC_WORDS, concept
from quarry.core.text.nlp import pipeline

__all__ = ["DEFAULT_NLP", "load_nlp", "statements", "statements_batch"]

DEFAULT_NLP = "en_core_web_sm"

_LOCK = threading.Lock()


def load_nlp(nlp_name: str = DEFAULT_NLP):
    """The spaCy pipeline ``nlp_name``: :func:`quarry.core.text.nlp.pipeline`'s, one per process
    (no named-entity recognition: scope comes from the envelope entities and the parse)."""
    return pipeline(nlp_name)


def _plural_subject(tok) -> bool:
    """A capitalised plural noun the small model tags PROPN ("Webhooks are retried"): the
    verb agrees with a plural subject, so it names things, not a party."""
    if not tok.lower_.endswith("s") or tok.dep_ not in ("nsubj", "nsubjpass"):
        return False
    verb = tok.head
    return verb.tag_ == "VBP" or any(c.dep_ in ("aux", "auxpass") and c.lower_ in ("are", "were", "have")
                                     for c in verb.children)


def _scope_of(doc, entities: Sequence[str]) -> tuple[set[str], set[int]]:
    """Entity names the sentence names, and the tokens they cover."""
    names, ids = set(), set()
    wanted = {e.lower() for e in entities}
    for tok in doc:
        low = tok.lower_.removesuffix("'s")
        if low in wanted:
            names.add(low)
            ids.add(tok.i)
    for tok in doc:  # "Acme remains on ...", "Acme's cutoff": a named party the parser sees
        if (tok.pos_ == "PROPN" and (tok.dep_ in ("nsubj", "nsubjpass", "poss")
                                     or tok.dep_ == "pobj" and tok.head.lower_ in ("for", "with", "by"))
                and tok.i not in ids
                and tok.text not in CURRENCY_CODES and not (tok.text.isupper() and len(tok.text) <= 4)
                and tok.lower_ not in TIMEZONES and not is_code_token(tok) and not _plural_subject(tok)):
            names.add(tok.lower_.removesuffix("'s"))
            ids.add(tok.i)
    return names, ids


def _limit_marked(doc, v: Value) -> bool:
    """The value is stated as a bound: "up to 35 kg", "at most 30 kg"."""
    for i in v.tokens:
        for c in doc[i].children:
            if c.lower_ == "up" and c.i + 1 < len(doc) and doc[c.i + 1].lower_ == "to":
                return True
            if c.lower_ == "most" and c.i > 0 and doc[c.i - 1].lower_ == "at":
                return True
    return False


def _paren_spans(doc) -> list[tuple[int, int]]:
    """(index of "(", index of its ")") for each parenthesis of the sentence."""
    spans, open_at = [], None
    for t in doc:
        if t.text == "(" and open_at is None:
            open_at = t.i
        elif t.text == ")" and open_at is not None:
            spans.append((open_at, t.i))
            open_at = None
    return spans


def _equivalents(doc, values: list[Value]) -> dict[int, int]:
    """Values in a parenthesis right after another value: the same amount restated ("GBP 35
    per day (EUR 40, USD 45)", "GBP 5,000 (EUR 5,800 in Porto)"), keyed by index, to the
    index of the value they restate."""
    out: dict[int, int] = {}
    for a, b in _paren_spans(doc):
        main = next((k for k, w in enumerate(values) if max(w.tokens) == a - 1), None)
        if main is None:
            continue
        for k, w in enumerate(values):
            if a < min(w.tokens) and max(w.tokens) < b:
                out[k] = main
    return out


_PERIOD_NOUNS = frozenset("hour day night week fortnight month quarter year".split())


def _unit_phrase(doc, values: list[Value]) -> set[int]:
    """Tokens of the values' own phrases that are not in their spans: a day-count word on a
    span's unit noun ("10 *working* days") and a rate's period on it ("20 days *a year*",
    "4 hours *each night*") with its determiner. They say how the value is counted."""
    out: set[int] = set()
    for v in values:
        if not v.unit.startswith("duration"):
            continue
        for i in v.tokens:
            for c in doc[i].children:
                if c.i in v.tokens:
                    continue
                if c.dep_ in ("amod", "compound") and c.lower_ in DAY_COUNT_WORDS:
                    out.add(c.i)
                elif c.dep_ == "npadvmod" and c.lemma_.lower() in _PERIOD_NOUNS and any(
                        d.dep_ == "det" for d in c.children):
                    out |= {c.i} | {d.i for d in c.children if d.dep_ == "det"}
    return out


# A clock time is when something starts or when it ends: "from 06:00 to 22:00", "opens at 7",
# "closes at 23:00". The role is the statement's predicate ("start", "end"), so an opening
# time never conflicts with a closing time, and the end of a span is no cutoff ("the
# canary ran from 09:00 to 11:00" states no deadline).
_START_VERBS = frozenset("begin start open commence".split())
_END_VERBS = frozenset("end finish stop close cease shut".split())
# "from" and "until" bound a time span; "before", "after" and "by" set a cutoff (no role).
_START_PREPS = frozenset({"from", "since"})
_END_PREPS = frozenset({"until", "till"})
_RANGE_WORDS = frozenset({"to", "-", "–", "—", "until", "till", "and", "through"})


def _clock_roles(doc, values: list[Value]) -> dict[int, str]:
    """"start" or "end" for each clock time (by index) the sentence gives a role: the first
    and second value of a range ("06:00 to 22:00", "between 07:00 and 19:00", "06:30-10:30"),
    else the preposition or the start or end verb that governs it ("from 2 pm", "until
    noon", "starts at 23:00", "closes at 11 pm")."""
    out: dict[int, str] = {}
    clocks = [k for k, v in enumerate(values) if v.unit == "time_of_day"]
    for a, b in zip(clocks, clocks[1:]):
        lo, hi = max(values[a].tokens), min(values[b].tokens)
        between = [t for t in doc[lo + 1:hi]]
        if between and len(between) <= 2 and all(t.lower_ in _RANGE_WORDS for t in between) \
                and a not in out and b not in out:
            out[a], out[b] = "start", "end"
    for k in clocks:
        if k in out:
            continue
        tok = doc[min(values[k].tokens)]
        for _ in range(3):
            if tok.head.i == tok.i:
                break
            tok = tok.head
            if tok.pos_ == "ADP" and tok.lower_ in _START_PREPS | _END_PREPS:
                out[k] = "start" if tok.lower_ in _START_PREPS else "end"
                break
            if tok.pos_ in ("VERB", "AUX", "ADJ"):
                lem = tok.lemma_.lower()
                if lem in _START_VERBS:
                    out[k] = "start"
                elif lem in _END_VERBS:
                    out[k] = "end"
                break
    return out


def _role_predicate(role: str) -> str:
    return role


def _table_cells(doc) -> list[tuple[int, int]]:
    """(first, last) token index of each cell of a table row "| a | b |"."""
    bars = [t.i for t in doc if t.text == "|"]
    return [(x + 1, y - 1) for x, y in zip(bars, bars[1:]) if y - 1 >= x + 1]


def _for_whom(doc, v: Value, have: set, cell: tuple[int, int] | None = None) -> list:
    """Whom or what the value itself is for, as written after it: "6 weeks *for senior
    engineers*", "30 days for refunds" (the object of a "for" on the value's own noun, with
    its modifiers; in a table cell, whose parse is seldom a sentence's, the nouns after
    the first "for" that follows the value in its cell): part of what the value is of."""
    if cell is not None:
        after = [t for t in doc[max(v.tokens) + 1:cell[1] + 1]]
        at = next((k for k, t in enumerate(after) if t.lower_ == "for"), None)
        if at is None or any(t.like_num for t in after[:at]):
            return []
        return [t for t in after[at + 1:] if t.pos_ in ("NOUN", "PROPN", "ADJ") and t not in have]
    out = []
    for i in v.tokens:
        for c in doc[i].children:
            if c.dep_ == "prep" and c.lower_ == "for" and c.i not in v.tokens:
                for g in c.children:
                    if g.dep_ == "pobj" and g.pos_ in ("NOUN", "PROPN") and g.i not in v.tokens:
                        out += [t for t in (*g.children, g) if t.dep_ in ("compound", "amod", "pobj")
                                and t.pos_ in ("NOUN", "PROPN", "ADJ") and t not in have]
    return out


_MONTHS = frozenset(m.lower() for m in (*calendar.month_name[1:], *calendar.month_abbr[1:]))


def _in_calendar_date(t) -> bool:
    """The month of a date ("from 1 *March* 2026", "*May* 31"): when a value applies, never
    what it is of. A month named alone ("the March payroll") stays."""
    return t.lower_.rstrip(".") in _MONTHS and any(c.like_num for c in t.children)


def _lemmas(toks, skip: set[int]) -> list[str]:
    out = []
    for t in toks:
        if t.i in skip or t.is_stop or t.is_punct or t.like_num or t.text == "|" or _in_calendar_date(t):
            continue
        lem = t.lemma_.lower() if t.text not in CURRENCY_CODES else t.text.lower()
        if lem in GENERIC_WORDS and lem not in CANON or not any(c.isalpha() for c in lem):
            continue
        out.append(lem)
    return out


def _region(doc, values: list[Value], k: int) -> list:
    """The part of a list sentence value ``k`` belongs to: from after the previous value to
    the end of this one (a subject comes before its value in English), the last value
    taking the rest; the whole sentence when it states one value."""
    if len(values) == 1:
        return list(doc)
    ends = sorted(max(w.tokens) for w in values)
    mine = max(values[k].tokens)
    lo = max((e for e in ends if e < mine), default=-1)
    hi = len(doc) - 1 if mine == ends[-1] else mine
    return [t for t in doc if lo < t.i <= hi]


def _context(doc, values: list[Value], k: int, skip: set[int], anchor_ids: set[int] = frozenset()) -> tuple[str, ...]:
    """Content lemmas of value ``k``'s region and of its anchor, in text order, once each."""
    region = {t.i for t in _region(doc, values, k)} | set(anchor_ids)
    return tuple(dict.fromkeys(_lemmas(sorted((doc[i] for i in region), key=lambda t: t.i), skip)))


def _qualifiers(doc, values: list[Value], k: int, anchor_ids: set[int] = frozenset()) -> tuple[str, ...]:
    """Names and labels in value ``k``'s part of the sentence: proper nouns that say where
    or under what ("in Leeds", "in the Harbour district", "under the Acme MSA": the object of
    a place preposition or a word of it) and a noun with the number that labels it ("line
    3", "tier 2"), lowercased."""
    value_ids = {i for w in values for i in w.tokens}
    region = sorted({t.i for t in _region(doc, values, k)} | set(anchor_ids))
    out = []
    for i in region:
        t = doc[i]
        if i in value_ids or t.is_punct:
            continue
        if t.pos_ == "PROPN" and _where(t) and t.text not in CURRENCY_CODES \
                and t.lower_ not in TIMEZONES and any(c.isalpha() for c in t.text):
            out.append(t.lower_.removesuffix("'s"))
        elif t.like_num and i > 0 and doc[i - 1].pos_ in ("NOUN", "PROPN") and t.head.i == i - 1:
            out.append(f"{doc[i - 1].lower_} {t.lower_}")
    return tuple(dict.fromkeys(out))


_PLACE_PREPS = frozenset({"in", "at", "under", "on", "from", "across", "throughout"})


def _where(tok) -> bool:
    """The token is the object of a place preposition, or a word of that object's phrase."""
    for _ in range(3):
        if tok.dep_ == "pobj":
            return tok.head.lower_ in _PLACE_PREPS
        if tok.dep_ not in ("compound", "amod", "poss", "nmod") or tok.head.i == tok.i:
            return False
        tok = tok.head
    return False


def _masked(doc, value_ids: set[int]) -> str:
    """The sentence with each value written as "#" (the unit compatibility is checked apart)."""
    out, prev = [], None
    for t in doc:
        if t.i in value_ids:
            if prev != "#":
                out.append("#" + t.whitespace_)
            prev = "#"
            continue
        out.append(t.text_with_ws)
        prev = t.text
    return "".join(out).strip()


def _bare(doc, cell: tuple[int, int], value_ids: set[int]) -> bool:
    """Whether a table cell holds only its value: no content word outside the value, its
    unit phrase and the period it is counted per ("EUR 6 per seat per month", not "payroll
    runs need the batch by 12:00")."""
    return not any(t.i not in value_ids and not t.is_stop and not t.is_punct and any(c.isalpha() for c in t.text)
                   and t.lower_ != "per" and not names_duration(t.lemma_.lower()) for t in doc[cell[0]:cell[1] + 1])


def _caption_nouns(topic: tuple[tuple[str, ...], tuple[str, ...]], entities: Sequence[str]) -> tuple[str, ...]:
    """The nouns a table caption's head names its values by, less words that say nothing of a
    subject ("schedule", "period") and the passage's entities (scope, never a subject)."""
    scope = {e.lower() for e in entities}
    return tuple(n for n in topic[0] if n not in GENERIC_WORDS and n not in scope)


def _unanchored(doc, v: Value, values: list[Value], k: int, skip: set[int], scope: tuple[str, ...]) -> Statement:
    """A value the parse attaches to no subject: no subject or predicate of its own, only
    the lemmas around it (``context``) and the masked sentence."""
    value_ids = {i for w in values for i in w.tokens}
    context = _context(doc, values, k, skip)
    return Statement(subject=(), predicate="", value=v.value, unit=v.unit, magnitude=v.magnitude, scope=scope,
                     words=tuple(t.text for t in _region(doc, values, k) if t.i not in skip and not t.is_stop
                                 and not t.is_punct and any(c.isalpha() for c in t.text)),
                     context=context, clause=_masked(doc, value_ids), qualifiers=_qualifiers(doc, values, k))


_PORTION = frozenset("first last next final remaining initial opening closing".split())


def _portion(doc, v: Value) -> bool:
    """A span that says over which part of a period another value of the sentence holds:
    "pay GBP 29 a month for *the first 18 months*", "free for the last 2 weeks"."""
    i = min(v.tokens)
    return (v.unit == "duration" and i >= 2 and doc[i - 1].lower_ in _PORTION
            and doc[i - 2].lower_ in ("the", "its", "their", "your", "our"))


def _sentence_statements(doc, entities: Sequence[str], header: Sequence[str] = (), *, tenant: str,
                         caption: Sequence[str] = ()) -> list[Statement]:
    """The statements of one parsed sentence; ``header`` holds the column names of the
    table a row sentence ("| Meals | GBP 35 per day |") belongs to, ``caption`` the lemmas
    of the nouns its caption names the values by (:func:`_caption_nouns`)."""
    out = []
    scope_names, scope_ids = _scope_of(doc, entities)
    values = sentence_values(doc, tenant=tenant)
    value_ids = {i for w in values for i in w.tokens} | _unit_phrase(doc, values)
    equiv = _equivalents(doc, values)
    cells = _table_cells(doc) if doc.text.lstrip().startswith("|") else []
    # entities named inside an equivalent's parenthesis scope that value only
    paren_ids = {t.i for a, b in _paren_spans(doc) for t in doc[a:b + 1]
                 if any(a < min(values[k].tokens) < b for k in equiv)}
    main_scope = tuple(sorted({n for n in scope_names
                               if not any(doc[i].lower_.removesuffix("'s") == n for i in scope_ids - paren_ids)} ^
                              scope_names)) if paren_ids else tuple(sorted(scope_names))
    made: dict[int, Statement] = {}
    for k, v in enumerate(values):
        if k in equiv or (len(values) > 1 and _portion(doc, v)):
            continue
        got = value_anchor(doc, v)
        cell = next(((a, b) for a, b in cells if a <= min(v.tokens) <= b), None) if cells else None
        column: list[str] = []  # "Delivery" of a "Delivery charge" column: what the cell's price is of
        if cell is not None and cells and cell != cells[0]:
            got = table_anchor(doc, v, got, cells, cell, header)
            col = cells.index(cell)
            said = header[col].split() if col < len(header) else []
            if 1 < len(said) <= 2 and said[-1].lower() in CANON:
                column = [w.lower() for w in said[:-1] if any(c.isalpha() for c in w)]
        if got is None:
            # no anchor in the parse: a statement only the context rule (:mod:`.subjects`) can match
            made[k] = _unanchored(doc, v, values, k, scope_ids | value_ids, main_scope)
            continue
        pred, toks = got
        # "25 vacation days", "10 sick days": what the counted noun is qualified by is part of the subject
        toks = toks + [c for i in v.tokens for c in doc[i].children
                       if c.dep_ in ("compound", "amod") and c.i not in v.tokens and c.pos_ in ("NOUN", "ADJ")]
        toks = toks + _for_whom(doc, v, set(toks), cell)
        if isinstance(pred, str):
            predicate, subject = pred, _lemmas(toks, scope_ids | value_ids)
            pred_tok = None
        else:
            if not any(c.isalpha() for c in pred.text):
                continue  # a "|" parsed as a word
            pred_tok = pred
            subject = _lemmas(([pred] if pred.pos_ in ("NOUN", "PROPN") else []) + toks, scope_ids | value_ids)
            predicate = predicate_key(pred)
            if pred.pos_ in ("VERB", "AUX") and pred.lemma_.lower() not in CANON and _limit_marked(doc, v):
                predicate = CANON["limit"]  # "cartons can go up to 35 kg": a bound, whatever the verb
        named: list[str] = []
        if caption and cell is not None and _bare(doc, cell, value_ids):
            # "Table: Security add-on price" over "| Pro | EUR 6 per seat per month |": a cell
            # that holds only its value is a value of what the caption names, for the row
            named = [n for n in caption if concept(n) != concept(predicate) and n not in subject]
        subject = list(dict.fromkeys((*named, *column, *subject)))
        if pred_tok is not None and pred_tok.pos_ in ("VERB", "AUX", "ADJ") and not [
                s for s in subject if s != pred_tok.lemma_.lower()]:
            made[k] = _unanchored(doc, v, values, k, scope_ids | value_ids, main_scope)
            continue  # "it expires after 30 days": no subject of its own
        if v.unit == "day_of_month" and concept("submit") not in {concept(w) for w in (predicate, *subject)}:
            continue  # "paid on the 25th of each month": a date; "the cutoff is the 18th of the month": a value
        span_toks = [t for t in ([pred_tok] if pred_tok is not None else []) + toks]
        lo = min(t.i for t in span_toks) if span_toks else min(v.tokens)
        hi = max(t.i for t in span_toks) if span_toks else max(v.tokens)
        words = tuple(t.text for t in doc[min(lo, min(v.tokens)):max(hi, max(v.tokens)) + 1]
                      if t.i not in v.tokens and not t.is_stop and not t.is_punct and not t.like_num
                      and any(c.isalpha() for c in t.text))
        anchor_ids = {t.i for t in span_toks}
        made[k] = Statement(subject=tuple(subject), predicate=predicate, value=v.value, unit=v.unit,
                            magnitude=v.magnitude, scope=main_scope, words=words,
                            context=tuple(dict.fromkeys((*named, *_context(doc, values, k, scope_ids | value_ids,
                                                                           anchor_ids)))),
                            clause=_masked(doc, value_ids), qualifiers=_qualifiers(doc, values, k, anchor_ids))
    for k, v in enumerate(values):
        if k in equiv and equiv[k] in made:
            # an equivalent states the same value, unless the parenthesis names whom it is for
            close = next((b for a, b in _paren_spans(doc) if a < min(v.tokens) < b), len(doc))
            nxt = min((min(w.tokens) for w in values if min(w.tokens) > max(v.tokens)), default=close)
            nxt = min(nxt, close)
            names = sorted({doc[i].lower_.removesuffix("'s") for i in scope_ids if max(v.tokens) < i < nxt})
            if names:
                m = made[equiv[k]]
                made[k] = Statement(subject=m.subject, predicate=m.predicate, value=v.value, unit=v.unit,
                                    magnitude=v.magnitude, scope=tuple(names), words=m.words,
                                    context=m.context, clause=m.clause, qualifiers=m.qualifiers)
    for k, role in _clock_roles(doc, values).items():
        if k in made:
            made[k] = replace(made[k], predicate=_role_predicate(role))
    return [made[k] for k in sorted(made)]


# Verbs that carry no predicate of their own in a question: "how long does it *take*", "how
# much leave do I *get*", "how long do I *have* to appeal" (the verb after them does).
_LIGHT_VERBS = frozenset("be do have take get make need".split())


def _topic(doc) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """What a question asks a value of: the lemmas of its noun phrases (nouns and their
    modifiers), and of its content verbs (light verbs left out)."""
    nouns = [t for t in doc if t.pos_ in ("NOUN", "PROPN") or (
        t.pos_ == "ADJ" and t.dep_ in ("amod", "compound") and t.head.pos_ in ("NOUN", "PROPN"))]
    verbs = [t for t in doc if t.pos_ == "VERB" and t.lemma_.lower() not in _LIGHT_VERBS]
    return tuple(dict.fromkeys(_lemmas(nouns, set()))), tuple(dict.fromkeys(_lemmas(verbs, set())))


def _answering(s: Statement, topic: tuple[tuple[str, ...], tuple[str, ...]]) -> Statement:
    """A statement of an answer, about what the question asks: the question's nouns join its
    subject and its words its context; a verb predicate of the answer's own ("*allow* 5
    days", "*expect* a month") is how the answer is phrased, not what is stated, so only a
    relational noun ("the fee is ...") or a clock time's role stays the predicate."""
    nouns, verbs = topic
    if not nouns:
        return s
    keep = s.predicate if s.predicate in s.subject or s.predicate in ("start", "end") else ""
    return replace(s, subject=tuple(dict.fromkeys((*nouns, *s.subject))), predicate=keep,
                   context=tuple(dict.fromkeys((*nouns, *verbs, *s.context))))


def _labelled(s: Statement, topic: tuple[tuple[str, ...], tuple[str, ...]]) -> Statement:
    """A statement after a lead-in label ("**Complaints.** Acknowledge within 3 days"): the
    label's nouns join its subject and context; its predicate stays its own."""
    nouns, _ = topic
    if not nouns or set(nouns) <= set(s.subject):
        return s
    return replace(s, subject=tuple(dict.fromkeys((*nouns, *s.subject))),
                   context=tuple(dict.fromkeys((*nouns, *s.context))))


def _noun_phrases(doc) -> tuple[tuple[str, ...], ...]:
    """The lemmas of each noun phrase of a heading: a head noun with the compounds and
    adjectives before it ("Memo: group deposit and balance terms" gives (memo,),
    (group, deposit), (balance, term))."""
    out = []
    for t in doc:
        if t.pos_ not in ("NOUN", "PROPN") or (t.dep_ in ("compound", "amod") and t.head.pos_ in ("NOUN", "PROPN")
                                               and t.head.i > t.i):
            continue
        mods = [c for c in t.subtree if c.i <= t.i and c.dep_ in ("compound", "amod") and c.head.i > c.i]
        if lem := _lemmas([*mods, t], set()):
            out.append(tuple(dict.fromkeys(lem)))
    return tuple(out)


def _named_by_heading(s: Statement, phrases: tuple[tuple[str, ...], ...]) -> Statement:
    """A statement under a heading that names its subject in full ("Parking permits" over
    "the office issues the permit within 3 days"): a subject noun a noun phrase of the
    heading holds takes that phrase's other words (its modifiers) into the subject and the
    context; the heading's other phrases name other things ("balance terms" says nothing of
    the deposit in "Memo: group deposit and balance terms")."""
    nouns = tuple(dict.fromkeys(w for ph in phrases if set(s.subject) & set(ph) for w in ph))
    if not nouns or set(nouns) <= set(s.subject):
        return s
    return replace(s, subject=tuple(dict.fromkeys((*nouns, *s.subject))),
                   context=tuple(dict.fromkeys((*nouns, *s.context))))


def statements_batch(texts: Sequence[str], entities: Sequence[Sequence[str]] = (),
                     nlp_name: str = DEFAULT_NLP, batch_size: int = 64, *, tenant: str,
                     headings: Sequence[str] = ()) -> list[tuple[Statement, ...]]:
    """The value statements of each of ``tenant``'s texts, parsing all their numeric
    sentences in one ``nlp.pipe`` stream (the build-time API); ``headings`` (one per text,
    or none) are the headings the texts sit under: a question is what its answers are about
    (:func:`_answering`), another heading may name a subject in full (:func:`_named_by_heading`)."""
    if entities and len(entities) != len(texts):
        raise ValueError(f"entities must be empty or one sequence per text: {len(entities)} for {len(texts)} texts")
    if headings and len(headings) != len(texts):
        raise ValueError(f"headings must be empty or one per text: {len(headings)} for {len(texts)} texts")
    nlp = load_nlp(nlp_name)
    owners: list[int] = []
    sents: list[str] = []
    headers: list[tuple[str, ...]] = []
    asked: list[str] = []
    titled: list[str] = []
    captions: list[str] = []
    for k, text in enumerate(texts):
        heading = headings[k].strip() if headings else ""
        for s, header, topic, caption in numeric_sentences_with_topics(text, tenant=tenant, heading=heading):
            owners.append(k)
            sents.append(clock_words(s))
            headers.append(header)
            asked.append(topic)
            titled.append("" if topic or heading.endswith("?") else heading)
            captions.append(caption)
    out: list[list[Statement]] = [[] for _ in texts]
    with _LOCK:  # one pipeline per process: one stream through it at a time
        phrases = sorted({q for q in (*asked, *titled, *captions) if q})
        parsed = list(nlp.pipe(phrases, batch_size=batch_size))
        topics = dict(zip(phrases, (_topic(d) for d in parsed)))
        heads = dict(zip(phrases, (_noun_phrases(d) for d in parsed)))
        for k, header, q, h, c, doc in zip(owners, headers, asked, titled, captions,
                                           nlp.pipe(sents, batch_size=batch_size)):
            ents = entities[k] if entities else ()
            made = _sentence_statements(doc, ents, header, tenant=tenant,
                                        caption=_caption_nouns(topics[c], ents) if c else ())
            if q.endswith("?"):
                made = [_answering(s, topics[q]) for s in made]
            elif q:
                made = [_labelled(s, topics[q]) for s in made]
            elif h:
                made = [_named_by_heading(s, heads[h]) for s in made]
            out[k] += made
    return [tuple(x) for x in out]


@lru_cache(maxsize=20_000)
def _statements_cached(text: str, entities: tuple[str, ...], nlp_name: str, tenant: str) -> tuple[Statement, ...]:
    return statements_batch([text], [entities], nlp_name, tenant=tenant)[0]


def statements(text: str, entities: Sequence[str] = (), nlp_name: str = DEFAULT_NLP, *,
               tenant: str) -> tuple[Statement, ...]:
    """The value statements of ``text`` in order; ``entities`` are the passage's envelope
    entities, recognised as scope where the text names them. Memoised per ``tenant`` (the
    text's owner): one tenant's entry is never another's hit."""
    return _statements_cached(text, tuple(e.lower() for e in entities), nlp_name, tenant)


statements.cache_clear = _statements_cached.cache_clear  # type: ignore[attr-defined]
