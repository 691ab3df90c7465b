"""Evidence resolution (DESIGN §4 step 7): which passages govern at ``valid_at``, which
are rejected and why, and which conflicts cannot be decided.

Deterministic, no model. The rules, applied in this order to the passages the principal
may read:

1. **Effective dates.** ``effective_from`` after ``valid_at``: ``not_yet_effective``.
   ``effective_to`` before it: ``no_longer_effective``. A passage without effective
   dates has validity ``unknown``; it is reported as such, never assumed current nor out.
2. **Supersession.** ``supersedes``/``superseded_by`` (a doc id: every version; or a
   ``doc_id@version`` key) defeat the older passage once the newer one is in force
   (not outside its dates, and not starting after ``valid_at``). A later version of the
   same ``doc_id`` supersedes an earlier one without a link when it is known to have
   started (``effective_from``, else ``published_at``) on or before ``valid_at``:
   ``superseded_by`` names the newer passage. An expired passage that is also superseded
   is reported as superseded (the record names who replaced it).
3. **Stopping conditions.** A passage valid "until X" is ``condition_ended`` once a
   record that survived 1-2, visible to the same principal, carries an event matching X
   (``core.conditions``) dated on or before ``valid_at`` and not before the conditioned
   passage started. ``by`` is the event record's passage that states it.
4. **Conflicts.** Survivors of different documents that attach different values to the
   same subject (``core.statements``) are compared by *scope* first (an entity-specific
   passage outranks a general one: it survived 1-3, so it is in force), then by
   *authority* (the configurable table, ``DEFAULT_AUTHORITY``). The loser is
   ``subordinate_to`` the winner; equal authority leaves both ``unresolved``.

5. **Instructions.** An instruction-shaped passage (``core.injection``) loses every
   conflict it is in; one that nothing else defeated is ``untrusted_instruction``.

The record then scopes to the question (``query``): surviving passages on it are
``governing``; what proves an event or a link the decision rests on is ``supporting``;
rejections and conflicts are reported for the question's evidence; other delivered
passages are ``related`` (``outdated`` when a rule rejects them). An entity-specific
passage beats a general one only for a question naming its entity. Relevance scores and
ranks never enter, and every choice sorts by stable keys, so the order passages arrive in
never changes the decision. Reasons and details are built from ids, dates and codes only,
never passage text, so they may go into traces. The evidence graph
(``core.evidence_graph``) supplies the linked passages, so the decision does not hinge on
what the ranker delivered.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from quarry.core.evidence.conditions import Terms, condition_met, entity_stems, terms
from quarry.core.index.filters import validity
from quarry.core.evidence.graph import PassageFacts, best_passage, doc_key, event_cue, facts_of, passage_cue
from quarry.core.records import (
    DEFAULT_AUTHORITY, Decision, Envelope, Event, Passage, Principal, RejectedEvidence, RejectReason,
    RelatedEvidence, SelectedEvidence, UnresolvedConflict,
)
from quarry.core.evidence.statements import MIN_SHARED, conflict, predicates, statements
from quarry.core.text.tokenizer import tokenize


ON_QUESTION = 2  # words a passage's statements (or title and headings) share with the question


@dataclass
class _Rejection:
    reason: RejectReason
    by: str | None
    detail: str


@dataclass
class _State:
    day: dt.date
    rank: Mapping[str, int]
    by_id: dict[str, Passage]
    rejected: dict[str, _Rejection] = field(default_factory=dict)
    governs: dict[str, set[str]] = field(default_factory=dict)  # passage id -> reasons it governs
    on_tier: set[str] | None = None  # the passages on the question (its tier), when there is a question

    def reject(self, pid: str, reason: RejectReason, by: str | None, detail: str, note: str | None = None) -> None:
        self.rejected[pid] = _Rejection(reason, by, detail)
        if by is not None and note:
            self.governs.setdefault(by, set()).add(note)


def _version_key(v: str) -> tuple:
    """Natural order of versions: "2" < "10", "v2.1" < "v2.10"."""
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in re.findall(r"\d+|[^\d.]+", v))


def _start(env: Envelope) -> dt.date | None:
    return env.effective_from or env.published_at


def _outside_dates(env: Envelope, day: dt.date) -> bool:
    return (env.effective_from is not None and env.effective_from > day) or (
        env.effective_to is not None and env.effective_to < day)


def _rank(env: Envelope, table: Mapping[str, int] | None) -> int:
    if table is None:
        return DEFAULT_AUTHORITY.get(env.authority, env.authority_rank)
    return table.get(env.authority, table.get("unknown", 0))


# ----------------------------------------------------------------------------- rules

def _dates(st: _State) -> None:
    for pid, p in st.by_id.items():
        e = p.envelope
        if e.effective_from is not None and e.effective_from > st.day:
            st.reject(pid, "not_yet_effective", None,
                      f"effective_from {e.effective_from.isoformat()} is after valid_at {st.day.isoformat()}")
        elif e.effective_to is not None and e.effective_to < st.day:
            st.reject(pid, "no_longer_effective", None,
                      f"effective_to {e.effective_to.isoformat()} is before valid_at {st.day.isoformat()}")


def _supersedes(newer: Envelope, older: Envelope) -> str | None:
    """How ``newer`` supersedes ``older`` ("link" or "version"), or None."""
    if doc_key(newer) == doc_key(older):
        return None
    if any(s in (older.doc_id, doc_key(older)) and not (s == newer.doc_id) for s in newer.supersedes):
        return "link"
    if any(s in (newer.doc_id, doc_key(newer)) and not (s == older.doc_id) for s in older.superseded_by):
        return "link"
    if newer.doc_id == older.doc_id and _version_key(newer.version) > _version_key(older.version):
        return "version"
    return None


def _supersession(st: _State, by_doc: dict[str, list[Passage]]) -> None:
    envs = {k: ps[0].envelope for k, ps in by_doc.items()}
    for old_key, old in sorted(envs.items()):
        if old.effective_from is not None and old.effective_from > st.day:
            continue  # not yet effective: nothing to supersede
        winners = []
        for new_key, new in sorted(envs.items()):
            how = _supersedes(new, old)
            if how is None or _outside_dates(new, st.day):
                continue
            start = _start(new)
            if start is not None and start > st.day:
                continue
            if how == "version" and start is None:
                continue  # an undated later version is not known to be in force
            winners.append((start or dt.date.min, _version_key(new.version), new_key, how))
        if not winners:
            continue
        start, _, new_key, how = max(winners)
        expired = old.effective_to is not None and old.effective_to < st.day
        for p in by_doc[old_key]:
            by = best_passage(by_doc[new_key], passage_cue(p))
            since = f" in force from {start.isoformat()}" if start != dt.date.min else ""
            detail = (f"{'later version ' if how == 'version' else ''}{new_key}{since} supersedes {old_key}"
                      + (f"; effective_to {old.effective_to.isoformat()}" if expired else ""))
            st.reject(p.passage_id, "superseded_by", by, detail, f"supersedes {old_key}")


def _conditions(st: _State, by_doc: dict[str, list[Passage]]) -> None:
    envs = {k: ps[0].envelope for k, ps in by_doc.items()}
    known = entity_stems(e for env in envs.values() for e in env.entities)
    # Events count only from records that survived dates and supersession.
    events: list[tuple[dt.date, str, Event, Terms]] = []
    for key, env in sorted(envs.items()):
        if all(p.passage_id in st.rejected for p in by_doc[key]):
            continue
        for ev in env.events:
            if ev.on <= st.day:
                events.append((ev.on, key, ev, terms(ev.what, known)))
    events.sort(key=lambda t: (t[0], t[1], t[2].what))
    for key, env in sorted(envs.items()):
        if not env.condition:
            continue
        cond = terms(env.condition, known)
        start = _start(env)
        for on, ev_key, ev, ev_terms in events:
            if ev_key == key or (start is not None and on < start):
                continue  # an event before the condition was stated is not its stopping event
            if not condition_met(cond, env.entities, ev_terms, envs[ev_key].entities):
                continue
            bearers = [p for p in by_doc[ev_key] if p.passage_id not in st.rejected]
            by = best_passage(bearers, event_cue(ev_terms, on))
            for p in by_doc[key]:
                if p.passage_id not in st.rejected:
                    st.reject(p.passage_id, "condition_ended", by,
                              f"stopping event recorded in {ev_key} on {on.isoformat()}, on or before valid_at "
                              f"{st.day.isoformat()}", f"proves the stopping event of {key} ({on.isoformat()})")
            break


def _specific(a: Envelope, b: Envelope) -> bool:
    """``a`` is scoped to fewer entities than ``b`` (general = no entities, or more)."""
    return bool(a.entities) and (not b.entities or set(a.entities) < set(b.entities))


def _for(env: Envelope, asked: frozenset[str]) -> bool:
    """Whether a passage of scope ``env.entities`` can answer a question naming ``asked``:
    it is unscoped, the question names no entity, or it names one of the passage's."""
    return not env.entities or not asked or bool(asked & set(env.entities))


