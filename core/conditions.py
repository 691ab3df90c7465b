"""Matching a stopping condition ("until cutover") to a recorded event ("acme cutover
completed", 2026-01-15), deterministically.

A condition is met by an event when

- every identifier of the condition (``payout_batch_v2``, ``INC-2291``) is an identifier
  of the event, compared whole: ``payout_batch_v3`` never ends ``payout_batch_v2``;
- every other word of the condition is a word of the event after the project's stemming
  (``core.tokenizer``), so "completes" matches "completed"; completion verbs ("until the
  migration completes") are dropped because an event is by definition something that
  happened;
- the entities agree: the entities the condition names (else the conditioned passage's
  scope) meet the entities the event names (else its record's scope). Another entity's
  cutover does not end Acme's exception.

Dates and visibility (event on or before ``valid_at``, record in force, same principal)
are the resolver's part, not this module's.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from quarry.core.tokenizer import identifiers, tokenize

# Words that only say "it happened" or introduce the condition; stemmed like the text.
_FILLER = frozenset(tokenize(
    "until till unless complete completes completed completion finish finishes finished done end ends "
    "ended happen happens happened occur occurs occurred take takes took taken place has have been "
    "its it is are was were successfully fully"
))


@dataclass(frozen=True)
class Terms:
    """What a condition or an event is about: whole identifiers, stemmed words, entities."""

    identifiers: frozenset[str]
    words: frozenset[str]
    entities: frozenset[str]


def entity_stems(entities: Iterable[str]) -> dict[str, str]:
    """Stemmed token -> entity name, for recognising entity names in text ("Acme's" -> acme)."""
    out: dict[str, str] = {}
    for e in sorted(set(entities)):
        toks = tokenize(e)
        if len(toks) == 1:  # multi-word entity names are not recognised in prose
            out[toks[0]] = e
    return out


def terms(text: str, known_entities: dict[str, str]) -> Terms:
    toks = tokenize(text)
    idents = frozenset(identifiers(toks))
    ents = frozenset(known_entities[t] for t in toks if t in known_entities)
    words = frozenset(t for t in toks if t not in idents and t not in known_entities and t not in _FILLER)
    return Terms(idents, words, ents)


def condition_met(cond: Terms, cond_scope: Iterable[str], event: Terms, event_scope: Iterable[str]) -> bool:
    """Whether ``event`` is the stopping event ``cond`` waits for. ``*_scope`` are the
    envelope entities of the two records, used where the text names no entity."""
    if not cond.identifiers and not cond.words:
        return False  # "until further notice" names nothing a record could prove
    if not cond.identifiers <= event.identifiers:
        return False
    # Parts of the event's identifiers count as its words ("payout" in payout_batch_v2).
    event_words = event.words | {p for i in event.identifiers for p in tokenize(i.replace("-", " ").replace("_", " "))}
    if not cond.words <= event_words:
        return False
    c_ents = cond.entities or frozenset(cond_scope)
    e_ents = event.entities or frozenset(event_scope)
    if not c_ents and not e_ents:
        return True
    return bool(c_ents & e_ents)
