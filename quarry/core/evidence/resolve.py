"""Evidence resolution (DESIGN §4 step 7): which passages govern at ``valid_at``, which
are rejected and why, and which conflicts cannot be decided.

Deterministic, no model. The rules, applied in this order to the passages the principal
may read:

1. **Effective dates.** ``effective_from`` after ``valid_at``: ``not_yet_effective``.
   ``effective_to`` before it: ``no_longer_effective``. A passage without effective
   dates has validity ``unknown``; it is reported as such, never assumed current nor out.
   For a question, a passage whose sentences on it state a rule that a date fronting its
   paragraph starts after ``valid_at`` is ``not_yet_effective`` too (:func:`.rules.later_rules`).
2. **Supersession.** ``supersedes``/``superseded_by`` (a doc id: every version; or a
   ``doc_id@version`` key) defeat the older passage once the newer one is in force
   (not outside its dates, and not starting after ``valid_at``). A later version of the
   same ``doc_id`` supersedes an earlier one without a link when it is known to have
   started (``effective_from``, else ``published_at``) on or before ``valid_at``:
   ``superseded_by`` names the newer passage. An expired passage that is also superseded
   is reported as superseded (the record names who replaced it).
3. **Stopping conditions.** A passage valid "until X" is ``condition_ended`` once a
   record that survived 1-2, visible to the same principal, carries an event matching X
   (:mod:`.conditions`) dated on or before ``valid_at`` and not before the conditioned
   passage started. ``by`` is the event record's passage that states it.
4. **Conflicts.** Survivors of different documents that attach different values to the
   same subject (:mod:`.conflict`) are compared by *scope* first (an entity-specific
   passage outranks a general one: it survived 1-3, so it is in force), then by
   *authority* (the configurable table, ``DEFAULT_AUTHORITY``); of the entities the question
   names, only places (written as names, or by their name alone: "at Copperbeech") make a passage
   narrower, unless one of the two lasts only a while (a condition, an end date). The loser is
   ``subordinate_to`` the winner (``superseded_by`` when the winner names the loser's value
   as the one it replaces); equal authority leaves both ``unresolved``. A local rule (one
   authority, scoped to at most half of the other's entities) does not dispute the general
   rule for a question naming no entity.

5. **Instructions.** An instruction-shaped passage (:mod:`.injection`) loses every
   conflict it is in; one that nothing else defeated is ``untrusted_instruction``.

The record then scopes to the question (``query``): surviving passages on it are
``governing``; what proves an event or a link the decision rests on is ``supporting``;
rejections and conflicts are reported for the question's evidence; other delivered
passages are ``related`` (``outdated`` when a rule rejects them). An answer that a higher
authority among the answers contradicts on what the question asks, in sentences too unlike
to be one subject by themselves, is ``subordinate_to`` it (:func:`.question.without_outranked`);
so is a lower answer stating a value the question quotes, where a higher authority states
another in the clause nearest it, and that authority answers (:func:`.question.checked_claims`).
A memo withdrawing or replacing one rule of a document it names supersedes the passage stating
that rule, for a question about that rule, and answers in its place
(:func:`.disputes.withdrawn_rules`).
An entity-specific
passage beats a general one only for a question naming its entity; an entity the question
names that no surviving passage is scoped to (the ticket it quotes) scopes nothing. Ranks and the
ranker's scores never enter; a passage's cosine to the question (``relevance``, from the
stored vectors) can only add an answer the question's words missed (:mod:`.question`).
Every choice sorts by stable keys, so the order passages arrive in never changes the
decision. Reasons and details are built from ids, dates and codes only,
never passage text, so they may go into traces. The evidence graph
(:mod:`.graph`) supplies the linked passages, so the decision does not hinge on
what the ranker delivered.

Where each part lives: rules 1-3 in :mod:`.rules`, rules 4-5 in :mod:`.disputes`, the
question's tiers and evidence in :mod:`.question`; :func:`resolve` here runs them in that
order and assembles the :class:`~quarry.core.records.Decision`, and
:func:`follow_up_queries` derives the contradiction search's queries from it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence

from quarry.core.evidence.conditions import named_by_head, named_entities, other_parts
from quarry.core.evidence.disputes import decide_conflicts, partial_overrides, withdrawn_rules
from quarry.core.evidence.graph import PassageFacts, doc_key, facts_of
from quarry.core.evidence.conflict import same_value
from quarry.core.evidence.predicates import MIN_SHARED, predicates
from quarry.core.evidence.question import (
    ON_QUESTION, asked_stems, can_answer, checked_claims, question_scope, resumed, said_of_others, speaks_to, stated_stems, without_echoes, without_outranked,
)
from quarry.core.evidence.sentences import passage_sentences
from quarry.core.evidence.rules import (
    Rejection, ResolutionState, rank_of, effective_dates, later_rules, start_of, stopping_conditions, supersession,
)
from quarry.core.evidence.statements import statements
from quarry.core.evidence.subjects import same_subject
from quarry.core.evidence.vectors import clause_similarity
from quarry.core.index.filters import validity
from quarry.core.records import (
    Decision, Passage, Principal, RejectedEvidence, RelatedEvidence, SelectedEvidence, UnresolvedConflict,
)
from quarry.core.text.tokenizer import tokenize


def resolve(
    passages: Sequence[Passage],
    principal: Principal,
    valid_at: dt.date | None = None,
    authority: Mapping[str, int] | None = None,
    *,
    query: str | None = None,
    facts: Mapping[str, PassageFacts] | None = None,
    delivered: Sequence[str] | None = None,
    relevance: Mapping[str, float] | None = None,
) -> Decision:
    """Decide over ``passages`` at ``valid_at`` (default today) for ``principal``: only
    passages the principal may read take part, so an event in a record they cannot see
    never ends a condition. ``authority`` replaces the default authority table.

    ``query`` is the question: passages on it that survive govern; passages that prove a
    link or an event the decision rests on support; delivered passages outside the
    question's evidence are ``related``. ``facts`` are the passages' stored statements
    (computed from the text where missing). ``delivered`` names the passages the search
    delivered (default: all); the others came from the evidence graph and appear only when
    they take part in the decision. ``relevance`` maps passage ids to their cosine to the
    question (the index's stored vectors; :func:`quarry.core.search.resolution.question_relevance`):
    it can add answers the question's words missed. A pure function: no index, no search."""
    day = valid_at or dt.date.today()
    by_id: dict[str, Passage] = {}
    for p in sorted(passages, key=lambda p: (p.passage_id, p.model_dump_json())):
        if principal.can_read(p.tenant, p.envelope.acl):
            by_id.setdefault(p.passage_id, p)
    facts = {pid: (facts or {}).get(pid) or facts_of(p) for pid, p in by_id.items()}
    st = ResolutionState(day=day, rank={pid: rank_of(p.envelope, authority) for pid, p in by_id.items()}, by_id=by_id)
    by_doc: dict[str, list[Passage]] = {}
    for pid in sorted(by_id):
        by_doc.setdefault(doc_key(by_id[pid].envelope), []).append(by_id[pid])

    effective_dates(st)
    supersession(st, by_doc)
    stopping_conditions(st, by_doc)
    if query is not None:  # the rule asked about may start later than the passage stating it
        later_rules(st, asked_stems(query))
    # the statements' stored vectors (the tenant's embedder, at build time) compare clauses
    similarity = clause_similarity(facts.values())
    asked = None
    withdrawing: set[str] = set()
    if query is not None:  # a rule replaced or withdrawn in part, where the question asks about it
        known = {e for p in by_id.values() for e in p.envelope.entities}
        asked = named_entities(query, known) | named_by_head(query, known)  # ("at Copperbeech": the course)
        q_stems = frozenset(tokenize(query))
        partial_overrides(st, facts, speaks_to(query), lambda s: len(q_stems & stated_stems(s)), similarity)
        withdrawing = withdrawn_rules(st, facts, query, lambda t: passage_sentences(t, tenant=principal.tenant), asked)
    # parts of a kind the question names by another letter or number (Pier B's, asked about Pier A)
    elsewhere = frozenset() if query is None else other_parts(query, (e for p in by_id.values()
                                                                     for e in p.envelope.entities))
    groups, pairs = decide_conflicts(st, facts, asked, speaks_to(query) if query is not None else None, similarity,
                                     elsewhere, query)
    in_conflict = {pid for g in groups for pid in g}
    shown = set(by_id) if delivered is None else set(delivered) & set(by_id)
    for pid in sorted(by_id):  # an instruction to disregard the evidence never governs
        if facts[pid].instruction and pid not in st.rejected and pid not in in_conflict:
            st.reject(pid, "untrusted_instruction", None, "instruction-shaped text: it tells the reader to "
                      "disregard or override evidence")
    alive = [pid for pid in sorted(by_id) if pid not in st.rejected and pid not in in_conflict]
    # a passage scoped to entities the question does not name answers a question about others
    # only when the question names none (then only passages of no narrower scope answer)
    # and a record that starts (effective, else published) after valid_at cannot answer as of it
    # an entity the question names scopes its answer only where a survivor is about it: a
    # ticket id the question quotes ("CX-20418 says ...") leaves the policies free to answer
    scoping = None if asked is None else asked & frozenset(e for pid in alive for e in by_id[pid].envelope.entities)
    # (a passage whose title, headings or text name an entity asked about is about it, whatever
    # its entity list: lists mix places with topics, and the deadlines policy's "Counsel briefed"
    # row answers a question about counsel although only the counsel runbook lists "counsel";
    # the fee schedule's "Shore power" section answers a question about shore power)
    candidates = [pid for pid in alive if (scoping is None or can_answer(by_id[pid].envelope, scoping)
                                           or named_entities(_written_about(by_id[pid]), scoping))
                  and not ((start := start_of(by_id[pid].envelope)) is not None and start > day)]
    answers, scope = question_scope(st, facts, query, candidates, shown, pairs, groups, relevance)
    if asked:  # a passage naming the entity asked about, but saying what is asked only of others
        answers = {pid for pid in answers if not said_of_others(by_id[pid], query, asked)}
    answers |= withdrawing & set(candidates)  # a memo withdrawing the rule asked about answers in its place

    def sel(pid: str, reason: str) -> SelectedEvidence:
        return SelectedEvidence(passage_id=pid, reason=reason, validity=validity(by_id[pid].envelope, day))

    if query is not None:  # an exception whose condition ended gives way to the rule it stood in for
        answers |= resumed(st, facts, query, candidates, answers, similarity)
    # A record that proves an event or a link the decision rests on supports the answer
    # (the proving passage; its other passages are related), unless nothing else answers.
    asks = frozenset(tokenize(query)) if query is not None else frozenset()
    proving = {doc_key(by_id[pid].envelope) for pid in alive if any(n.startswith("proves") for n in st.governs.get(pid, ()))
               and not any(len(asks & frozenset(tokenize(ev.what))) >= ON_QUESTION for ev in by_id[pid].envelope.events)}
    others = {pid for pid in answers if doc_key(by_id[pid].envelope) not in proving}
    if others:  # a proving record answers only where nothing takes the ended passage's place
        answers = {pid for pid in answers if doc_key(by_id[pid].envelope) not in proving
                   or not _taken_over(doc_key(by_id[pid].envelope), others, st, facts)}
    if answers and query is not None:  # a lower authority stating the same value for the same subject only agrees
        answers = without_echoes(answers, st, facts, candidates, similarity, query)
    if answers and query is not None:  # a higher authority stating another value on what was asked overrules it
        answers = without_outranked(answers, st, facts, query, similarity)
    if answers and query is not None:  # a claim the question quotes is checked against a higher authority
        answers = checked_claims(answers, st, facts, candidates, query, similarity)
    if answers and query is not None:
        _name_the_answer(st, facts, answers, speaks_to(query))
    governing, supporting = [], []
    for pid in alive:
        notes = "; ".join(sorted(st.governs.get(pid, ())))
        if pid in answers:
            governing.append(sel(pid, notes or "answers the question"))
        elif pid in scope and notes:
            supporting.append(sel(pid, notes))
    rejected = tuple(RejectedEvidence(passage_id=pid, reason=r.reason, by=r.by, detail=r.detail)
                     for pid, r in sorted(st.rejected.items()) if pid in scope)
    unresolved = tuple(
        UnresolvedConflict(passage_ids=g, reason="equal authority ("
                           + ", ".join(sorted({f"{by_id[p].envelope.authority} {st.rank[p]}" for p in g}))
                           + ") on different values for the same subject")
        for g in groups if any(p in (st.on_tier if st.on_tier is not None else scope) for p in g)
    )
    placed = {s.passage_id for s in (*governing, *supporting)} | {r.passage_id for r in rejected} | {
        p for u in unresolved for p in u.passage_ids}
    related = tuple(
        RelatedEvidence(passage_id=pid, outdated=st.rejected[pid].reason if pid in st.rejected else None,
                        detail=st.rejected[pid].detail if pid in st.rejected else "")
        for pid in sorted(shown - placed))
    return Decision(valid_at=day, governing=tuple(governing), supporting=tuple(supporting), rejected=rejected,
                    unresolved=unresolved, related=related)


def _written_about(p: Passage) -> str:
    """What a passage says it is about: its document's title, its heading trail and its text."""
    return "\n".join([p.envelope.title, *p.heading_path, p.text])


def _name_the_answer(st: ResolutionState, facts: Mapping[str, PassageFacts], answers: set[str], on) -> None:
    """A passage that lost a conflict to a neighbouring rule (a wiki's many quick answers
    contradicting the billing policy) names, as what defeats it, the answer to the question
    when it also states another value of the same kind on the question's words as that
    answer, from a higher authority: the record points at the evidence that governs what
    was asked."""
    for pid, r in sorted(st.rejected.items()):
        if r.reason == "untrusted_instruction" and r.by is None:
            # an instruction that nothing contradicted in so many words gives way to what
            # answers the question at a higher authority
            top = sorted((b for b in answers if st.rank[b] > st.rank[pid]), key=lambda x: (-st.rank[x], x))
            if top:
                st.rejected[pid] = Rejection(r.reason, top[0], r.detail)
            continue
        if r.reason != "subordinate_to" or r.by in answers:
            continue
        mine = [x for x in facts[pid].statements if on(x)]
        for b in sorted(answers, key=lambda x: (-st.rank[x], x)):
            if st.rank[b] > st.rank[pid] and any(
                    x.unit == y.unit and not same_value(x, y) for x in mine for y in facts[b].statements if on(y)):
                st.rejected[pid] = Rejection("subordinate_to", b, f"authority: {st.by_id[b].envelope.authority} "
                                             f"({st.rank[b]}) over {st.by_id[pid].envelope.authority} ({st.rank[pid]})")
                st.governs.get(r.by, set()).discard(f"outranks {pid}")  # the neighbouring rule no longer names it
                st.governs.setdefault(b, set()).add(f"outranks {pid}")
                break


def _taken_over(proof: str, others: set[str], st: ResolutionState, facts: Mapping[str, PassageFacts]) -> bool:
    """Whether another answer takes the place of what the record ``proof`` proved ended: it
    states a value for a subject a passage ended by that proof stated (the general cutoff
    after an exception's condition ended). A record proving a link or an event only
    supports such an answer; where the ended passage stated no value, or nothing states
    another for its subject, the proof itself is the answer ("the allowance ended when
    the works finished")."""
    ended = [pid for pid, r in st.rejected.items() if r.reason == "condition_ended" and r.by is not None
             and doc_key(st.by_id[r.by].envelope) == proof]
    gone = [s for pid in ended for s in facts[pid].statements]
    if not ended:
        return True
    if not gone:
        return False  # it stated no value: no other value takes its place
    return any(same_subject(x, y) for x in gone for o in sorted(others) for y in facts[o].statements)


CONTRADICTION_TERMS = ("superseded", "exception", "effective", "revoked", "completed")
MAX_FOLLOW_UPS = 2


def follow_up_queries(decision: Decision, passages: Sequence[Passage], limit: int = MAX_FOLLOW_UPS) -> list[str]:
    """Contradiction search: narrow follow-up queries for the selected
    passages that state a threshold, amount, time, owner, status or date: one per subject,
    the subject's own words (and the passage's entity when it has one) plus
    ``CONTRADICTION_TERMS``, so the search looks for what would change the answer.

    At most ``limit``; governing passages first, then by authority, then by id, so the
    list is deterministic. The caller (the Gateway's composition, or the in-process search)
    runs them under the same principal and calls ``resolve`` again over the union; core
    never runs a search itself.
    """
    by_id = {p.passage_id: p for p in passages}
    chosen = [s for s in decision.selected if s.passage_id in by_id]
    chosen.sort(key=lambda s: (s.reason == "supporting", -by_id[s.passage_id].envelope.authority_rank, s.passage_id))
    out: list[str] = []
    seen: list[frozenset[str]] = []
    for sel in chosen:
        p = by_id[sel.passage_id]
        facts = statements(p.text, tenant=p.tenant) + predicates(p.text, tenant=p.tenant)
        for fact in facts:
            subj = frozenset(fact.subject)
            if any(len(subj & s) >= MIN_SHARED or subj <= s for s in seen):
                continue  # the same subject already has its query
            seen.append(subj)
            scope = list(p.envelope.entities[:1]) if len(p.envelope.entities) == 1 else []
            words = [w.lower() for w in (*scope, *fact.words)]
            out.append(" ".join(dict.fromkeys(words + list(CONTRADICTION_TERMS))))
            break  # one subject per passage: the first it states
        if len(out) >= limit:
            break
    return out
