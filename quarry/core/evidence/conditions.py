"""Matching a stopping condition ("until cutover") to a recorded event ("acme cutover
completed", 2026-01-15), deterministically.

A condition is met by an event when

- every identifier of the condition (``payout_batch_v2``, ``INC-2291``) is an identifier
  of the event, compared whole: ``payout_batch_v3`` never ends ``payout_batch_v2``;
- every other word of the condition is a word of the event after the project's stemming
  (``core.tokenizer``), so "completes" matches "completed"; completion verbs ("until the
  migration completes") are dropped because an event is by definition something that
  happened;
- a near miss never ends a condition: an event qualified by another environment
  ("staging migration completed") never ends a condition that names none or another
  ("until the production migration completes"), and an event whose site, clinic, branch,
  region, ... is named ("Northside clinic EHR migration completed") ends only a condition
  that names the same one, or whose record is scoped to it;
- the changeover nouns (switch, cutover, migration, move, transition, go-live) stand for
  one another when both sides name one and the condition names what changes over
  ("until the switch of building permits" is ended by "building permits cutover
  completed"; "until the ehr migration completes" is not by "billing cutover completed");
- nor does a part or preparation of it ("erp migration planning completed", "phase 1 of
  the rollout completed" against "until the erp migration / the rollout completes");
- "until further notice" (``Terms.open_ended``) names nothing a record could prove: it
  never ends;
- one of several sites is a part: an event naming some of the conditioned record's sites
  that the condition does not name (Brackley, of Brackley, Elston and Wyle) does not end it;
- the entities agree: the entities the condition names (else the conditioned passage's
  scope) meet the entities the event names (else its record's scope). Another entity's
  cutover does not end Acme's exception.

Words are compared after the project's Snowball stemming, not spaCy lemmas: the resolver
calls :func:`terms` at query time, where loading a parser per replica would cost seconds
and memory for what a stemmer does in microseconds, and the lexical leg stems the same
way. The irregular forms a stemmer misses ("went live", "is done", "has gone live") are
written "completes"/"completed" by the build's enricher (``core.enrich``) before they get
here, and are completion filler besides.

Dates and visibility (event on or before ``valid_at``, record in force, same principal)
are the resolver's part, not this module's.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from quarry.core.text.morphology import agent_base
from quarry.core.text.tokenizer import identifiers, tokenize

# Words that only say "it happened" or introduce the condition; stemmed like the text.
_FILLER = frozenset(tokenize(
    "until till unless complete completes completed completion finish finishes finished done end ends "
    "ended happen happens happened occur occurs occurred take takes took taken place has have been be being "
    "its it is are was were successfully fully concluded concludes conclude finalised finalized over live went "
    "gone goes go signed sign signs off closed close closes closure "
    # the condition's own framing: what it waits for is the thing, not that it is under way
    "while whilst during pending under way underway progress ongoing duration course "
    "continue continues continuing lasts remains remain stays persists long"  # "while the refurbishment continues", "as long as"
    " across"  # the particle of "moved across to": "moved over", "switched over"
    # the state a closure or an outage is in: "while the van is off the road", "as long as the
    # lift is out of service", "while the pier is shut" wait for what is back in service
    " off out down shut offline unavailable"
    # the state a notice or a suspension is in while it waits: "while the boil water notice is in
    # force", "while glass collections are suspended" wait for it to be lifted or to resume
    " force effect suspended suspend paused halted"
))
# Environments: another environment's completion is a near miss, not the stopping event.
_ENVIRONMENTS = frozenset(tokenize("production prod staging stage dev development test testing qa uat sandbox "
                                   "preprod pre-production demo pilot canary"))
_PRODUCTION = frozenset(tokenize("production prod live"))
# Place nouns: the word before one names which site ("Northside clinic", "Leeds depot").
_PLACES = frozenset(tokenize("clinic clinics site sites branch branches office offices warehouse warehouses depot "
                             "depots store stores hospital hospitals region regions plant plants campus datacenter "
                             "data-center ward wards school schools factory factories hub hubs centre center location "
                             "locations facility facilities country market hotel hotels"))
# A part or a preparation of the thing is not the thing: "migration planning completed",
# "phase 1 of the rollout completed" do not end "until the migration/rollout completes".
_PARTIAL = frozenset(tokenize("planning plan phase step part pilot kickoff kick-off preparation prep design dry-run "
                              "rehearsal wave milestone trial first initial partial start started begun began "
                              "scoping kicked"))
_OPEN_ENDED = ("until further notice", "until otherwise", "indefinitely")
# Nouns of one kind of event, a system or a site changing over: "the switch of building
# permits", "the payroll cutover", "the move to the new ledger", "the migration". When the
# condition and the event both name one, which of them each says is not what tells the
# events apart (the thing that changes over is), so they match each other.
_CHANGEOVER = frozenset(tokenize("switch switchover changeover cutover cut-over migration migrate move transition "
                                 "go-live golive"))


@dataclass(frozen=True)
class Terms:
    """What a condition or an event is about: whole identifiers, stemmed words, entities."""

    identifiers: frozenset[str]
    words: frozenset[str]
    entities: frozenset[str]
    # Words that say which environment, which site or which part ("staging", "northside"
    # in "Northside clinic", "planning", "phase"): an event's qualifiers must all be named
    # by the condition (or, for a site, by the conditioned record's entity scope).
    qualifiers: frozenset[str] = frozenset()
    # "until further notice": nothing a record could prove ends it.
    open_ended: bool = False


def entity_stems(entities: Iterable[str]) -> dict[str, str]:
    """Stemmed token -> entity name, for recognising entity names in text ("Acme's" -> acme)."""
    out: dict[str, str] = {}
    for e in sorted(set(entities)):
        toks = tokenize(e)
        if len(toks) == 1:  # multi-word entity names are not recognised in prose
            out[toks[0]] = e
    return out


def named_entities(text: str, entities: Iterable[str]) -> frozenset[str]:
    """The entities ``text`` names: a one-word entity by its stem ("Acme's" -> acme), a
    compound one ("birch-court", "north-campus") written whole or by all of its words
    ("Birch Court")."""
    toks = set(tokenize(text))
    out = set()
    for e in set(entities):
        parts = tokenize(e)
        if m := _ONE_PART.fullmatch(e):
            # "pier-b", "line-4", "route-n9": the letter or number says which one ("Pier A" is
            # another); a code of letters and digits says it alone ("the N9")
            if re.search(rf"\b{re.escape(m[1])}[\s-]*{re.escape(m[2])}\b", text, re.IGNORECASE) or (
                    re.search(r"[a-z]", m[2]) and re.search(r"\d", m[2]) and m[2] in toks):
                out.add(e)
        elif parts and (parts[0] in toks if len(parts) == 1 else (parts[0] in toks or set(parts[1:]) <= toks)):
            out.add(e)
    return frozenset(out)


# what kind of place an entity's last word says it is: "copperbeech-course", "kilnworth-pool"
PLACE_NOUNS = frozenset("""course pool lane road street hall barn farm church chapel centre center library wharf quay
site branch store park house court yard works arcade square market surgery clinic campus school museum gallery station
depot marina pier dock terminal airport office studio theatre gym rink ground grounds estate workshop shop
hotel cafe ward""".split())


def named_by_head(text: str, entities: Iterable[str]) -> frozenset[str]:
    """Places ``text`` names by their name alone, without the kind of place: "at Copperbeech"
    for "copperbeech-course", "Kilnworth" for "kilnworth-pool". The name is written as one,
    capitalised inside a sentence and not as part of a longer name ("Hollins Green Community
    Centre"), and no other entity has it."""
    ents = set(entities)
    firsts = Counter(e.split("-")[0] for e in ents)
    heads: dict[str, list[str]] = {}
    for e in ents:
        parts = e.split("-")
        if len(parts) >= 2 and parts[-1] in PLACE_NOUNS and parts[0] not in PLACE_NOUNS:
            heads.setdefault(" ".join(parts[:-1]), []).append(e)
    # a head that is itself an entity, or another entity's first word, is not unique
    heads = {h: es for h, es in heads.items() if h.replace(" ", "-") not in ents and firsts[h.split()[0]] == 1}
    out = set()
    for h, (e, *more) in heads.items():
        name = r"[\s-]+".join(w[0].upper() + re.escape(w[1:]) for w in h.split())
        if not more and re.search(rf"(?<=[\w,] ){name}\b(?![\s-]+[A-Z])", text):  # ("Kestle Street" is another place)
            out.add(e)
    return frozenset(out)


# an entity naming one part of a kind by a letter or a number: "pier-b", "line-4", "route-n9"
_ONE_PART = re.compile(r"([a-z]+)-([a-z]?\d+[a-z]?|[a-z])")


def other_parts(text: str, entities: Iterable[str]) -> frozenset[str]:
    """Entities of one part (:data:`_ONE_PART`) whose kind ``text`` names with another letter
    or number ("Pier A" for "pier-b", "line 3" for "line-4"): the text is about another part."""
    out = set()
    for e in set(entities):
        if (m := _ONE_PART.fullmatch(e)) and not named_entities(text, [e]):
            # (a letter is a part's name only as a capital: "the pier a bit further" names none)
            said = re.findall(rf"\b(?i:{re.escape(m[1])}s?)[\s-]+([A-Z]|[A-Za-z]?\d+[A-Za-z]?)\b", text)
            if any(x.lower() != m[2] for x in said):
                out.add(e)
    return frozenset(out)


_NEW = frozenset(tokenize("new"))
_NUMBERED = re.compile(r"\b([A-Za-z][A-Za-z-]*)\s+\d+\b")
# words a number follows that name no part: a month ("March 2026") or a preposition ("on 9")
_NOT_A_PART = frozenset("january february march april may june july august september october november december jan "
                        "feb mar apr jun jul aug sep sept oct nov dec on by from since until after before in at of and "
                        "to".split())
_CUT_OVER = re.compile(r"\bcut[\s-]+over\b", re.IGNORECASE)
# a vehicle "off the road" is out of service, one "back on the road" back in it: the word both sides share
_OFF_THE_ROAD = re.compile(r"\b(?:off|back\s+on)\s+the\s+road\b", re.IGNORECASE)


# the state a recall, a case or an incident is in while it waits: "while the recall is open",
# "as long as the recall is outstanding" wait for it to close
_OPEN_STATE = re.compile(r"\b(?:(?:is|are|remains?|stays?)\s+(?:still\s+)?open|outstanding)\b", re.IGNORECASE)


# why a place is closed is not what reopens it: "while Coldbrook is closed for rebuilding" waits
# for Coldbrook to reopen, whatever the record says of the rebuild
_CLOSED_FOR = re.compile(r"\b(?:closed|shut)\s+(?:for|because\s+of|due\s+to)\s+(?:the\s+|its\s+|a\s+)?(?P<why>[\w-]+)",
                         re.IGNORECASE)


_AGENT_NOUN = re.compile(r"\b[A-Za-z]{3,}(?:er|or)\b")


def _verb_stems(text: str) -> dict[str, str]:
    """Stems of the nouns in ``text`` made of a verb ("merger", "operator") -> the verb's
    stem, so "until the branch is merged" and "the merger completed" name one thing."""
    out = {}
    for w in _AGENT_NOUN.findall(text):
        base = agent_base(w.lower())
        if base != w.lower() and (stem := tokenize(w)) and (verb := tokenize(base)):
            out[stem[0]] = verb[0]
    return out


def terms(text: str, known_entities: dict[str, str]) -> Terms:
    bases = _verb_stems(text)
    text = _OPEN_STATE.sub(" ", text)  # "while the recall is open": the state it is in, not what ends it
    # why a place is closed ("closed for rebuilding") is no word of what reopens it (an entity stays one)
    why = {t for m in _CLOSED_FOR.finditer(text) for t in tokenize(m.group("why"))}
    toks = [bases.get(t, t) for t in tokenize(_OFF_THE_ROAD.sub("service", _CUT_OVER.sub("cutover", text)))]
    # ("has cut over to X" is X's cutover; "the merger" is what "is merged" waits for)
    # a hyphenated word with no digit or underscore ("east-wing", "go-live") is a word, said by its parts
    idents = frozenset(i for i in identifiers(toks) if any(c.isdigit() or c == "_" for c in i))
    ents = frozenset(known_entities[t] for t in toks if t in known_entities)
    # a place noun after an entity's name is what the entity is ("the Harbourside hotel"), not a word of the event
    kind = {t for prev, t in zip(toks, toks[1:]) if t in _PLACES and prev in known_entities}
    words = frozenset(t for t in toks if t not in idents and t not in known_entities and t not in _FILLER
                      and t not in kind and t not in why)
    plain = [t for t in toks if t not in idents]
    quals = {t for t in plain if t in _ENVIRONMENTS or t in _PARTIAL}
    # (a word between an entity's name and a place noun is part of its name: "Marshgate Leisure Centre")
    quals |= {a for before, a, b in zip(["", *plain], plain, plain[1:]) if b in _PLACES and a not in _PLACES
              and a not in _FILLER and before not in known_entities}
    # a numbered part ("theatre 1", "floors 4 and 5", "line 3") says which part: the whole is another thing
    quals |= {t for w in _NUMBERED.findall(text) if w.lower() not in _NOT_A_PART
              for t in tokenize(w) if t not in _FILLER and t not in idents}
    quals -= set(known_entities)
    open_ended = text.strip().lower().startswith(_OPEN_ENDED)
    return Terms(idents, words, ents, frozenset(quals), open_ended)



def event_terms(what: str, record_title: str, single: bool, known_entities: dict[str, str]) -> Terms:
    """The terms of a recorded event: its own words, and, when the record states that one
    event, the record's title too ("Change PMS-047: Harbourside moved to Tessera" over
    "Marlow Harbourside went live on Tessera": the title says what moved). A record of
    several events keeps each to its own words (a title naming one would lend it to all). The
    title names no qualifier: "FlowStock WMS cutover, Northgate fulfilment centre" does not make
    the cutover another site's."""
    own = terms(what, known_entities)
    if not single or not record_title:
        return own
    title = terms(record_title, known_entities)  # its words and identifiers; which site or part stays the event's
    return Terms(own.identifiers | title.identifiers, own.words | title.words, own.entities | title.entities,
                 own.qualifiers, own.open_ended)


def condition_met(cond: Terms, cond_scope: Iterable[str], event: Terms, event_scope: Iterable[str],
                  linked: frozenset[str] = frozenset()) -> bool:
    """Whether ``event`` is the stopping event ``cond`` waits for. ``*_scope`` are the
    envelope entities of the two records, used where the text names no entity. ``linked``
    are the identifiers the conditioned record's text names ("recall R-26-0117"): an event
    naming one of them is about that thing, and the condition's other words need only meet
    the event's (or an entity both name)."""
    if cond.open_ended or (not cond.identifiers and not cond.words and not cond.entities):
        return False  # "until further notice" names nothing a record could prove
    if not cond.identifiers and not cond.words and not cond.entities <= (event.entities or frozenset(event_scope)):
        return False  # "until ClinixPro is live at Harwood" names only entities: the event must name them all
    if not cond.identifiers <= event.identifiers:
        return False
    # Parts of the event's identifiers count as its words ("payout" in payout_batch_v2).
    event_words = event.words | {p for i in event.identifiers for p in tokenize(i.replace("-", " ").replace("_", " "))}
    wanted = cond.words
    # what changes over is named by the condition's words, or by two or more entities (what
    # moves and where to) that the event names too: "until Elmfield has switched to ClinixPro" is
    # Elmfield's ClinixPro cutover, Harwood's is another; "until the Acme cutover" names one
    # entity, and any other Acme migration is not it
    named = bool(wanted - _CHANGEOVER) or len(cond.entities) >= 2 and cond.entities <= event.entities | set(event_scope)
    if wanted & _CHANGEOVER and event_words & _CHANGEOVER and named:
        # "the switch of X" is ended by "X cutover completed"; and what it changes over to is
        # new by definition ("the move to the new PMS" by "PMS-047: Harbourside moved to Tessera")
        wanted = wanted - _CHANGEOVER - _NEW
    # a compound is said by its parts ("the east-wing refurbishment": "east wing refurbishment")
    wanted = {w for w in wanted if not ("-" in w and set(tokenize(w.replace("-", " "))) <= event_words)}
    said = bool(linked & event.identifiers) and bool(wanted & event_words or cond.entities & event.entities)
    if not wanted <= event_words and not said:
        return False
    # Near misses: another environment's or another site's completion.
    scope_words = {t for e in cond_scope for t in tokenize(e)}
    # Production is the default environment: a condition naming none is ended by it.
    default_env = _PRODUCTION if not cond.qualifiers & _ENVIRONMENTS else set()
    other = event.qualifiers - cond.words - scope_words - default_env
    if other:
        return False
    # One of several sites is a part: a record scoped to sites its condition does not name
    # ("as long as the Vale exchanges are out of service", on Brackley, Elston and Wyle) is
    # not ended by an event naming some of them ("Brackley exchange service restored").
    # (it names at least one and leaves out at least two: a group's name may go unsaid)
    # (an event naming the two or more entities its condition names, what moves and where to,
    # is that move: another of the record's entities it mentions, a topic such as "bookings"
    # in "every Corbridge vehicle, key and booking transferred", makes it no part)
    rest = {e for e in cond_scope if e not in cond.entities and not any(c.isdigit() for c in e)}
    if event.entities & rest and len(rest - event.entities) >= 2 and not (
            len(cond.entities) >= 2 and cond.entities <= event.entities):
        return False
    c_ents = cond.entities or frozenset(cond_scope)
    e_ents = event.entities or frozenset(event_scope)
    if not c_ents and not e_ents:
        return True
    return bool(c_ents & e_ents)
