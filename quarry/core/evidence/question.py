"""Scoping a decision to the question: which survivors answer it (in tiers of word
overlap; then, given the passages' cosines to the question, any survivor far closer in
meaning than every answer the words chose; never a rank), which passages are in the
question's evidence, and which answers only echo another at a lower authority."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
import re
from functools import lru_cache

from quarry.core.evidence.conflict import same_value
from quarry.core.evidence.graph import PassageFacts, doc_key
from quarry.core.evidence.rules import ResolutionState
from quarry.core.evidence.statements import statements
from quarry.core.evidence.subjects import _GENERIC_HEADS, DEFAULT_THRESHOLDS, GENERIC_WORDS, same_subject
from quarry.core.records import Envelope, Passage
from quarry.core.text.tokenizer import tokenize
from quarry.core.text.units import logical_lines, sentence_spans

_STANDS_IN = ("superseded_by", "condition_ended")
# cosine to the question by which a survivor must beat every answer the words chose to answer
# too (chosen on the dev cases: 0.1, 0.05 and 0.0 gave 571, 580 and 581 of 636, the last with
# 0.1 more governing passages per decision)
_MEANING_MARGIN = 0.05
_TEXT_MARGIN = 1  # on words in the text alone, a passage sharing fewer than the best less this does not answer

__all__ = ["CLAIM_SIMILARITY", "ON_QUESTION", "answer_kinds", "asked_stems", "checked_claims", "can_answer", "question_scope", "resumed", "said_of_others",
           "speaks_to", "stated_stems", "without_echoes", "without_outranked"]

_PERIODS = r"(?:minutes?|hours?|days?|nights?|weeks?|fortnights?|months?|years?)"
_NUMBER_WORDS = r"(?:\d+(?:[.,]\d+)?|an?|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|fifteen|twenty|thirty)"
# What kind of value a question asks for, from its wording or the values it quotes (the
# answer type of question answering): a statement of another kind does not speak to it.
_KIND_CUES: tuple[tuple[str, re.Pattern], ...] = tuple((k, re.compile(p, re.I)) for k, p in (
    ("time_of_day", r"\b(?:what|which) time\b|\bwhat hour\b|\b\d{1,2}(?::\d\d)?\s?(?:am|pm)\b|\b\d{1,2}:\d\d\b"
                    r"|\b(?:noon|midday|midnight)\b"),
    ("duration", r"\bhow (?:long|quickly|soon|often|many " + _PERIODS + r")\b|\bwithin how\b"
                 r"|\b" + _NUMBER_WORDS + r"[\s-]+(?:working |business |calendar |clear )?" + _PERIODS + r"\b"),
    ("currency", r"[£$€]\s?\d|\b(?:gbp|eur|usd|chf|cad|aud)\s?\d|\bhow much\b.*\b(?:cost|charge|pay|fee|price)"
                 r"|\b(?:cost|price|fee|charge|surcharge|deposit)s?\b"),
    ("percent", r"%|\bper ?cent\b|\bpercentage\b"),
))

ON_QUESTION = 2  # words a passage's statements (or title and headings) share with the question
# Words that never tell two subjects apart: generic heads ("period", "window") and quantifiers.
_GENERIC_STEMS = frozenset(tokenize(" ".join(sorted(GENERIC_WORDS | _GENERIC_HEADS))))
# Words that say how a value is measured, never what it is of: "per", "each", "every".
_MEASURE_WORDS = frozenset(tokenize("per each every"))


@lru_cache(maxsize=4096)
def _measures(stem: str) -> bool:
    """Whether a stem only names a period or a rate ("day", "week", "per"; pint's time
    units): the measure words a statement's value may carry (:func:`stated_stems`)."""
    if stem in _MEASURE_WORDS:
        return True
    from quarry.core.evidence.quantities import names_duration  # pint loads on first use, not at import

    return names_duration(stem)


def stated_stems(s) -> frozenset[str]:
    """A statement's stems that can put it on a question: its words and predicate, less the
    words of its own value's measure ("3 working *days*", "GBP 4 *per* pallet *per week*":
    every duration in days shares them with a question asking "how many days per week").
    Period words that are not the value's measure stay: they say what it is of ("50% in the
    second *week* of classes", "4 weeks of sick pay after three *years*")."""
    stems = frozenset(tokenize(" ".join((*s.words, s.predicate))))
    own = frozenset(t for t in tokenize(str(s.value)) if _measures(t)) | _MEASURE_WORDS
    return stems - own