def _conflicts(st: _State, facts: Mapping[str, PassageFacts], asked: frozenset[str] | None = None
               ) -> tuple[list[tuple[str, ...]], list[tuple[str, str]]]:
    """Decide conflicts among survivors; returns the undecided groups and every
    conflicting pair (decided or not).

    Each conflicting pair gives an *attack*: an instruction-shaped passage loses to any
    passage it conflicts with; otherwise scope or authority make the winner attack the
    loser, and equal authority makes them attack each other. The decision is the grounded
    labelling of that graph (Dung 1995): a passage is in when all its attackers are out,
    out when an attacker is in; what remains (mutual attacks, cycles) is unresolved. So a
    passage beaten only by a passage that is itself beaten stands, and the result does not
    depend on the order pairs are visited. ``asked`` are the entities the question names
    (None: no question): an entity-specific passage beats a general one only for a
    question about its entity.
    """
    alive = sorted(pid for pid in st.by_id if pid not in st.rejected)
    stated = {pid: facts[pid].statements for pid in alive}
    attacks: dict[str, dict[str, str]] = {pid: {} for pid in alive}  # loser -> {winner: detail}
    pairs: list[tuple[str, str]] = []
    for i, a in enumerate(alive):
        for b in alive[i + 1:]:
            ea, eb = st.by_id[a].envelope, st.by_id[b].envelope
            if doc_key(ea) == doc_key(eb) or not stated[a] or not stated[b] or conflict(stated[a], stated[b]) is None:
                continue
            pairs.append((a, b))
            ia, ib = facts[a].instruction, facts[b].instruction
            if ia != ib:
                win, lose = (b, a) if ia else (a, b)
                attacks[lose][win] = f"untrusted instruction in {doc_key(st.by_id[lose].envelope)}"
            elif _specific(ea, eb) or _specific(eb, ea):
                win, lose = (a, b) if _specific(ea, eb) else (b, a)
                ew = st.by_id[win].envelope
                if asked is not None and not asked & set(ew.entities):
                    continue  # the exception is another entity's: it does not speak to this question
                attacks[lose][win] = (f"scope: {doc_key(ew)} is specific to {','.join(ew.entities)} and in force at "
                                      f"{st.day.isoformat()}")
            elif st.rank[a] == st.rank[b]:
                attacks[a][b] = attacks[b][a] = "equal authority"
            else:
                win, lose = (a, b) if st.rank[a] > st.rank[b] else (b, a)
                ew, el = st.by_id[win].envelope, st.by_id[lose].envelope
                attacks[lose][win] = f"authority: {ew.authority} ({st.rank[win]}) over {el.authority} ({st.rank[lose]})"
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
            win = min(winners, key=lambda w: (-st.rank[w], w))
            st.reject(pid, "subordinate_to", win, attacks[pid][win], f"outranks {pid}")
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


