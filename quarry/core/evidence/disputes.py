"""Conflicts among the passages that survived the rules (rules 4-5 of :mod:`.resolve`):
scope, then authority, decide who wins; an instruction-shaped passage loses every
conflict it is in; what stays undecided is reported as unresolved groups."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Mapping, Sequence

from quarry.core.evidence.conditions import _OPEN_ENDED, named_by_head, named_entities
from quarry.core.evidence.conflict import conflict, conflicts, same_value
from quarry.core.evidence.graph import PassageFacts, doc_key
from quarry.core.evidence.rules import ResolutionState, start_of
from quarry.core.evidence.subjects import DEFAULT_THRESHOLDS
from quarry.core.evidence.titles import names_title
from quarry.core.records import DEFAULT_AUTHORITY, Envelope
from quarry.core.text.tokenizer import tokenize

__all__ = ["FORMAL_RANK", "decide_conflicts", "partial_overrides", "withdrawn_rules"]

# The rank from which a document sets rules or records changes (pricing, runbooks, records of
# changes, contracts, policies in the default table); help pages, pages, tickets and comments
# rank below it.
FORMAL_RANK = DEFAULT_AUTHORITY["pricing"]


def _title_names(title: str, entities: frozenset[str]) -> frozenset[str]:
    """The entities a title names as names: capitalised where it writes them ("Farrow Lane:
    local site rules"), not a topic in its lower-case words ("Reception runbook - opening
    hours, lost property and member requests"); a title capitalising every word says nothing
    either way, so each entity it names counts."""
    named = named_entities(title, entities)
    words = re.findall(r"[A-Za-z][\w']*", title)
    if all(w[0].isupper() for w in words if len(w) > 3):
        return named
    capitalised = {t for w in words if w[0].isupper() for t in tokenize(w)[:1]}
    return frozenset(e for e in named if capitalised & set(tokenize(e.replace("-", " "))))


def _specific(a: Envelope, b: Envelope, asked: frozenset[str] | None = None) -> bool:
    """``a`` is scoped to fewer entities than ``b`` (general = no entities, or more), or
    ``a`` is scoped to an entity the question names that ``b`` is not, and not the reverse
    (the Birch Court page over the campus-wide handbook, for a question about Birch Court),
    or, both scoped to an entity asked about, ``a``'s title names it as a name and ``b``'s does not
    ("Farrow Lane: local site rules" over "Deliveries and site logistics": entity lists mix
    places with topics, a title says what the document is for; a topic in a title's lower-case
    words, "Reception runbook - opening hours, lost property", is no narrower scope)."""
    if a.entities and (not b.entities or set(a.entities) < set(b.entities)):
        return True
    if asked:
        ta, tb = named_entities(a.title, asked), named_entities(b.title, asked)
        if _title_names(a.title, ta - tb) & set(a.entities) & set(b.entities) and not tb - ta:
            return True
    if not asked or (b.entities and set(b.entities) < set(a.entities)):
        return False  # (a passage scoped to part of another's entities is the narrower one, whatever is asked)
    return bool((set(a.entities) & asked) - set(b.entities)) and not (set(b.entities) & asked) - set(a.entities)


# "EUR 10 instead of EUR 20", "15:00 rather than 16:00", "now 30 days, down from 45", "This
# supersedes the 3-day entitlement": the value after such words is the one the sentence replaces
_REPLACED = re.compile(r"\b(?:instead of|rather than|in place of|replacing|down from|up from|formerly|previously"
                       r"|replaces|supersedes|takes the place of)\b"
                       r"(?:\s+(?:the|a|an|its|our|standard|previous|old|usual|current))*\s+((?:[^.;]|(?<=\d)\.(?=\d)){1,40})",
                       re.I)  # (a decimal point is no sentence end: "in place of the GBP 4.50 set in ...")
# "The 60-minute fire watch no longer applies", "The 17:00 finish is replaced", "The handbook's
# EUR 150 figure is out of date", "The 3 kg margin stops on 2 March 2026": the value in the
# words before such a verb is the one retired
_RETIRED = re.compile(r"((?:[^.;:!?\n]|(?<=\d)[:.](?=\d)){1,60}?)\s+(?:no\s+longer\s+(?:applies|apply|binds|bind|stands|holds|counts)"
                      r"|(?:is|are|has\s+been|have\s+been)\s+(?:now\s+)?(?:replaced|withdrawn|scrapped|dropped|retired"
                      r"|rescinded|abolished|superseded|out\s+of\s+date)"
                      # "The 3 kg courtesy margin stops on 2 March 2026": ended on a date
                      r"|(?:stops|ends|lapses|ceases)\s+(?:on|from|after)\s+(?:\w+day,?\s+)?\d)\b", re.I)
_NUMBER = re.compile(r"\d+(?::\d\d)?(?:[.,]\d+)*")


def _numbers(text: str) -> set[str]:
    out = set()
    for n in _NUMBER.findall(text):
        n = n.replace(",", "")
        out.add(n if ":" in n else format(float(n), "g"))
    return out


def replaced_values(text: str) -> set[str]:
    """The numbers ``text`` names as the values it replaces or retires ("EUR 10 instead of
    EUR 20": 20; "the 60-minute fire watch no longer applies": 60)."""
    if not text:
        return set()
    return set().union(*(_numbers(m.group(1)[:20]) for m in _REPLACED.finditer(text)),
                       *(_numbers(m.group(1)) for m in _RETIRED.finditer(text)))


def _replaced_phrases(text: str) -> list[tuple[set[str], frozenset[str]]]:
    """(numbers, word stems) of each phrase ``text`` names as the one it replaces ("in place
    of the 20-minute count": {20}, {count})."""
    out = []
    for m in (*_REPLACED.finditer(text or ""), *_RETIRED.finditer(text or "")):
        phrase = m.group(1)[:40]
        out.append((_numbers(phrase), frozenset(t for t in tokenize(phrase) if not any(c.isdigit() for c in t))))
    return out


def _names_a_value(named: set[str], other: tuple) -> bool:
    return bool(named) and any(_numbers(s.value) & named for s in other)


def replaces(text: str, other: tuple) -> bool:
    """``text`` names a value of ``other``'s statements as the one it replaces ("the fee is
    EUR 10 instead of EUR 20"; "the 60-minute fire watch no longer applies"): written against
    that value, it overrides it."""
    return _names_a_value(replaced_values(text), other)


def _conflict_on(a: tuple, b: tuple, on: Callable[[object], bool] | None, similarity=None,
                 formal: bool = False) -> bool:
    """``a`` and ``b`` state different values for one subject; given ``on``, and when
    either passage states something the question asks about, one of the two conflicting
    statements must be such a statement (a paraphrased question that shares no word with
    either passage's statements keeps every conflict). Between two ``formal`` passages
    (both of :data:`FORMAL_RANK` or above) that each state something the question asks
    about, both conflicting statements must be such statements: the workshop rules' notice
    for a laser-cutter session and a later memo's dust extractor "booked a day ahead" do not
    dispute a question about the notice a session needs. A help page, a page, a ticket or a comment
    restates rules in its own words, so one side on the question is enough there."""
    if on is None or not any(on(s) for s in (*a, *b)):
        return conflict(a, b, similarity) is not None
    if formal and any(on(s) for s in a) and any(on(s) for s in b):
        return any(conflicts(sa, sb, similarity) for sa in a for sb in b if on(sa) and on(sb))
    return any(conflicts(sa, sb, similarity) for sa in a for sb in b if on(sa) or on(sb))


# Words of a title that name what kind of document it is, not its topic; and the document
# nouns after which a title's words name that document ("the payment terms policy").
_TITLE_KINDS = frozenset(tokenize("policy policies procedure procedures handbook guide memo standard standards rule "
                                  "rules terms conditions schedule and the of for our a an to on in with from"))
_DOC_NOUNS = frozenset(tokenize("policy procedure handbook guide memo standards rules schedule agreement page faq "
                                "wiki runbook notice"))


def _apart_policies(a: Envelope, b: Envelope, text_a: str, text_b: str) -> bool:
    """Two policies on different topics: both of policy authority, their titles share no
    topic word ("Attendance policy" and "Admissions policy"; "Check-in and check-out" and
    "Housekeeping standards"), and neither names the other (:func:`_names`). Policies of one
    organisation that state different values for what looks like one subject are, far more
    often than not, speaking of neighbouring subjects; the rule binds policies only, so two
    runbooks or help pages that disagree stay a dispute."""
    if a.authority != "policy" or b.authority != "policy":
        return False
    ta = frozenset(tokenize(a.title)) - _TITLE_KINDS
    tb = frozenset(tokenize(b.title)) - _TITLE_KINDS
    return bool(ta) and bool(tb) and not ta & tb and not _names(text_b, a, ta) and not _names(text_a, b, tb)


# a document's title quoted in a sentence: "the Lessons and instructors policy" capitalises a topic
_TITLE_TAIL = re.compile(r"(?:\s+[\w'-]+){0,4}?\s+(?:policy|policies|terms|handbook|procedure|standard|rules|guide"
                         r"|schedule|agreement|runbook|faq|wiki|charter|code)\b", re.IGNORECASE)


def _proper(entity: str, text: str) -> bool:
    """``text`` writes the entity as a name, capitalised inside a sentence ("to Holmfield",
    "at Stanwick Airport"), not as a topic word ("deposits", "opening hours"), nor as the first
    word of a document's title it quotes ("in the Lessons and instructors policy")."""
    first, *rest = entity.split("-")
    if not first:
        return False
    tail = "".join(rf"[\s-]+{re.escape(w)}" for w in rest)
    return any(not _TITLE_TAIL.match(text, m.end()) for m in re.finditer(
        rf"(?<=[a-z,] ){re.escape(first[0].upper())}(?i:{re.escape(first[1:])}{tail})\b", text))


def _places(env: Envelope, text: str) -> frozenset[str]:
    """The entities a document is about by name: its title names them and it writes them as names."""
    return frozenset(e for e in named_entities(env.title, env.entities) if _proper(e, f"{env.title}\n{text}"))


def _apart_places(a: Envelope, b: Envelope, text_a: str, text_b: str) -> bool:
    """Each passage is about a place (a branch, a site) the other neither lists nor names: the
    Stanwick Airport key-drop trial and the Corbridge merger page state their own sites' rules,
    whatever topics ("returns", "opening hours") both list."""
    own_a = _places(a, text_a) - set(b.entities) - named_entities(text_b, a.entities)
    own_b = _places(b, text_b) - set(a.entities) - named_entities(text_a, b.entities)
    return bool(own_a) and bool(own_b)


def _by_place(st: ResolutionState, win: str, lose: str, asked: frozenset[str] | None,
              is_name: Callable[[str], bool]) -> bool:
    """Scope may make ``win`` beat ``lose`` of a higher authority only through a place: an
    entity that sets ``win``'s scope apart (one ``lose`` does not list, or one the question
    names) written somewhere as a name (``is_name``: "at Elm Court", "does Harbourside"), or
    while ``win`` lasts only a while (a condition, an end date). Entity lists mix places with
    topics: a standing help page or runbook tagged with the topic asked about ("hygienist",
    "deposits") is no local rule, and authority decides."""
    ew, el = st.by_id[win].envelope, st.by_id[lose].envelope
    if st.rank[win] >= st.rank[lose] or not _standing(ew):
        return True
    apart = (set(ew.entities) - set(el.entities)) | (set(ew.entities) & (asked or frozenset()))
    return any(is_name(e) for e in sorted(apart))


def _interim(env: Envelope) -> bool:
    """A ticket or comment in force until an event: a condition other than "until further
    notice". (Pages and help pages carry conditions read from a sentence about one item,
    "a declaration lasts until the donor cancels it": only a ticket's is its own stopgap.)"""
    return env.authority in ("ticket", "comment") and bool(env.condition) and not env.condition.strip().lower(
    ).startswith(_OPEN_ENDED)


def _standing(env: Envelope) -> bool:
    """A standing rule: no condition, no end date, not the record of an event."""
    return not (env.condition or env.effective_to or env.events)


def _names(text: str, env: Envelope, topic: frozenset[str]) -> bool:
    """``text`` names the document of ``env``: by its id, or by two topic words its title has
    side by side and a document noun after them ("as the *payment terms policy* says", of
    "Payment terms for clients"; "four school days" does not name "The school day, ...")."""
    if env.doc_id in text:
        return True
    title = tokenize(env.title)
    pairs = {(x, y) for x, y in zip(title, title[1:]) if x in topic}
    words = tokenize(text)
    return any((x, y) in pairs and z in _DOC_NOUNS for x, y, z in zip(words, words[1:], words[2:]))


def _bounded(e: Envelope) -> bool:
    """A passage in force only for a while: a stopping condition, or an end date."""
    return e.condition is not None or e.effective_to is not None


def _local_rule(a: Envelope, b: Envelope, rank_a: int, rank_b: int) -> bool:
    """One of two scoped passages of one authority is the other's local rule: scoped to at
    most half of the other's entities (the Torbury station times within the check-in
    policy of every station). A page of another authority listing some of the policy's
    entities, or a memo naming one party more than the policy, is no local rule."""
    if not a.entities or not b.entities or rank_a != rank_b:
        return False
    ea, eb = set(a.entities), set(b.entities)
    return (ea < eb and 2 * len(ea) <= len(eb)) or (eb < ea and 2 * len(eb) <= len(ea))


def _lists_most_topics(a: Envelope, b: Envelope, rank_a: int, rank_b: int, asked: frozenset[str] | None) -> bool:
    """Scope would make the lower authority of ``a`` and ``b`` (of one authority, the one it
    makes win) win, yet it is tagged with more than half of the other's entities, every one
    of them the other's, and it is not bounded (no condition, no end date): a help page
    tagged "corran, subcontractors, insurance, rams, payment" beside the standard tagged the
    same and "supervision" is no local rule, so authority decides (at one authority, the
    conflict stays unresolved unless another rule decides it). Entity lists mix places with
    topics; a winter page for three of the company's four stations, in force until 31 March,
    stays the stations' exception."""
    if rank_a == rank_b:  # of one authority: the one scope would make win
        low, high = (a, b) if _specific(a, b, asked) else (b, a)
    else:
        low, high = (a, b) if rank_a < rank_b else (b, a)
    if not low.entities or low.condition or low.effective_to or not _specific(low, high, asked):
        return False
    mine, theirs = set(low.entities), set(high.entities)
    return mine < theirs and 2 * len(mine) > len(theirs)


def _later_effective(a, b) -> bool:
    """Whether envelope ``a`` states an effective date later than ``b``'s (both stated)."""
    return a.effective_from is not None and b.effective_from is not None and a.effective_from > b.effective_from


def _overriding(st: ResolutionState, win: str, lose: str, replaced: bool) -> str | None:
    """The override detail when the winner names the loser's value as the one it replaces
    (whatever made it win: authority, scope or the naming itself), else None."""
    if not replaced:
        return None
    return (f"override: {doc_key(st.by_id[win].envelope)} names the value of {doc_key(st.by_id[lose].envelope)} "
            f"as the one it replaces")


def decide_conflicts(st: ResolutionState, facts: Mapping[str, PassageFacts], asked: frozenset[str] | None = None,
                     on: Callable[[object], bool] | None = None,
                     similarity: Callable[[str, str], float] | None = None,
                     other_parts: frozenset[str] = frozenset(), question: str | None = None,
                     ) -> tuple[list[tuple[str, ...]], list[tuple[str, str]]]:
    """Decide conflicts among survivors; returns the undecided groups and every
    conflicting pair (decided or not).

    Each conflicting pair gives an *attack*: an instruction-shaped passage loses to any
    passage it conflicts with; otherwise scope or authority make the winner attack the
    loser; at equal authority, naming the other's value as the one replaced, being in
    force until a stated date (over a standing rule) or taking effect later decides, and
    else they attack each other; across authorities, a ticket's stopgap in force until an
    event beats a standing rule for a question naming its entity (:func:`_interim`). Two
    passages each about a place the other neither lists nor names do not conflict
    (:func:`_apart_places`), and an exception for one part does not speak to a question
    naming another (``other_parts``: Pier B's page, asked about Pier A). The decision is the grounded
    labelling of that graph (Dung 1995): a passage is in when all its attackers are out,
    out when an attacker is in; what remains (mutual attacks, cycles) is unresolved. So a
    passage beaten only by a passage that is itself beaten stands, and the result does not
    depend on the order pairs are visited. ``asked`` are the entities the question names
    (None: no question): an entity-specific passage beats a general one only for a
    question about its entity. ``on`` tells a statement that speaks to the question (None:
    every statement does): a conflict between two passages on a subject the question does
    not ask about (their fees, when it asks about a turnaround time, and one of them states
    the turnaround time) decides nothing here; between two formal passages (:data:`FORMAL_RANK`)
    each stating something the question asks about, both statements must (:func:`_conflict_on`). ``similarity`` compares two statements'
    masked clauses (their stored vectors, :func:`.vectors.clause_similarity`; None: the
    lexical rule alone). ``question`` is the question's text: a lower authority wins by
    scope only through an entity written as a name there or in a passage (:func:`_by_place`),
    and of the entities asked about only those written as names (places, not topics) make a
    passage narrower than another (:func:`_specific`), unless one of the two lasts only a
    while (a condition or an end date: a recall page is about the topics it is tagged with).
    """
    alive = sorted(pid for pid in st.by_id if pid not in st.rejected)
    stated = {pid: facts[pid].statements for pid in alive}
    attacks: dict[str, dict[str, str]] = {pid: {} for pid in alive}  # loser -> {winner: detail}
    named: dict[str, set[str]] = {}  # each passage's replaced values, read once for this decision

    def over(w: str, l: str) -> bool:  # ``w`` names a value of ``l`` as the one it replaces
        if w not in named:
            named[w] = replaced_values(st.by_id[w].text)
        return _names_a_value(named[w], stated[l])
    names: dict[str, bool] = {}

    texts = (question or "", *(f"{p.envelope.title}\n{p.text}" for p in st.by_id.values()))
    headed: list[frozenset[str]] = []  # places written by their name alone ("at Copperbeech"), read once

    def is_name(e: str) -> bool:  # written as a name in the question or in a passage of the decision
        if e not in names:
            if not headed:
                known = {x for p in st.by_id.values() for x in p.envelope.entities}
                headed.append(frozenset().union(*(named_by_head(t, known) for t in texts)))
            names[e] = e in headed[0] or any(_proper(e, t) for t in texts)
        return names[e]
    asked_places: list[frozenset[str] | None] = []

    def places() -> frozenset[str] | None:  # the entities asked about that are written as names
        # (a question naming "eye tests" and "Kestrel Arcade" asks about a place and a topic:
        # the eye tests policy, tagged with the topic, is no narrower than Kestrel Arcade's rules)
        if not asked_places:
            asked_places.append(None if asked is None else frozenset(e for e in asked if is_name(e)))
        return asked_places[0]

    def scoping(ea: Envelope, eb: Envelope) -> frozenset[str] | None:
        # a passage that lasts a while (a condition, an end date: the headset recall page) is
        # about the topics it is tagged with; between standing passages only places count
        return asked if _bounded(ea) or _bounded(eb) else places()
    pairs: list[tuple[str, str]] = []
    for i, a in enumerate(alive):
        for b in alive[i + 1:]:
            ea, eb = st.by_id[a].envelope, st.by_id[b].envelope
            if doc_key(ea) == doc_key(eb) or not stated[a] or not stated[b] \
                    or not _conflict_on(stated[a], stated[b], on, similarity,
                                        min(st.rank[a], st.rank[b]) >= FORMAL_RANK) \
                    or _apart_policies(ea, eb, st.by_id[a].text, st.by_id[b].text) \
                    or _apart_places(ea, eb, st.by_id[a].text, st.by_id[b].text):
                continue  # (the topic test reads titles and texts: only for pairs that do conflict)
            pairs.append((a, b))
            ia, ib = facts[a].instruction, facts[b].instruction
            if ia != ib:
                win, lose = (b, a) if ia else (a, b)
                attacks[lose][win] = f"untrusted instruction in {doc_key(st.by_id[lose].envelope)}"
            elif asked is not None and not asked and _local_rule(ea, eb, st.rank[a], st.rank[b]):
                continue  # a local rule of as high an authority does not speak to a question naming no entity
            elif (_specific(ea, eb, (sa := scoping(ea, eb))) or _specific(eb, ea, sa)) and not (
                    asked is not None and not asked and ea.entities and eb.entities) \
                    and not _lists_most_topics(ea, eb, st.rank[a], st.rank[b], sa) \
                    and _by_place(st, *((a, b) if _specific(ea, eb, sa) else (b, a)), asked, is_name):
                # (a question naming no entity, two scoped passages: a page listing every store
                # is no narrower than the policy naming the company; authority decides)
                win, lose = (a, b) if _specific(ea, eb, sa) else (b, a)
                ew = st.by_id[win].envelope
                if (asked is not None and not asked & set(ew.entities)) or other_parts & set(ew.entities):
                    continue  # the exception is another entity's (or another part's: Pier B's, asked about Pier A)
                attacks[lose][win] = _overriding(st, win, lose, over(win, lose)) or (
                    f"scope: {doc_key(ew)} is specific to {','.join(ew.entities)} and in force at {st.day.isoformat()}")
            elif st.rank[a] == st.rank[b] and over(a, b) != over(b, a):
                win, lose = (a, b) if over(a, b) else (b, a)
                if asked is not None and (own := _places(st.by_id[win].envelope, st.by_id[win].text)) \
                        and not own & asked:
                    continue  # a place's own rules replace the general value there only: asked about it
                attacks[lose][win] = _overriding(st, win, lose, True)
            elif st.rank[a] == st.rank[b] and bool(ea.effective_to) != bool(eb.effective_to):
                # at equal authority, both in force: a rule in force until a stated date (an offer,
                # a season's arrangement) stands in for the standing rule while it lasts
                win, lose = (a, b) if ea.effective_to else (b, a)
                ew = st.by_id[win].envelope
                attacks[lose][win] = (f"temporary: {doc_key(ew)} is in force until {ew.effective_to.isoformat()}, "
                                      f"in place of the standing rule")
            elif st.rank[a] == st.rank[b] and _later_effective(ea, eb) != _later_effective(eb, ea):
                # at equal authority, both in force: the one that took effect later is the rule now
                win, lose = (a, b) if _later_effective(ea, eb) else (b, a)
                ew, el = st.by_id[win].envelope, st.by_id[lose].envelope
                if asked is not None and (own := _places(ew, st.by_id[win].text) - _places(el, st.by_id[lose].text)) \
                        and not own & asked:
                    continue  # a place's own later rules (its title names it) are not the rule elsewhere
                attacks[lose][win] = (f"recency: {doc_key(ew)} in force from {ew.effective_from.isoformat()} after "
                                      f"{doc_key(el)} from {el.effective_from.isoformat()}")
            elif st.rank[a] == st.rank[b]:
                attacks[a][b] = attacks[b][a] = "equal authority"
            elif _interim(ea) != _interim(eb) and _standing(eb if _interim(ea) else ea) and (
                    asked is None or asked & set((ea if _interim(ea) else eb).entities)):
                # a staff ticket's stopgap in force until an event ("until Tillingham has been moved
                # across to Kindred, totals are ...") stands in for the standing rule while its
                # condition lasts, for a question about its entity (never an instruction: above)
                win, lose = (a, b) if _interim(ea) else (b, a)
                ew = st.by_id[win].envelope
                attacks[lose][win] = f"interim: {doc_key(ew)} applies until its condition ends, in place of the standing rule"
            else:
                win, lose = (a, b) if st.rank[a] > st.rank[b] else (b, a)
                ew, el = st.by_id[win].envelope, st.by_id[lose].envelope
                attacks[lose][win] = _overriding(st, win, lose, over(win, lose)) or (
                    f"authority: {ew.authority} ({st.rank[win]}) over {el.authority} ({st.rank[lose]})")
    label: dict[str, str] = {}
    changed = True
    while changed:
        changed = False
        for pid in alive:
            if pid in label:
                continue
            if any(label.get(w) == "in" for w in attacks[pid]):
                label[pid], changed = "out", True
            elif all(label.get(w) == "out" for w in attacks[pid]):
                label[pid], changed = "in", True
    for pid in alive:
        if label.get(pid) == "out":
            winners = [w for w in attacks[pid] if label.get(w) == "in"]
            # the record names the winner that speaks to the question (the policy asked
            # about, not a neighbouring one the loser also contradicts), then the highest
            win = min(winners, key=lambda w: (on is not None and not any(on(s) for s in stated[w]), -st.rank[w], w))
            # a winner naming the loser's value as the one it replaces supersedes that rule
            # ("This supersedes the 3-day entitlement in the staff leave policy")
            replaced = attacks[pid][win].startswith("override:")
            if replaced and st.rank[win] > st.rank[pid]:
                # of a higher authority, it supersedes a document it names; another stating the
                # value it replaces (the runbook repeating the policy's 20 minutes) is outranked
                el = st.by_id[pid].envelope
                topic = frozenset(tokenize(el.title)) - _TITLE_KINDS
                replaced = bool(topic) and _names(st.by_id[win].text, el, topic)
            st.reject(pid, "superseded_by" if replaced else "subordinate_to", win, attacks[pid][win],
                      f"{'supersedes' if replaced else 'outranks'} {pid}")
    undecided = [(a, b) for a in alive for b in attacks[a] if a not in label and b not in label]
    return _components(undecided), pairs


def _components(pairs: list[tuple[str, str]]) -> list[tuple[str, ...]]:
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent.setdefault(x, x) != x:
            x = parent[x]
        return x

    for a, b in pairs:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    groups: dict[str, list[str]] = {}
    for x in parent:
        groups.setdefault(find(x), []).append(x)
    return sorted(tuple(sorted(g)) for g in groups.values())


def partial_overrides(st: ResolutionState, facts: Mapping[str, PassageFacts], on: Callable[[object], bool],
                      nearness: Callable[[object], int], similarity: Callable[[str, str], float] | None = None) -> None:
    """A passage naming another document (its id, or its title's words and a document noun:
    "section 5 of the staffing ratios, sleep and supervision policy") and a value of it as the
    one it replaces ("This is in place of the 20-minute count"), and stating a value of that
    unit of its own in a sentence like the replaced one, supersedes the passage of that
    document stating it, when the question asks about that value: ``on`` tells a statement
    on the question, ``nearness`` how near (the replaced statement must be nearer the
    question than every other statement of its passage: asked about the outing ratio in the
    same section, the passage stands). Never from a lower authority, never an instruction."""
    alive = sorted(pid for pid in st.by_id if pid not in st.rejected)
    for w in alive:
        if facts[w].instruction or not (phrases := _replaced_phrases(st.by_id[w].text)):
            continue
        ew = st.by_id[w].envelope
        units = {s.unit for s in facts[w].statements}
        for lose in alive:
            el = st.by_id[lose].envelope
            if lose in st.rejected or doc_key(el) == doc_key(ew) or st.rank[lose] > st.rank[w]:
                continue
            asked = [s for s in facts[lose].statements if on(s)]
            # the statement stating the replaced value, in a word of the phrase naming it
            hit = [s for s in asked if s.unit in units and any(
                _numbers(s.value) & nums and words & frozenset(tokenize(" ".join((*s.words, *s.subject, *s.context))))
                for nums, words in phrases)]
            if not hit or max(map(nearness, hit)) <= max((nearness(s) for s in asked if s not in hit), default=-1):
                continue
            topic = frozenset(tokenize(el.title)) - _TITLE_KINDS
            if any(not same_value(s, x) and similarity is not None and x.clause and s.clause
                   and similarity(x.clause, s.clause) >= DEFAULT_THRESHOLDS.similarity
                   for s in hit for x in facts[w].statements if x.unit == s.unit) \
                    and topic and _names(st.by_id[w].text, el, topic):
                st.reject(lose, "superseded_by", w, f"override: {doc_key(ew)} names the value of {doc_key(el)} "
                          f"as the one it replaces", f"supersedes {doc_key(el)} in part")


# "section 3 of the class booking policy": the section a memo names in the document it changes
_SECTION = re.compile(r"\bsection\s+(\d+)\b", re.I)
_NUMBERED = re.compile(r"^\s*(?:section\s+)?(\d+)\b", re.I)
_QUOTED = re.compile(r"[\"“'‘]([^\"”'’\n]{6,120})[\"”'’]")
MIN_RULE_WORDS = 2  # words a withdrawn rule's sentence must share with the sentence stating it
# a memo's sentence saying what of the document stands ("Nothing else in the policy changes",
# "The rest of section 5 stands", "adults still show proof", "is unchanged", "stay as they are")
_STANDS = re.compile(r"\b(?:nothing\s+else|the\s+rest\s+of|all\s+the\s+other|everything\s+else|still|unchanged"
                     r"|stands?|stay(?:s)?\s+(?:exactly\s+)?as|remains?)\b", re.I)


def _names_doc(text: str, env: Envelope) -> bool:
    """``text`` names the document of ``env``: by its title in quotes, or by at least two of
    its title's topic words right before a document noun ("the fees and billing policy", of
    "Fee estimates, time recording and billing")."""
    topic = frozenset(tokenize(env.title)) - _TITLE_KINDS
    if not topic:
        return False
    if env.doc_id in text or any(names_title(q, env.title) for q in _QUOTED.findall(text)):
        return True
    words = tokenize(text)
    for i, z in enumerate(words):
        if z in _DOC_NOUNS:
            n = 0
            while i - n - 1 >= 0 and words[i - n - 1] in topic:
                n += 1
            if n >= 2:
                return True
    return False


def withdrawn_rules(st: ResolutionState, facts: Mapping[str, PassageFacts], query: str,
                    sentences: Callable[[str], Sequence[str]], asked: frozenset[str] = frozenset()) -> set[str]:
    """A memo withdrawing one rule of a document it names ("The rule in section 3 of the
    'Site access and gate code policy' that lets a customer bring one person with them
    without registering that person is withdrawn with effect from 16 February 2026"; "the
    three-strikes booking ban in section 3 of the class booking policy is rescinded")
    supersedes the passage of that document stating the rule, where the question asks about
    that rule. The passage stating it is the one whose sentence shares most words with the
    withdrawing sentence (at least ``MIN_RULE_WORDS``; in the section the memo names, where
    the headings are numbered); the question asks about the rule when that sentence shares
    some of its words and as many as every other sentence of the passage, and it or the
    withdrawing sentence shares more than every sentence in which the memo says what stands
    ("Nothing else in the policy changes: adults still show proof of address"; "The
    refuelling service charge in that section is unchanged"). No
    value needs to change hands: a rule withdrawn is not a value replaced
    (:func:`partial_overrides`). Never from a lower authority, an instruction, or a record
    older than the rule, nor from a place's own rules ("Sedgewick Water: local rules") for a
    question not naming the place. Returns the memos that withdrew a rule asked about: they answer."""
    q = frozenset(tokenize(query))
    out: set[str] = set()
    alive = sorted(pid for pid in st.by_id if pid not in st.rejected)
    stems: dict[str, list[frozenset[str]]] = {}  # each passage's sentences, tokenized once per call
    for w in alive:
        pw = st.by_id[w]
        if facts[w].instruction or (start_of(pw.envelope) or st.day) > st.day:
            continue  # (a memo not yet started withdraws nothing as of the day)
        said = sentences(pw.text)
        retiring = [x for x in said if _RETIRED.search(x) or _REPLACED.search(x)]
        if not retiring or ((own := _places(pw.envelope, pw.text)) and not own & asked):
            continue  # (a place's own rules replace the general rule there only: asked about it)
        kept = max((len(frozenset(tokenize(x)) & q) for x in said if _STANDS.search(x)), default=0)
        named = [pid for pid in alive if pid not in st.rejected and st.by_id[pid].envelope.doc_id != pw.envelope.doc_id
                 and st.rank[pid] <= st.rank[w]
                 and (start_of(st.by_id[pid].envelope) or dt.date.min) <= (start_of(pw.envelope) or dt.date.max)]
        names: dict[tuple[str, str], bool] = {}  # (doc id, title) -> whether the memo names it
        for x in retiring:
            sec = _SECTION.search(x)
            said_words = frozenset(tokenize(x))
            # the passage stating the withdrawn rule, of each document the memo names
            best: dict[str, tuple[tuple, str, list]] = {}
            for lose in named:
                pl = st.by_id[lose]
                which = (pl.envelope.doc_id, pl.envelope.title)
                if which not in names:
                    names[which] = _names_doc(pw.text, pl.envelope)
                if not names[which]:
                    continue
                heading = _NUMBERED.match(pl.heading_path[-1]) if pl.heading_path else None
                rule = said_words - frozenset(tokenize(pl.envelope.title)) - _TITLE_KINDS
                mine = _sentence_stems(lose, st, stems, sentences)
                if not mine:
                    continue
                i = _nearest(mine, rule)
                key = (bool(sec and heading and sec.group(1) == heading.group(1)), len(mine[i] & rule))
                if sec and heading and not key[0] or key[1] < MIN_RULE_WORDS:
                    continue  # another section of the document, or too few words of the rule
                doc = pl.envelope.doc_id
                if doc not in best or (key, lose) > (best[doc][0], best[doc][1]):
                    best[doc] = (key, lose, [mine[i], *mine[:i], *mine[i + 1:]])
            said_x = len(said_words & q)  # the question in the memo's words for the rule
            for doc, (_, lose, mine) in sorted(best.items()):
                near = len(mine[0] & q)
                if near and max(near, said_x) > kept and all(len(m & q) <= near for m in mine[1:]):
                    el = st.by_id[lose].envelope
                    st.reject(lose, "superseded_by", w, f"override: {doc_key(pw.envelope)} withdraws or replaces a "
                              f"rule of {doc_key(el)}", f"supersedes {doc_key(el)} in part")
                    out.add(w)
                    _echoes_withdrawn(st, facts, w, mine[0], rule, q, stems, sentences)
    return out


def _sentence_stems(pid: str, st: ResolutionState, stems: dict[str, list[frozenset[str]]],
                    sentences: Callable[[str], Sequence[str]]) -> list[frozenset[str]]:
    """A passage's sentences as stem sets, tokenized once per call of :func:`withdrawn_rules`."""
    if pid not in stems:
        stems[pid] = [frozenset(tokenize(y)) for y in sentences(st.by_id[pid].text)]
    return stems[pid]


def _nearest(mine: list[frozenset[str]], rule: frozenset[str]) -> int:
    """The sentence sharing most words with ``rule`` (the first of equals)."""
    return max(range(len(mine)), key=lambda j: (len(mine[j] & rule), -j))


def _worded(stems: frozenset[str]) -> frozenset[str]:
    """Stems that say what a rule is about: no number, no period ("48 hours" ahead of a visit
    and 48 hours without a fever are no one rule)."""
    from quarry.core.evidence.quantities import names_duration  # pint loads on first use, not at import

    return frozenset(t for t in stems if not any(c.isdigit() for c in t) and not names_duration(t))


def _echoes_withdrawn(st: ResolutionState, facts: Mapping[str, PassageFacts], w: str, stated: frozenset[str],
                      rule: frozenset[str], q: frozenset[str], stems: dict[str, list[frozenset[str]]],
                      sentences: Callable[[str], Sequence[str]]) -> None:
    """Lower-authority passages that still say the rule ``w`` withdrew ("Yes, a parent or friend
    can sit in the back if your instructor agrees", beside the memo withdrawing the allowance
    "that lets a parent, carer or friend sit in the back"): the sentence of theirs the question
    is about shares ``MIN_RULE_WORDS`` or more words (not numbers or periods) with both the
    withdrawing sentence (``rule``) and the withdrawn rule's own (``stated``). Each is ``subordinate_to`` the memo.
    Never an exception (a condition, an end date, events) or an instruction."""
    for a in sorted(pid for pid in st.by_id if pid not in st.rejected):
        ea = st.by_id[a].envelope
        if st.rank[a] >= st.rank[w] or facts[a].instruction or ea.condition or ea.effective_to or ea.events \
                or ea.doc_id == st.by_id[w].envelope.doc_id:
            continue
        mine = _sentence_stems(a, st, stems, sentences)
        if not mine:
            continue
        i = _nearest(mine, rule)
        near = len(mine[i] & q)
        if len(_worded(mine[i] & rule)) >= MIN_RULE_WORDS and len(_worded(mine[i] & stated)) >= MIN_RULE_WORDS and near \
                and all(len(m & q) <= near for j, m in enumerate(mine) if j != i):
            st.reject(a, "subordinate_to", w, f"withdrawn: {doc_key(st.by_id[w].envelope)} withdrew the rule "
                      f"{doc_key(ea)} repeats", f"outranks {a}")