def can_answer(env: Envelope, asked: frozenset[str]) -> bool:
    """Whether a passage of scope ``env.entities`` can answer a question naming ``asked``:
    it is unscoped, the question names no entity, or it names one of the passage's."""
    return not env.entities or not asked or bool(asked & set(env.entities))


def answer_kinds(query: str) -> frozenset[str] | None:
    """The kinds of value (a statement's unit before any ``:`` or ``/``: "duration",
    "time_of_day", "currency", "percent") the question asks for or quotes, or None when its
    words name none ("is that right?")."""
    kinds = frozenset(k for k, rx in _KIND_CUES if rx.search(query))
    return kinds or None


def fits(s, kinds: frozenset[str] | None) -> bool:
    """Whether statement ``s`` is of a kind the question asks for (any, when it names none;
    owner, status and date facts always)."""
    kind = s.unit.split("/")[0].split(":")[0]
    return kinds is None or kind in kinds or kind in ("owner", "status", "date")


def speaks_to(query: str):
    """Whether a statement speaks to the question: its subject words or predicate share a
    stem with it, other than a word that never tells two subjects apart (a "period", a
    "time", "each"), and its value is of a kind the question asks for
    (:func:`answer_kinds`). Conflicts are decided for the question only on such subjects."""
    q = frozenset(tokenize(query)) - _GENERIC_STEMS
    kinds = answer_kinds(query)

    def on(s) -> bool:
        return fits(s, kinds) and bool(q & frozenset(tokenize(" ".join((*s.words, s.predicate)))))
    return on


def _overlaps(q: frozenset[str], p: Passage, f: PassageFacts, kinds: frozenset[str] | None = None
              ) -> tuple[int, int]:
    """How much of the question a passage speaks to, in stems shared with it: (best over
    its statements' words and predicate; its title, heading trail, condition, events and
    text). Word overlap with the question, never a relevance score or a rank."""
    e = p.envelope
    stated = max((len(q & stated_stems(s)) for s in f.statements if fits(s, kinds)), default=0)
    about = frozenset(tokenize(" ".join([e.title, *p.heading_path, e.condition or "", *(ev.what for ev in e.events),
                                         p.text])))
    return stated, len(q & about)


def _echoes(a: str, b: str, st: ResolutionState, facts: Mapping[str, PassageFacts], similarity=None,
            paraphrase: bool = False, on=None) -> bool:
    """``a`` only repeats, at a lower authority than ``b``, a value ``b`` states for the same
    subject; with ``paraphrase``, in a sentence that says the same thing in other words (the
    masked clauses reach the embedder's paraphrase threshold). Given ``on`` (a statement
    speaks to the question), only what ``a`` states on the question counts, where it states
    anything there: the Millrace page's "10 working days" for a direct debit change answers,
    whatever its gate codes' "4 digits" repeat of a change record."""
    if paraphrase and similarity is None:
        return False
    mine = [x for x in facts[a].statements if on(x)] if on is not None else []
    return st.rank[a] < st.rank[b] and any(
        x.unit == y.unit and same_value(x, y) and same_subject(x, y, similarity)
        and (not paraphrase or similarity(x.clause, y.clause) >= DEFAULT_THRESHOLDS.synonym)
        for x in (mine or facts[a].statements) for y in facts[b].statements)


def resumed(st: ResolutionState, facts: Mapping[str, PassageFacts], query: str, candidates: Sequence[str],
            answers: set[str], similarity=None) -> set[str]:
    """Survivors that take an ended exception's place. A passage whose condition ended
    ("Harwood repeats take 4 working days, pending Harwood's switch") stated a value the
    question asks about (its words share ``ON_QUESTION`` stems with the question); a
    candidate stating a value for the same subject (the policy's 2 working days) is the rule
    again and answers, unless an answer already states one for that subject."""
    q = frozenset(tokenize(query))
    kinds = answer_kinds(query)
    ended = [s for pid, r in sorted(st.rejected.items()) if r.reason == "condition_ended"
             for s in facts[pid].statements if fits(s, kinds) and len(q & stated_stems(s)) >= ON_QUESTION]
    if not ended:
        return set()

    def states(pid: str) -> bool:
        return any(x.unit.split("/")[0] == y.unit.split("/")[0] and same_subject(x, y, similarity)
                   for x in ended for y in facts[pid].statements)
    if any(states(a) for a in answers):
        return set()
    return {c for c in candidates if c not in answers and states(c)}