# ----------------------------------------------------------------------------- entry point

def _overlaps(q: frozenset[str], p: Passage, f: PassageFacts) -> tuple[int, int]:
    """How much of the question a passage speaks to, in stems shared with it: (best over
    its statements' words and predicate; its title, heading trail, condition, events and
    text). Word overlap with the question, never a relevance score or a rank."""
    e = p.envelope
    stated = max((len(q & frozenset(tokenize(" ".join((*s.words, s.predicate))))) for s in f.statements), default=0)
    about = frozenset(tokenize(" ".join([e.title, *p.heading_path, e.condition or "", *(ev.what for ev in e.events),
                                         p.text])))
    return stated, len(q & about)


def _without_echoes(answers: set[str], st: _State, facts: Mapping[str, PassageFacts]) -> set[str]:
    """Answers less one that only repeats, at a lower authority, a value another answer
    states for the same subject (an incident ticket quoting the policy's cutoff)."""
    from quarry.core.evidence.statements import same_subject

    def echoes(a: str, b: str) -> bool:
        return st.rank[a] < st.rank[b] and any(
            same_subject(x, y) and x.unit == y.unit and x.value == y.value
            for x in facts[a].statements for y in facts[b].statements)
    return {a for a in answers if not any(echoes(a, b) for b in answers if b != a)}


