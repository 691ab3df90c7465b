"""The evidence graph of one tenant generation (DESIGN §3, §4 step 7).

Resolution follows the links the data carries instead of hoping the ranker delivered both
ends of a link. For every delivered passage the graph names, by lookup and with no query
encoding:

- **supersession**: passages of the documents that supersede it or that it supersedes
  (explicit ``supersedes``/``superseded_by`` links, from front matter or extracted at build
  time, and the version order of one ``doc_id``);
- **conditions and events**: for a passage with a stopping condition, the passages of the
  records whose events can end it (:func:`.conditions.condition_met`: identifiers exactly,
  content words after stemming, never across entities); for an event record, the
  passages whose conditions it can end;
- **statements**: passages that state another value for the same subject
  (:func:`.conflict.conflicts`), found through an index of statements by subject key.

What is stored: each shard holds ``evidence.jsonl`` with every row's statements and
whether its text is instruction-shaped (:func:`passage_facts`, written by
``core.index.build_and_upload_shard``, so the Spark build, the in-process build, deltas
and compaction write it alike, where the shard is built). The edges are derived from
those facts and the envelopes when a generation (base plus delta) is first resolved, so a
delta's upserts, deletes and ACL changes are part of the graph as soon as they are served.

Every read is masked: a neighbour is returned only when the principal's mask for
``valid_at`` keeps its row (tenant, ACL with overrides, tombstones, validity), exactly as
a retrieval leg would. Tenants never share a graph: it is built from one tenant's shards.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from quarry.core.evidence.conditions import condition_met, entity_stems, event_terms, terms
from quarry.core.evidence.conflict import conflicts
from quarry.core.evidence.injection import instruction_shaped
from quarry.core.evidence.statement import Statement
from quarry.core.evidence.statements import statements_batch
from quarry.core.evidence.subjects import DEFAULT_THRESHOLDS, subject_keys
from quarry.core.evidence.titles import names_title
from quarry.core.evidence.vectors import clause_similarity
from quarry.core.records import Envelope, Passage, Principal
from quarry.core.text.tokenizer import tokenize

MAX_HOPS = 3  # links followed outward from the delivered passages
MAX_NEIGHBOURS = 48  # passages the graph may add to one resolution
PER_LINK = 2  # passages taken from one linked document
PER_STATEMENT = 8  # conflicting passages taken for one statement
NEAREST = 16  # statements compared by vector with one statement (besides its subject keys)


@dataclass(frozen=True)
class PassageFacts:
    """What resolution reads of a passage besides its envelope: its value statements and
    whether its text instructs the reader to disregard evidence (it never governs)."""

    passage_id: str
    statements: tuple = ()
    instruction: bool = False
    # one unit row per statement under the tenant's embedder (``evidence_vectors.npy``), or
    # None; not part of the JSON, equality or hash
    vectors: object = field(default=None, compare=False, repr=False)

    def with_vectors(self, vectors) -> "PassageFacts":
        return PassageFacts(self.passage_id, self.statements, self.instruction, vectors)

    def to_json(self) -> str:
        return json.dumps({"p": self.passage_id, "s": [s.to_json() for s in self.statements],
                           "i": self.instruction}, sort_keys=True)

    @classmethod
    def from_json(cls, line: str) -> "PassageFacts":
        d = json.loads(line)
        return cls(d["p"], tuple(Statement.from_json(s) for s in d["s"]), bool(d["i"]))


def passage_facts(passages: Sequence[Passage]) -> list[PassageFacts]:
    """Facts of many passages of one tenant at once (build time: one batched parse)."""
    tenants = {p.tenant for p in passages}
    if len(tenants) > 1:
        raise ValueError(f"passage_facts reads one tenant's passages, got {sorted(tenants)}")
    stated = statements_batch([p.text for p in passages], [p.envelope.entities for p in passages],
                              tenant=next(iter(tenants), ""),
                              headings=[p.heading_path[-1] if p.heading_path else "" for p in passages])
    return [PassageFacts(p.passage_id, tuple(s), instruction_shaped(p.text)) for p, s in zip(passages, stated)]


def facts_of(p: Passage) -> PassageFacts:
    """Facts of one passage from its text (indexes built before facts were stored, tests)."""
    return passage_facts([p])[0]


@dataclass(frozen=True)
class EvidenceSet:
    """What one resolution is given: the delivered passages (in delivered order), the
    graph's neighbours and any contradiction-search additions, and every passage's facts.
    The Resolver decides over exactly this; it never reads an index."""

    passages: tuple[Passage, ...]
    delivered: tuple[str, ...]
    facts: Mapping[str, PassageFacts] = field(default_factory=dict)
    from_graph: tuple[str, ...] = ()  # ids the graph added
    follow_ups: tuple = ()  # quarry.core.search.records.FollowUp of the contradiction search
    relevance: Mapping[str, float] = field(default_factory=dict)  # passage id -> cosine of its stored vector to the question's
    pooled: tuple[str, ...] = ()  # ranked candidates past the delivered ones that resolution decides over too
    out_of_force: tuple[str, ...] = ()  # passages the valid_at filter kept from delivery, decided over too


def best_passage(candidates: Sequence[Passage], like: frozenset[str], heading: frozenset[str] = frozenset()) -> str:
    """The passage of a document that best states what defeats or proves another: most
    words shared with ``heading`` (the defeated passage's own section heading) in its
    section heading, then with ``like`` in its heading, then in its text, then the smallest
    id ("Leaving early" of version 2 for "Leaving early" of version 1, not "Leaving after
    the minimum term", whose heading shares more of the old passage's text). Deterministic
    word overlap, never a relevance score; the graph and the resolver choose with this one
    rule, so the same passage is named whatever was delivered."""
    def key(p: Passage) -> tuple:
        own = heading_words(p)
        return -len(heading & own), -len(like & own), -len(like & set(tokenize(p.text))), p.passage_id
    return min(candidates, key=key).passage_id


def heading_words(p: Passage) -> frozenset[str]:
    """The stemmed words of a passage's own section heading."""
    return frozenset(tokenize(p.heading_path[-1])) if p.heading_path else frozenset()


def passage_cue(p: Passage) -> frozenset[str]:
    """The words of a passage that the passage superseding it should share."""
    return frozenset(tokenize(" ".join(p.heading_path[-1:]) + " " + p.text))


def event_cue(ev_terms, on: dt.date) -> frozenset[str]:
    """The words a passage stating an event holds: its terms and its date."""
    return frozenset(ev_terms.words | ev_terms.identifiers | {on.isoformat()})


def doc_key(env: Envelope) -> str:
    """``doc_id@version``: one version of one document (the graph's and resolver's node)."""
    return f"{env.doc_id}@{env.version}"


class EvidenceGraph:
    """The links of one tenant generation, over tenant-wide row ids (``pack_row``)."""

    def __init__(self, envelopes: Mapping[str, Envelope], rows_of: Mapping[str, Sequence[int]],
                 facts: Mapping[int, PassageFacts], words_of, passage_of):
        self.rows_of = {k: tuple(sorted(v)) for k, v in rows_of.items()}  # doc key -> rows
        self.key_of = {r: k for k, rows in self.rows_of.items() for r in rows}
        self.facts = dict(facts)
        self.words_of = words_of  # row -> stemmed words (heading + text): choosing a passage of a linked doc
        self.passage_of = passage_of  # row -> Passage
        self.envelopes = dict(envelopes)
        self.links: dict[str, set[str]] = {k: set() for k in self.rows_of}  # doc key -> linked doc keys (both ways)
        self.link_kind: dict[tuple[str, str], str] = {}
        self._supersession()
        self._conditions()
        self.by_subject: dict[str, list[tuple[int, int]]] = {}
        for r in sorted(self.facts):
            for i, s in enumerate(self.facts[r].statements):
                for k in subject_keys(s):
                    self.by_subject.setdefault(k, []).append((r, i))
        # the statements' stored vectors (one tenant generation): the similarity the conflict
        # rule compares clauses with, and a matrix for the nearest statements of a statement
        self.similarity = clause_similarity(self.facts.values())
        self.vector_of: list[tuple[int, int]] = [
            (r, i) for r in sorted(self.facts) if self.facts[r].vectors is not None
            for i in range(len(self.facts[r].statements))]
        self.matrix = np.stack([self.facts[r].vectors[i] for r, i in self.vector_of]).astype(np.float32) \
            if self.vector_of else None

    # -- edges ------------------------------------------------------------------------
    def _link(self, a: str, b: str, kind: str) -> None:
        if a == b or a not in self.links or b not in self.links:
            return
        self.links[a].add(b)
        self.links[b].add(a)
        self.link_kind.setdefault((a, b), kind)
        self.link_kind.setdefault((b, a), kind)

    def _supersession(self) -> None:
        by_doc: dict[str, list[str]] = {}
        for k, env in self.envelopes.items():
            by_doc.setdefault(env.doc_id, []).append(k)
        for k, env in sorted(self.envelopes.items()):
            for ref in (*env.supersedes, *env.superseded_by):
                targets = ([ref] if ref in self.envelopes else []) if "@" in ref else by_doc.get(ref, [])
                for t in targets:
                    self._link(k, t, "supersession")
        for k, env in sorted(self.envelopes.items()):  # documents named by title in another's text
            for t in env.supersedes_titles:
                for o, other in sorted(self.envelopes.items()):
                    if other.doc_id != env.doc_id and names_title(t, other.title):
                        self._link(k, o, "supersession")
        for keys in by_doc.values():  # the versions of one doc_id (the resolver orders them)
            for a in keys:
                for b in keys:
                    if a != b:
                        self._link(a, b, "version")

    def _conditions(self) -> None:
        known = entity_stems(e for env in self.envelopes.values() for e in env.entities)
        events = [(k, env, ev, event_terms(ev.what, env.title, len(env.events) == 1, known))
                  for k, env in sorted(self.envelopes.items()) for ev in env.events]
        self.stopping: dict[tuple[str, str], list[frozenset[str]]] = {}  # (conditioned, event doc) -> cues
        for k, env in sorted(self.envelopes.items()):
            if not env.condition:
                continue
            cond = terms(env.condition, known)
            for ek, eenv, ev, et in events:
                if ek != k and condition_met(cond, env.entities, et, eenv.entities):
                    self._link(k, ek, "condition")
                    self.stopping.setdefault((k, ek), []).append(event_cue(et, ev.on))

    # -- reads ------------------------------------------------------------------------
    def _best_rows(self, key: str, like: frozenset[str], n: int) -> list[int]:
        """The rows of a linked document that best state the link: most shared subject
        keys with the source's statements, then most shared words, then row order."""
        def score(r: int) -> tuple:
            f = self.facts.get(r)
            keys = {k for s in (f.statements if f else ()) for k in subject_keys(s)}
            return -len(like & keys), -len(like & self.words_of(r)), r
        return sorted(self.rows_of.get(key, ()), key=score)[:n]

    def nearest(self, row: int, i: int, n: int = NEAREST) -> list[tuple[int, int]]:
        """The statements (row, index) whose vectors are nearest statement ``i`` of ``row``
        (cosine at least the similarity threshold), nearest first, then by row; unmasked."""
        f = self.facts.get(row)
        if self.matrix is None or f is None or f.vectors is None or not np.any(f.vectors[i]):
            return []
        sims = self.matrix @ np.asarray(f.vectors[i], np.float32)
        keep = np.flatnonzero(sims >= DEFAULT_THRESHOLDS.similarity)
        keep = keep[np.lexsort((keep, -sims[keep]))][:n]
        return [self.vector_of[k] for k in keep if self.vector_of[k][0] != row]

    def neighbours_of(self, row: int, statements: bool = True) -> list[int]:
        """Rows linked to ``row``, unmasked (the caller masks): deterministic order. With
        ``statements`` False, only the document links (supersession, version, condition)."""
        return [r for r, _ in self.linked_rows(row, statements)]

    def linked_rows(self, row: int, statements: bool = True) -> list[tuple[int, str]]:
        """(row, "link" or "statement") for the rows linked to ``row``, unmasked: through a
        document link (supersession, version, condition), or as another value for one of
        its statements' subjects (only with ``statements``). Deterministic order; a row
        reached both ways counts as linked."""
        out: list[int] = []
        key = self.key_of.get(row)
        f = self.facts.get(row)
        stated = f.statements if f else ()
        like = frozenset(k for s in stated for k in subject_keys(s)) | self.words_of(row)
        if key is not None:
            for other in sorted(self.links.get(key, ())):
                kind = self.link_kind.get((key, other))
                if kind == "condition" and (key, other) in self.stopping:  # the record proving the event:
                    # the passage the resolver will name, for each event that can end the condition
                    cands = [self.passage_of(r) for r in self.rows_of[other]]
                    by_id = {p.passage_id: r for p, r in zip(cands, self.rows_of[other])}
                    out += [by_id[best_passage(cands, cue)] for cue in self.stopping[(key, other)]]
                elif kind == "condition":  # an event record: the conditioned passages it may end
                    env = self.envelopes[other]
                    out += self._best_rows(other, frozenset(tokenize(env.condition or "")) | like, PER_LINK)
                else:  # supersession: the passage the resolver names as ``by``, and the closest in subject
                    cands = [self.passage_of(r) for r in self.rows_of[other]]
                    by_id = {p.passage_id: r for p, r in zip(cands, self.rows_of[other])}
                    p = self.passage_of(row)
                    out.append(by_id[best_passage(cands, passage_cue(p), heading_words(p))])
                    out += self._best_rows(other, like, PER_LINK)
        linked = list(dict.fromkeys(out))
        out = []
        for j, s in enumerate(stated if statements else ()):
            found: list[int] = []
            # candidates: the statements sharing a subject key, then the nearest by vector
            cands = [c for k in sorted(subject_keys(s)) for c in self.by_subject.get(k, ())] + self.nearest(row, j)
            for r, i in cands:
                if r != row and r not in found and self.key_of.get(r) != key \
                        and conflicts(s, self.facts[r].statements[i], self.similarity):
                    found.append(r)
            out += sorted(found)[:PER_STATEMENT]
        seen = set(linked)
        return [(r, "link") for r in linked] + [(r, "statement") for r in dict.fromkeys(out) if r not in seen]


def graph_of(index) -> EvidenceGraph:
    """The graph of a loaded ``TenantIndex`` (base shards and delta), built once per index
    object from the facts its shards store (or, for shards built before facts were stored,
    from their text)."""
    g = getattr(index, "_evidence_graph", None)
    if g is not None:
        return g
    from quarry.core.index.rows import pack_row, unpack_row

    envelopes: dict[str, Envelope] = {}
    rows_of: dict[str, list[int]] = {}
    facts: dict[int, PassageFacts] = {}
    hidden = index.hidden_rows()
    for si, sh in enumerate(index.shards):
        gone = set(int(r) for r in hidden[si])
        shard_facts = sh.facts()
        for r in range(len(sh)):
            if r in gone or sh.filters.deleted[r]:
                continue
            gid = pack_row(si, r)
            key = f"{sh.doc_ids[r]}@{sh.versions[r]}"
            if key not in envelopes:
                envelopes[key] = sh.passage(r).envelope
            rows_of.setdefault(key, []).append(gid)
            facts[gid] = shard_facts[r]
    def words_of(gid: int) -> frozenset[str]:
        si, r = unpack_row(gid)
        return index.shards[si].row_words(r)

    def passage_of(gid: int) -> Passage:
        si, r = unpack_row(gid)
        return index.shards[si].passage(r)

    g = EvidenceGraph(envelopes, rows_of, facts, words_of, passage_of)
    index._evidence_graph = g
    return g


def neighbours(index, principal: Principal, valid_at: dt.date | None, delivered: Iterable[str],
               hops: int = MAX_HOPS, limit: int = MAX_NEIGHBOURS) -> list[str]:
    """Passage ids linked to ``delivered`` within ``hops`` links, breadth first, each kept
    only when the principal's mask at ``valid_at`` keeps it (as in every retrieval leg).
    At most ``limit``; the order is a pure function of the graph and the start set.

    Document links (supersession, version, condition -> event) are followed for every hop;
    another value for a statement's subject is looked up only for the delivered passages
    and those reached from them through document links (what stands in their place, what
    ends their condition). A passage found because it states another value is evidence
    against a delivered one; its own statements' other values are about other questions
    (a chain of "same unit, a shared word" hops reaches the whole corpus), so they are not
    followed, while its document links are (it may itself be superseded)."""
    from quarry.core.index.rows import unpack_row

    g = graph_of(index)
    masks = index.masks(principal, None, valid_at)
    seen: set[int] = set()
    frontier: dict[int, bool] = {}  # row -> whether its statements' other values are looked up
    for pid in delivered:
        r = index.row_of(pid)
        if r is not None and r not in seen:
            seen.add(r)
            frontier[r] = True
    added: list[int] = []
    for _ in range(hops):
        nxt: dict[int, bool] = {}
        for r in sorted(frontier):
            for n, how in g.linked_rows(r, statements=frontier[r]):
                if n in nxt:
                    nxt[n] = nxt[n] or (how == "link" and frontier[r])
                    continue
                if n in seen:
                    continue
                seen.add(n)
                si, rr = unpack_row(n)
                if not masks[si][rr]:
                    continue
                nxt[n] = how == "link" and frontier[r]
        order = sorted(nxt)
        room = limit - len(added)
        added += order[:room]
        if len(added) >= limit or not order:
            break
        frontier = {r: nxt[r] for r in order[:room]}
    return [index.shards[unpack_row(r)[0]].passage_ids[unpack_row(r)[1]] for r in added]


def facts_for(index, passage_ids: Iterable[str]) -> dict[str, PassageFacts]:
    """Stored facts of these passages (ids the caller may read)."""
    g = graph_of(index)
    out = {}
    for pid in passage_ids:
        r = index.row_of(pid)
        if r is not None and r in g.facts:
            out[pid] = g.facts[r]
    return out