def without_echoes(answers: set[str], st: ResolutionState, facts: Mapping[str, PassageFacts],
                   candidates: Sequence[str] = (), similarity=None, query: str | None = None) -> set[str]:
    """Answers less one that only repeats, at a lower authority, a value another answer
    states for the same subject (an incident ticket quoting the policy's cutoff), in what it
    states on the question where it states anything there. A
    ``candidates`` survivor that an answer echoes answers in its place: asked about what
    the care wiki says, the policy stating the same cutoff in other words is what governs
    (a ticket whose steps filter on the same time does not take an exception's place). ``similarity``
    compares statements' masked clauses (:func:`.vectors.clause_similarity`). Given the
    ``query``, a candidate of a higher authority whose sentence on the question's words an
    answer restates in one like it, with the same value, answers too (:func:`_restates`:
    the help page's "a quarter of an hour before" restates the surgery policy's "15 minutes
    before the admission slot")."""
    answers = set(answers) | {c for c in candidates if c not in answers
                              and any(_echoes(a, c, st, facts, similarity, paraphrase=True) for a in answers)}
    if query is not None and similarity is not None:
        q = frozenset(tokenize(query)) - _GENERIC_STEMS
        answers |= {c for c in candidates if c not in answers and any(
            _restates(a, c, st, facts, q, similarity) for a in answers)}
    on = speaks_to(query) if query is not None else None
    return {a for a in answers if not any(_echoes(a, b, st, facts, similarity, on=on) for b in answers if b != a)}


def _restates(a: str, c: str, st: ResolutionState, facts: Mapping[str, PassageFacts], q: frozenset[str],
              similarity) -> bool:
    """``a`` (an answer) states, in a sentence like one of ``c`` (of a higher authority, not
    the record of an event), the value ``c`` states there, and ``c``'s sentence is on a word
    of the question ``q``."""
    if st.rank[a] >= st.rank[c] or st.by_id[c].envelope.events:
        return False  # (a notice that works finished, repeating the rule's time, is not the rule)
    return any(x.unit == y.unit and same_value(x, y) and q & stated_stems(y) and x.clause and y.clause
               and similarity(x.clause, y.clause) >= DEFAULT_THRESHOLDS.similarity
               for x in facts[a].statements for y in facts[c].statements)


def _not_local(env: Envelope, x, entities: set[str]) -> bool:
    """Statement ``x`` of a passage with envelope ``env`` is no local rule against a passage
    scoped to ``entities``: its passage names no entity outside them, or the sentence itself
    names only entities among them and no place or label of its own (a wiki's "Deposits: ..."
    line; not "At the East Basin ...")."""
    return set(env.entities) <= entities or (bool(x.scope) and set(x.scope) <= entities and not x.qualifiers)


def without_outranked(answers: set[str], st: ResolutionState, facts: Mapping[str, PassageFacts],
                      query: str, similarity=None) -> set[str]:
    """Answers less one that a higher authority among them contradicts on what the question
    asks: the help page's "public liability of five million pounds" against the standard's
    "GBP 10 million", in sentences too unlike each other to be one subject by themselves
    (:func:`.subjects.same_subject`), but both on the question's words.

    The lower answer ``a`` is ``subordinate_to`` the higher ``b`` when a statement of ``a``
    sharing ``ON_QUESTION`` stems with the question and one of ``b`` sharing at least one
    state values of one unit that differ, and they share ``ON_QUESTION`` of those stems (or
    one, in sentences the embedder puts at ``similarity`` or above: "the deposit is back on
    their card within a fortnight" and "the deposit is released within 7 working days"), and
    ``b`` states no value on the question equal to that of ``a`` (a help page repeating one
    figure right and another wrong still loses on the wrong one). Never an exception: ``a``
    has no condition, no end date and no events; and it names no entity ``b`` does not (a
    local rule wins by scope), unless the statement's sentence names only entities of ``b``
    and no place or label of its own (a wiki listing more topics than the terms)."""
    q = frozenset(tokenize(query))
    kinds = answer_kinds(query)
    # each answer's statements of the kind asked, with the question's stems they share
    stated = {pid: [(s, w) for s in facts[pid].statements if fits(s, kinds) and (w := q & stated_stems(s))]
              for pid in answers}

    def on(pid: str, least: int = ON_QUESTION) -> list:
        return [(s, w) for s, w in stated[pid] if len(w) >= least]

    def one_rule(x, wx, y, wy) -> bool:
        # two of the question's stems in common, or one and sentences the embedder finds alike
        return len(wx & wy) >= ON_QUESTION or (
            bool(wx & wy) and similarity is not None and similarity(x.clause, y.clause) >= DEFAULT_THRESHOLDS.similarity)
    out = set(answers)
    for a in sorted(answers):
        env = st.by_id[a].envelope
        if env.condition or env.effective_to or env.events or not (mine := on(a)):
            continue
        for b in sorted(answers, key=lambda x: (-st.rank[x], x)):
            if b not in out or st.rank[b] <= st.rank[a]:
                continue
            eb = set(st.by_id[b].envelope.entities)
            theirs = on(b, 1)
            lone = [(x, wx) for x, wx in mine if _not_local(env, x, eb)
                    and not any(x.unit == y.unit and same_value(x, y) for y, _ in theirs)]
            if any(x.unit == y.unit and not same_value(x, y) and one_rule(x, wx, y, wy)
                   for x, wx in lone for y, wy in theirs):
                st.reject(a, "subordinate_to", b, f"authority: {st.by_id[b].envelope.authority} ({st.rank[b]}) "
                          f"over {env.authority} ({st.rank[a]}) on what the question asks", note=f"outranks {a}")
                out.discard(a)
                break
    return out