def _question_scope(st: _State, facts: Mapping[str, PassageFacts], query: str | None, alive: Sequence[str],
                    shown: set[str], pairs: Sequence[tuple[str, str]], groups: Sequence[tuple[str, ...]]
                    ) -> tuple[set[str], set[str]]:
    """(survivors that answer the question, passages in the question's evidence).

    Passages are on the question in tiers, the first tier that holds a survivor: those
    stating a value whose words share ``ON_QUESTION`` stems with the question; else those
    whose text, title or headings do; else the delivered survivors. The survivors in that
    tier answer; unresolved conflicts are reported when a side is in it. The question's
    evidence, whose rejections are reported, is every passage connected through a link the
    decision used (a rejection's ``by``, a conflict) to one that speaks to the question by
    either test. Without a query every passage is on it."""
    if query is None:
        return set(alive), set(st.by_id)
    q = frozenset(tokenize(query))
    over = {pid: _overlaps(q, p, facts[pid]) for pid, p in st.by_id.items()}
    tier = next((t for t in (0, 1) if any(over[pid][t] >= ON_QUESTION for pid in alive)), None)
    if tier is None:
        answers = {pid for pid in alive if pid in shown}
        on = set(answers)
    else:
        on = {pid for pid, o in over.items() if o[tier] >= ON_QUESTION}
        answers = on & set(alive)
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


def resolve(
    passages: Sequence[Passage],
    principal: Principal,
    valid_at: dt.date | None = None,
    authority: Mapping[str, int] | None = None,
    *,
    query: str | None = None,
    facts: Mapping[str, PassageFacts] | None = None,
    delivered: Sequence[str] | None = None,
) -> Decision:
    """Decide over ``passages`` at ``valid_at`` (default today) for ``principal``: only
    passages the principal may read take part, so an event in a record they cannot see
    never ends a condition. ``authority`` replaces the default authority table.

    ``query`` is the question: passages on it that survive govern; passages that prove a
    link or an event the decision rests on support; delivered passages outside the
    question's evidence are ``related``. ``facts`` are the passages' stored statements
    (computed from the text where missing). ``delivered`` names the passages the search
    delivered (default: all); the others came from the evidence graph and appear only when
    they take part in the decision. A pure function: no index, no search."""
    day = valid_at or dt.date.today()
    by_id: dict[str, Passage] = {}
    for p in sorted(passages, key=lambda p: (p.passage_id, p.model_dump_json())):
        if principal.can_read(p.tenant, p.envelope.acl):
            by_id.setdefault(p.passage_id, p)
    facts = {pid: (facts or {}).get(pid) or facts_of(p) for pid, p in by_id.items()}
    st = _State(day=day, rank={pid: _rank(p.envelope, authority) for pid, p in by_id.items()}, by_id=by_id)
    by_doc: dict[str, list[Passage]] = {}
    for pid in sorted(by_id):
        by_doc.setdefault(doc_key(by_id[pid].envelope), []).append(by_id[pid])

    _dates(st)
    _supersession(st, by_doc)
    _conditions(st, by_doc)
    asked = None
    if query is not None:
        known = entity_stems(e for p in by_id.values() for e in p.envelope.entities)
        asked = frozenset(known[t] for t in tokenize(query) if t in known)
    groups, pairs = _conflicts(st, facts, asked)
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
    candidates = [pid for pid in alive if (asked is None or _for(by_id[pid].envelope, asked))
                  and not ((start := _start(by_id[pid].envelope)) is not None and start > day)]
    answers, scope = _question_scope(st, facts, query, candidates, shown, pairs, groups)

    def sel(pid: str, reason: str) -> SelectedEvidence:
        return SelectedEvidence(passage_id=pid, reason=reason, validity=validity(by_id[pid].envelope, day))

    # A record that proves an event or a link the decision rests on supports the answer
    # (the proving passage; its other passages are related), unless nothing else answers.
    asks = frozenset(tokenize(query)) if query is not None else frozenset()
    proving = {doc_key(by_id[pid].envelope) for pid in alive if any(n.startswith("proves") for n in st.governs.get(pid, ()))
               and not any(len(asks & frozenset(tokenize(ev.what))) >= ON_QUESTION for ev in by_id[pid].envelope.events)}
    if any(doc_key(by_id[pid].envelope) not in proving for pid in answers):
        answers = {pid for pid in answers if doc_key(by_id[pid].envelope) not in proving}
    if answers and query is not None:  # a lower authority stating the same value for the same subject only agrees
        answers = _without_echoes(answers, st, facts)
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


CONTRADICTION_TERMS = ("superseded", "exception", "effective", "revoked", "completed")
MAX_FOLLOW_UPS = 2


def follow_up_queries(decision: Decision, passages: Sequence[Passage], limit: int = MAX_FOLLOW_UPS) -> list[str]:
    """Contradiction search (issue 8 item 3): narrow follow-up queries for the selected
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
        facts = statements(p.text) + predicates(p.text)
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
