"""What a value is a value *of*, read from a dependency parse rather than from a word window.

For each value, the anchor is its predicate and the tokens of its subject:

- **predicate**: the governing verb ("passwords *expire* after 90 days"), or the
  relational noun the value belongs to ("the EUR *cutoff* is 16:00", "the price of the Pro
  plan is EUR 45", "a 1.5% *markup*"), keyed through :data:`.subjects.SYNONYMS`
  (:func:`predicate_key`);
- **subject**: the noun phrase the predicate is about (the verb's subject or object, the
  relational noun and its modifiers, the holder of "X uses the cutoff").

In a table row, the row's first cell and the column header say what a value is of
(:func:`table_anchor`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from quarry.core.evidence.quantities import Value
from quarry.core.evidence.subjects import CANON

__all__ = ["predicate_key", "table_anchor", "value_anchor"]

# Prepositions whose object says when, not what about.
_TEMPORAL_PREPS = frozenset({"until", "after", "before", "since", "during", "by", "within", "at", "in", "from",
                             "every", "per", "up", "than"})
# A value reached through one of these says how long / when: it belongs to the verb, not to a noun.
_DURATION_PREPS = frozenset({"within", "after", "before", "every", "for", "until", "by", "in", "over"})
# "Orders over EUR 50 ship free": a threshold on the noun; the clause states what happens.
_THRESHOLD_PREPS = frozenset({"over", "above", "below", "under"})
# Words after a value that qualify it, never what it is a value of: "30 kg gross", "35 kg each".
_QUALIFIERS = frozenset("gross net each apiece total combined overall inclusive exclusive max maximum min minimum "
                        "apart later earlier".split())
# Discourse adverbs that never state what a linking verb's value is: "the limit is actually 50 kg".
_DISCOURSE = frozenset("actually really currently now still then only also just even already usually normally "
                       "typically generally always".split())
# A clause these mark is a reference point: "48 hours before the vehicle arrives" is when to book.
_REFERENCE_MARKS = frozenset({"before", "after", "until", "since", "once", "when"})
_SPAN_NOUNS = frozenset({"duration", "course", "remainder", "rest", "length"})
_WHEN_WORDS = frozenset({"today", "now", "tomorrow", "tonight", "yesterday", "currently"})
# Verbs that only link a subject to its value: the subject noun is the predicate.
_LINKING = frozenset({"be", "remain", "stay", "become", "equal", "total", "last", "run", "take", "apply"})


def _root(doc, v: Value):
    toks = [doc[i] for i in sorted(v.tokens)]
    for t in toks:
        if t.head.i not in v.tokens or t.head.i == t.i:
            return t
    return toks[0]


def _phrase(tok, exclude: set[int]) -> list:
    """The content tokens of the noun phrase headed by ``tok``: its compounds, modifiers
    and "of"-objects (not determiners, numbers or the value)."""
    out = [tok]
    for c in tok.children:
        if c.i in exclude:
            continue
        if c.dep_ in ("compound", "amod", "nmod", "poss", "npadvmod") and c.pos_ in ("NOUN", "PROPN", "ADJ", "VERB"):
            out += _phrase(c, exclude)
        elif c.dep_ == "prep" and c.lower_ in ("of", "for", "on") and c.i > tok.i:
            for g in c.children:
                if g.dep_ == "pobj" and g.i not in exclude and g.pos_ in ("NOUN", "PROPN"):
                    out += _phrase(g, exclude)
    return out


def _args(verb, exclude: set[int], skip: Iterable = ()) -> list:
    """The noun-phrase arguments of ``verb`` (subject, object, prepositional objects that
    say what about), as tokens."""
    skip_ids = {t.i for t in skip}
    out = []
    for c in verb.children:
        if c.i in exclude or c.i in skip_ids:
            continue
        if c.dep_ in ("nsubj", "nsubjpass", "dobj", "attr", "dative") and _nounish(c):
            out += _phrase(c, exclude)
        elif c.dep_ in ("prep", "dative") and c.lower_ not in _TEMPORAL_PREPS:
            for g in c.children:
                if g.dep_ == "pobj" and g.lemma_.lower() in _SPAN_NOUNS:
                    continue  # "for the duration of the migration": when, not what about
                if g.dep_ == "pobj" and g.i not in exclude and g.pos_ in ("NOUN", "PROPN"):
                    out += _phrase(g, exclude)
    return out


def _nounish(tok) -> bool:
    """A noun, or a plural noun the small model tagged as a verb ("inspects returns within 7
    days": "returns" as the object of a verb)."""
    return tok.pos_ in ("NOUN", "PROPN") or (tok.pos_ == "VERB" and tok.tag_ == "VBZ"
                                              and tok.dep_ in ("dobj", "nsubj", "nsubjpass", "pobj"))


def _within(tok, ids: set[int]) -> bool:
    return any(t.i in ids for t in tok.subtree)


def value_anchor(doc, v: Value):
    """(predicate token, subject tokens) for a value, or None when it attaches to nothing."""
    r = _root(doc, v)
    exclude = set(v.tokens) | {t.i for i in v.tokens for t in doc[i].children if t.dep_ in ("det", "quantmod")}
    # "30 days of annual leave", "100 GB of storage": the measured noun (not in "within 45
    # days of receipt", where it is the point the span counts from, nor in "25% of the fee").
    counted_from = r.dep_ == "pobj" and r.head.lower_ in _DURATION_PREPS
    for c in r.children:
        if (c.dep_ == "prep" and c.lower_ == "of" and not counted_from and v.unit != "percent"
                and c.i not in v.tokens):
            obj = next((g for g in c.children if g.dep_ == "pobj" and g.pos_ == "NOUN"), None)
            if obj is not None:
                return obj, _phrase(obj, exclude | {obj.i}) + _holder(obj, exclude)
    child, t = r, r.head
    via_when = False
    for _ in range(6):
        if t.i == child.i:
            return None
        if t.lower_ in _QUALIFIERS and t.i > r.i and t.pos_ in ("ADJ", "ADV", "DET", "PRON"):
            child, t = t, t.head  # "30 kg gross per package": a qualifier of the value
            continue
        # (the small model sometimes reads the clause as a conjunct: "sends a reminder 14 days
        # before the booster falls due", "falls" as a conj of "sends")
        if (t.pos_ in ("VERB", "AUX") and t.dep_ in ("advcl", "conj") and t.head.pos_ in ("VERB", "AUX", "NOUN")
                and any(c.dep_ == "mark" and c.lower_ in _REFERENCE_MARKS and c.i > child.i for c in t.children)):
            via_when = True  # "48 hours before the vehicle arrives": the clause is the reference point
            child, t = t, t.head
            continue
        if t.pos_ == "ADP" or t.dep_ in ("prep", "agent", "quantmod") or t.lower_ in ("least", "most", "up"):
            via_when = via_when or t.lower_ in _DURATION_PREPS or t.lower_ in _THRESHOLD_PREPS
            child, t = t, t.head
            continue
        if (via_when and _nounish(t) and t.dep_ in ("dobj", "pobj", "nsubj", "nsubjpass")
                and t.head.pos_ in ("VERB", "ADP")):
            child, t = t, t.head  # "respond to tickets within 8 hours": the verb's, not the noun's
            continue
        if t.pos_ in ("NOUN", "PROPN") and (t.dep_ == "npadvmod" or t.lower_ in _WHEN_WORDS):
            child, t = t, t.head  # "17:00 today": when, not what
            continue
        if t.pos_ in ("NOUN", "PROPN") and t.i not in v.tokens:
            obj = _imperative_object(doc, t, exclude)
            if obj is not None:  # "Book the slot ... 24 hours before arrival": a verb the tagger read as a noun
                return t, _phrase(obj, exclude)
            return t, _phrase(t, exclude) + _holder(t, exclude)
        if t.pos_ in ("VERB", "AUX", "ADJ"):
            return _verb_anchor(doc, t, child, exclude)
        child, t = t, t.head
    return None


def _imperative_object(doc, tok, exclude: set[int]):
    """The object of a sentence-initial imperative the small model tags as a noun ("Book the
    slot", "Submit the form"): the root, a bare singular noun first in the sentence, followed
    by a determiner and a noun it heads."""
    first = next((t for t in doc if not t.is_punct), None)
    if first is None or tok.i != first.i or tok.dep_ != "ROOT" or tok.tag_ != "NN" or tok.i + 1 >= len(doc):
        return None
    if doc[tok.i + 1].pos_ not in ("DET", "PRON"):
        return None
    return next((c for c in tok.children if c.dep_ in ("appos", "dobj", "compound") and c.i > tok.i
                 and c.pos_ == "NOUN" and c.i not in exclude), None)


def _holder(noun, exclude: set[int]) -> list:
    """Who holds a relational noun: "migrated tenants" in "migrated tenants use the cutoff";
    of a noun the value counts ("3 days *of* leave"), who the verb gives the value to or
    whose it is: "volunteers receive 3 days of leave", "gives apprentices 10 days of leave"."""
    if noun.dep_ in ("nsubj", "nsubjpass", "dobj", "attr", "pobj"):
        verb, inner = (noun.head.head if noun.dep_ == "pobj" else noun.head), noun
        if noun.dep_ == "pobj" and verb.pos_ in ("NOUN", "NUM") and verb.dep_ in ("dobj", "attr", "nsubj", "nsubjpass"):
            verb, inner = verb.head, verb  # the value's phrase is the verb's argument
        if verb.pos_ in ("VERB", "AUX") and verb.lemma_ != "be":
            return _args(verb, exclude | {t.i for t in inner.subtree})
    return []


_PRONOUNS = frozenset("it they".split())


def _subjects(verb, exclude: set[int] = frozenset()) -> list:
    """The nominal subjects of ``verb``; for a pronoun subject, the nominal subject of the
    clause it depends on ("rooms ... are cleaned so that *they* are ready by 15:00",
    "passwords are stored and *they* expire after 90 days")."""
    subj = [c for c in verb.children if c.dep_ in ("nsubj", "nsubjpass") and c.pos_ in ("NOUN", "PROPN")
            and not _within(c, exclude)]
    if subj or not any(c.dep_ in ("nsubj", "nsubjpass") and c.lower_ in _PRONOUNS for c in verb.children):
        return subj
    tok = verb
    while tok.dep_ in ("advcl", "conj", "ccomp") and tok.head is not tok:
        tok = tok.head
        got = [c for c in tok.children if c.dep_ in ("nsubj", "nsubjpass")]
        if got:
            return [c for c in got if c.pos_ in ("NOUN", "PROPN") and not _within(c, exclude)][:1]
    return []


def _verb_anchor(doc, verb, child, exclude: set[int]):
    lemma = verb.lemma_.lower()
    if verb.pos_ == "ADJ":  # "valid for 24 hours", "payable within 30 days"
        base = verb.head if verb.dep_ in ("acomp", "amod", "advmod") else verb
        subj = _subjects(base)
        return (verb, _phrase(subj[0], exclude)) if subj else None
    xcomp = next((c for c in verb.subtree if c.dep_ in ("xcomp", "advcl", "acl", "relcl") and c.pos_ == "VERB"
                  and any(a.lower_ == "to" for a in c.children)), None)
    if lemma == "take" and xcomp is not None:  # "takes 3 days to settle"
        subj = [c for c in verb.children if c.dep_ in ("nsubj", "nsubjpass") and c.pos_ in ("NOUN", "PROPN")]
        return (xcomp, _phrase(subj[0], exclude)) if subj else None
    subj = _subjects(verb, exclude)
    if lemma in _LINKING:
        adj = next((c for c in verb.children if c.dep_ in ("acomp", "advmod") and c.pos_ in ("ADJ", "ADV")
                    and c.lower_ not in ("least", "most", "up") and c.lower_ not in _DISCOURSE
                    and not _within(c, exclude)), None)
        if adj is not None and subj:  # "must be at least 12 characters long"
            return adj, _phrase(subj[0], exclude)
        often = child.lower_ in ("every", "per") or any(c.lower_ == "every" for c in child.children)
        if subj and often and lemma != "be":
            return verb, _phrase(subj[0], exclude)  # "backups run every 6 hours": how often it runs
        if subj:  # "new hires are on probation for 3 months": what they are on is the subject too
            return subj[0], _phrase(subj[0], exclude) + _args(verb, exclude, skip=subj)
        attr = next((c for c in verb.children if c.dep_ == "attr" and c.pos_ in ("NOUN",) and not _within(c, exclude)), None)
        return (attr, _phrase(attr, exclude)) if attr is not None else None
    if child.dep_ == "dobj":  # "Porto keeps the 22nd as its payroll cutoff": the value is the cutoff
        role = next((g for c in verb.children if c.dep_ == "prep" and c.lower_ == "as"
                     for g in c.children if g.dep_ == "pobj" and g.pos_ == "NOUN" and g.i not in exclude), None)
        if role is not None:
            return role, _phrase(role, exclude)
    words = _args(verb, exclude)
    if not words and verb.dep_ in ("xcomp", "ccomp", "advcl", "relcl") and verb.head.pos_ in ("VERB", "AUX", "NOUN"):
        words = _args(verb.head, exclude) if verb.head.pos_ != "NOUN" else _phrase(verb.head, exclude)
    return (verb, words) if words else None


def predicate_key(tok) -> str:
    lemma = tok.lemma_.lower()
    prt = next((c.lower_ for c in tok.children if c.dep_ == "prt"), None)
    if prt and f"{lemma} {prt}" in CANON:
        return CANON[f"{lemma} {prt}"]
    if tok.pos_ == "VERB" and lemma == "time" and prt == "out":
        return CANON["timeout"]
    return CANON.get(lemma, lemma)


def table_anchor(doc, v: Value, got, cells, cell, header: Sequence[str]):
    """(predicate, subject tokens) for a value in a table row: the row's first cell names what
    it is a value of; the column's header, when it is a predicate word ("Limit", "Price"), is
    the predicate, else the anchor found inside the value's own cell, else the row label."""
    a0, b0 = cells[0]
    label = [t for t in doc[a0:b0 + 1] if not t.is_punct]
    if not label:
        return got
    col = cells.index(cell)
    # a column named by a short noun phrase ("Limit", "Max weight"), not a clause ("What you get")
    words = header[col].split() if col < len(header) else []
    head_word = words[-1].lower() if 0 < len(words) <= 2 else ""
    in_cell = got is not None and not isinstance(got[0], str) and cell[0] <= got[0].i <= cell[1]
    inner = [t for t in got[1] if cell[0] <= t.i <= cell[1]] if in_cell else []
    if head_word in CANON:
        return CANON[head_word], label + ([got[0]] if in_cell and got[0].pos_ == "NOUN" else []) + inner
    if in_cell:
        return got[0], label + inner
    nouns = [t for t in label if t.pos_ in ("NOUN", "PROPN", "VERB")]
    return (nouns[-1] if nouns else label[-1]), label