# cosine of two masked clauses at or above which a higher authority's statement on the same
# question words is the one a quoted claim is checked against: the floor of the labelled dev
# pairs (no labelled pair moves below 0.45; :class:`.subjects.Thresholds`), not tuned on cases
CLAIM_SIMILARITY = 0.45


def checked_claims(answers: set[str], st: ResolutionState, facts: Mapping[str, PassageFacts],
                   candidates: Sequence[str], query: str, similarity=None) -> set[str]:
    """Answers with each claim the question quotes checked against a higher authority: a
    question quoting a value ("the FAQ says an engineer is with you within four hours, is
    that still right?") that a lower answer ``a`` states is answered by the higher-authority
    survivor ``b`` stating another value of that unit on the same question words, in the
    clause the embedder puts nearest the claim's (at ``CLAIM_SIMILARITY`` or above; on other
    words of the question, at the subject threshold ``Thresholds.similarity``): ``a`` is
    ``subordinate_to`` ``b`` and ``b`` answers, though its own wording ("P1 Emergency: attend
    within 2 hours") shares too few of the question's words to be chosen by them. Nothing
    changes when such a statement of ``b`` states the quoted value (the claim stands), or for
    an exception (``a`` with a condition, an end date or events) or a local rule (``a``
    naming entities ``b`` does not, unless the claim's sentence names only ``b``'s)."""
    if similarity is None or not answers:
        return answers
    from quarry.core.evidence.statements import statements  # spaCy loads on first use, not at import

    quoted = statements(query, tenant=st.by_id[min(answers)].tenant)
    if not quoted:
        return answers
    q = frozenset(tokenize(query))
    asked = q - _GENERIC_STEMS
    out = set(answers)
    for a in sorted(answers):
        env = st.by_id[a].envelope
        if env.condition or env.effective_to or env.events:
            continue
        claims = [(x, w) for x in facts[a].statements
                  if any(x.unit == v.unit and same_value(x, v) for v in quoted) and (w := q & stated_stems(x))]
        best: tuple[float, str] | None = None
        stands = False
        for b in candidates:
            eb = st.by_id[b].envelope
            if st.rank[b] <= st.rank[a] or doc_key(eb) == doc_key(env):
                continue
            for x, w in claims:
                if not _not_local(env, x, set(eb.entities)):
                    continue
                for y in facts[b].statements:
                    if y.unit != x.unit or not (ys := stated_stems(y)) & asked:
                        continue
                    near = similarity(x.clause, y.clause)
                    # on the claim's own question words, or on others of the question in a
                    # sentence as like the claim's as one subject's ("fridge temperature within
                    # two hours of coming out of the cooker" and "cooled ... within 90 minutes
                    # of leaving the cooker", asked "cooked mince chilled within two hours?")
                    if near < (CLAIM_SIMILARITY if w & ys else DEFAULT_THRESHOLDS.similarity):
                        continue
                    if same_value(x, y):
                        stands = True
                    elif best is None or (near, b) > best:
                        best = (near, b)
        if best is not None and not stands:
            b = best[1]
            st.reject(a, "subordinate_to", b, f"authority: {st.by_id[b].envelope.authority} ({st.rank[b]}) over "
                      f"{env.authority} ({st.rank[a]}) on the value the question quotes", note=f"outranks {a}")
            out.discard(a)
            out.add(b)
    return out


def question_scope(st: ResolutionState, facts: Mapping[str, PassageFacts], query: str | None, alive: Sequence[str],
                    shown: set[str], pairs: Sequence[tuple[str, str]], groups: Sequence[tuple[str, ...]],
                    relevance: Mapping[str, float] | None = None) -> tuple[set[str], set[str]]:
    """(survivors that answer the question, passages in the question's evidence).

    Passages are on the question in tiers, the first tier that holds a survivor or a side
    of an unresolved conflict: those
    stating a value whose words share ``ON_QUESTION`` stems with the question; else those
    whose text, title or headings do; else the delivered survivors. The survivors in that
    tier answer (in the text tier, those sharing about as many words as the best, and the
    best of any that outrank them all); unresolved conflicts are reported when a side is in
    it. The question's
    evidence, whose rejections are reported, is every passage connected through a link the
    decision used (a rejection's ``by``, a conflict) to one that speaks to the question by
    either test. Without a query every passage is on it.

    ``relevance`` (passage id -> cosine of its stored vector to the question's) adds
    answers only: a survivor at least ``_MEANING_MARGIN`` closer than every answer of the
    tier (what superseded or ended a passage counting as close as the passage it defeated)
    answers too. It never rejects, never decides a conflict and never removes an answer."""
    if query is None:
        return set(alive), set(st.by_id)
    q = frozenset(tokenize(query))
    kinds = answer_kinds(query)
    over = {pid: _overlaps(q, p, facts[pid], kinds) for pid, p in st.by_id.items()}
    # what superseded a passage on the question, or proved its condition ended, stands in
    # its place: it speaks to the question in words as far as the passage it defeated did
    # (not in statements: the values it states are its own)
    for pid, r in sorted(st.rejected.items()):
        if r.by in over and r.reason in _STANDS_IN:
            over[r.by] = (over[r.by][0], max(over[r.by][1], over[pid][1]))
    # the tier is chosen over the survivors and the passages left in unresolved conflicts:
    # when what speaks to the question is disputed, the dispute is reported, and a passage
    # that only mentions the question's words does not answer in its place
    pool = [*alive, *(pid for g in groups for pid in g)]
    tier = next((t for t in (0, 1) if any(over[pid][t] >= ON_QUESTION for pid in pool)), None)
    if tier is None:
        answers = {pid for pid in alive if pid in shown}
        # a rejected passage that speaks to the question is still its evidence: its rejection
        # is reported (an expired holiday extension, when no survivor shares the words)
        on = set(answers) | {pid for pid, o in over.items() if o[0] >= ON_QUESTION or o[1] >= ON_QUESTION}
    else:
        on = {pid for pid, o in over.items() if o[tier] >= ON_QUESTION}
        answers = on & set(alive)
        if tier == 0 and answers:  # a rule stated without a value ("payments are paused") that
            # speaks to more of the question than every value stated on it answers too
            most = max(over[pid][1] for pid in answers)
            answers |= {pid for pid in alive if over[pid][1] > most}
        if tier == 1:  # words in the text only: those sharing about as many as the best answer
            best = max(over[pid][1] for pid in pool if pid in on)
            kept = {pid for pid in answers if over[pid][1] >= best - _TEXT_MARGIN}
            # a help page's wording closest to the question does not leave out the rule it
            # restates: when no answer kept states a value of the kind asked, of the survivors
            # on the question that outrank every answer kept, those sharing the most words answer too
            if kept and not any(fits(s, kinds) for pid in kept for s in facts[pid].statements):
                top = max(st.rank[pid] for pid in kept)
                if higher := [pid for pid in answers if st.rank[pid] > top]:
                    most = max(over[pid][1] for pid in higher)
                    kept |= {pid for pid in higher if over[pid][1] == most}
            answers = kept
        if relevance and answers:  # a survivor far closer to the question in meaning than every
            # answer the words chose answers too (the question asked in other words than its text);
            # what superseded or ended a passage is as close as the passage it defeated
            near = dict(relevance)
            for pid, r in sorted(st.rejected.items()):
                if r.by is not None and r.reason in _STANDS_IN:
                    near[r.by] = max(near.get(r.by, -1.0), near.get(pid, -1.0))
            lead = max(near.get(pid, -1.0) for pid in answers)
            closer = {pid for pid in alive if near.get(pid, -1.0) >= lead + _MEANING_MARGIN}
            answers |= closer
            on |= closer
        st.on_tier = set(on)
        # the question's evidence grows from whatever speaks to it by either test
        on |= {pid for pid, o in over.items() if o[0] >= ON_QUESTION or o[1] >= ON_QUESTION}
    edges: dict[str, set[str]] = {pid: set() for pid in st.by_id}
    links = [(pid, r.by) for pid, r in st.rejected.items() if r.by] + list(pairs) + [
        (g[0], x) for g in groups for x in g[1:]]
    for a, b in links:
        if a in edges and b in edges:
            edges[a].add(b)
            edges[b].add(a)
    scope, todo = set(on), list(on)
    while todo:
        x = todo.pop()
        for y in edges[x]:
            if y not in scope:
                scope.add(y)
                todo.append(y)
    return answers, scope


def asked_stems(query: str) -> frozenset[str]:
    """What the question asks about: its stems less function words and generic words."""
    return frozenset(tokenize(query)) - _function_stems() - _GENERIC_STEMS


@lru_cache(maxsize=1)
def _function_stems() -> frozenset[str]:
    """Stems of words that say nothing of what is asked ("when", "be", "next", "after"):
    spaCy's English stop words."""
    from spacy.lang.en.stop_words import STOP_WORDS

    return frozenset(tokenize(" ".join(sorted(STOP_WORDS))))


def _parts(entity: str) -> tuple[str, ...]:
    return tuple(w for w in entity.split("-") if w)


def _names(sentence: str, toks: frozenset[str], entity: str, as_name: bool) -> bool:
    """Whether ``sentence`` names ``entity`` by all of its words; ``as_name``: written as a
    name, each word capitalised ("Holloway Green", not "green")."""
    parts = _parts(entity)
    if not parts or not all(w in toks for p in parts for w in tokenize(p)):
        return False
    return not as_name or all(re.search(rf"\b{re.escape(p)}", sentence, re.IGNORECASE) and
                              re.search(rf"\b{re.escape(p[0].upper() + p[1:])}", sentence) for p in parts)


def said_of_others(p: Passage, query: str, asked: frozenset[str]) -> bool:
    """Whether a passage that names, as a name, an entity the question asks about says what is
    asked only of other entities: the sentences naming that entity share no word of the
    question's own (its words less entity names and function words) and state no value, while
    every sentence sharing one names another entity of the passage as a name. A sentence
    naming no entity goes on about the one before it in its paragraph or list item ("Millbank
    last. No date yet." is all about Millbank). A move plan's "Central next, after a rehearsal
    ... Holloway Green last, no date yet" says nothing of Holloway Green's rehearsal. The
    question may name an entity by the last word of its name where no other entity of the
    passage ends with it ("the range")."""
    ents = [e for e in p.envelope.entities if _parts(e)]
    # "the range" names the one entity whose name ends with that word (Hazelmere Range)
    q = frozenset(tokenize(query))
    heads: dict[str, list[str]] = {}
    for e in ents:
        if len(_parts(e)) > 1 and (last := tokenize(_parts(e)[-1])):
            heads.setdefault(last[0], []).append(e)
    asked = asked | {one[0] for h, one in heads.items() if h in q and len(one) == 1}
    names = frozenset(t for e in (*ents, *asked) for t in tokenize(e.replace("-", " ")))
    topic = asked_stems(query) - names
    if not topic:
        return False
    sents: list[tuple[str, frozenset[str]]] = []
    for line in logical_lines(p.text):  # a sentence naming no entity goes on about the one before
        first = True
        for a, b in sentence_spans(line):
            x = line[a:b]
            t = frozenset(tokenize(x))
            if sents and not first and not any(_names(x, t, e, False) for e in (*ents, *asked)):
                sents[-1] = (f"{sents[-1][0]} {x}", sents[-1][1] | t)
            else:
                sents.append((x, t))
            first = False
    on = [(x, t) for x, t in sents if t & topic]
    others = [e for e in ents if e not in asked]
    if not on or not all(any(_names(x, t, e, True) for e in others) for x, t in on):
        return False
    for e in sorted(asked):
        about = [x for x, t in sents if _names(x, t, e, True)]  # a place, written as a name
        if about and not any(statements(x, tenant=p.tenant) for x in about) \
                and not any(_names(x, t, e, False) for x, t in on):
            return True
    return False
