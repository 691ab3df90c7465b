"""The resolver's rules that reject a passage on its own record: effective dates,
supersession and stopping conditions (rules 1-3 of :mod:`.resolve`), applied in that order
to a :class:`ResolutionState` that collects the rejections and why each winner governs.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from quarry.core.evidence.conditions import Terms, condition_met, entity_stems, event_terms, terms
from quarry.core.evidence.graph import best_passage, doc_key, event_cue, heading_words, passage_cue
from quarry.core.evidence.titles import names_title
from quarry.core.records import DEFAULT_AUTHORITY, Envelope, Event, Passage, RejectReason
from quarry.core.text.rule_dates import sentence_starts
from quarry.core.text.tokenizer import identifiers, tokenize

__all__ = ["Rejection", "ResolutionState", "rank_of", "effective_dates", "later_rules", "start_of",
           "stopping_conditions", "supersession"]


@dataclass
class Rejection:
    """Why a passage is out: the reason code, the passage that defeated it, ids-only detail."""

    reason: RejectReason
    by: str | None
    detail: str


@dataclass
class ResolutionState:
    """One resolution in progress: the readable passages, their authority ranks, and what
    the rules have rejected so far (and why each defeating passage governs)."""

    day: dt.date
    rank: Mapping[str, int]
    by_id: dict[str, Passage]
    rejected: dict[str, Rejection] = field(default_factory=dict)
    governs: dict[str, set[str]] = field(default_factory=dict)  # passage id -> reasons it governs
    on_tier: set[str] | None = None  # the passages on the question (its tier), when there is a question

    def reject(self, pid: str, reason: RejectReason, by: str | None, detail: str, note: str | None = None) -> None:
        self.rejected[pid] = Rejection(reason, by, detail)
        if by is not None and note:
            self.governs.setdefault(by, set()).add(note)


def _version_key(v: str) -> tuple:
    """Natural order of versions: "2" < "10", "v2.1" < "v2.10"."""
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in re.findall(r"\d+|[^\d.]+", v))


def start_of(env: Envelope) -> dt.date | None:
    """When a record is known to have started: ``effective_from``, else ``published_at``."""
    return env.effective_from or env.published_at


def outside_dates(env: Envelope, day: dt.date) -> bool:
    """Whether ``day`` falls before ``effective_from`` or after ``effective_to`` (the bounds the
    ``valid_at`` filter masks by)."""
    return (env.effective_from is not None and env.effective_from > day) or (
        env.effective_to is not None and env.effective_to < day)


def rank_of(env: Envelope, table: Mapping[str, int] | None) -> int:
    """The record's authority under ``table`` (None: the default table, else its own rank)."""
    if table is None:
        return DEFAULT_AUTHORITY.get(env.authority, env.authority_rank)
    return table.get(env.authority, table.get("unknown", 0))


def effective_dates(st: ResolutionState) -> None:
    versions: dict[str, list[str]] = {}
    for p in st.by_id.values():
        versions.setdefault(p.envelope.doc_id, []).append(p.envelope.version)
    for pid, p in st.by_id.items():
        e = p.envelope
        replaces = bool(e.supersedes or e.supersedes_titles) or any(
            _version_key(v) < _version_key(e.version) for v in versions[e.doc_id])
        if e.effective_from is not None and e.effective_from > st.day:
            st.reject(pid, "not_yet_effective", None,
                      f"effective_from {e.effective_from.isoformat()} is after valid_at {st.day.isoformat()}")
        elif e.effective_from is None and e.published_at is not None and e.published_at > st.day:
            # a record published after valid_at, stating no start of its own, did not exist then
            # (a replacement was not yet in force; a notice that a merger completed was not yet written)
            st.reject(pid, "not_yet_effective", None,
                      f"published_at {e.published_at.isoformat()} is after valid_at {st.day.isoformat()}"
                      + (" and it replaces another document" if replaces else ""))
        elif e.effective_to is not None and e.effective_to < st.day:
            st.reject(pid, "no_longer_effective", None,
                      f"effective_to {e.effective_to.isoformat()} is before valid_at {st.day.isoformat()}")


MIN_ON_RULE = 2  # words of the question a sentence must hold to be what the question asks about


def later_rules(st: ResolutionState, asked: frozenset[str]) -> None:
    """Rule 1 for one question: a passage in force whose sentences on the question (those
    holding the most of ``asked``, the question's content stems, and at least
    :data:`MIN_ON_RULE`) all state a rule whose own date, fronting its paragraph, is after
    ``valid_at`` is ``not_yet_effective`` for it (:mod:`quarry.core.text.rule_dates`). A
    memo that moves the mowing start to 06:30 from 1 April, and has the fuel store checked
    from now on, does not answer "can we mow at 06:30?" in March; it answers "when is the
    store checked?". Sentences saying what stays as it is take no part."""
    for pid, p in sorted(st.by_id.items()):
        if pid in st.rejected:
            continue
        marked = [(len(asked & frozenset(tokenize(s.sentence))), s) for s in sentence_starts(p.text, tenant=p.tenant)
                  if s.kind != "stays"]
        best = max((n for n, _ in marked), default=0)
        if best < MIN_ON_RULE:
            continue
        top = [s for n, s in marked if n == best]
        if all(s.kind == "dated" and s.start is not None and s.start > st.day for s in top):
            start = min(s.start for s in top)
            st.reject(pid, "not_yet_effective", None, f"the rule it states on the question starts {start.isoformat()}, "
                      f"after valid_at {st.day.isoformat()}")


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
    if newer.doc_id != older.doc_id and any(names_title(t, older.title) for t in newer.supersedes_titles):
        return "link"  # named by its title in the newer one's text
    return None


def supersession(st: ResolutionState, by_doc: dict[str, list[Passage]]) -> None:
    envs = {k: ps[0].envelope for k, ps in by_doc.items()}
    for old_key, old in sorted(envs.items()):
        if old.effective_from is not None and old.effective_from > st.day:
            continue  # not yet effective: nothing to supersede
        winners = []
        for new_key, new in sorted(envs.items()):
            how = _supersedes(new, old)
            if how is None or outside_dates(new, st.day):
                continue
            start = start_of(new)
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
            by = best_passage(by_doc[new_key], passage_cue(p), heading_words(p))
            since = f" in force from {start.isoformat()}" if start != dt.date.min else ""
            detail = (f"{'later version ' if how == 'version' else ''}{new_key}{since} supersedes {old_key}"
                      + (f"; effective_to {old.effective_to.isoformat()}" if expired else ""))
            st.reject(p.passage_id, "superseded_by", by, detail, f"supersedes {old_key}")


def stopping_conditions(st: ResolutionState, by_doc: dict[str, list[Passage]]) -> None:
    envs = {k: ps[0].envelope for k, ps in by_doc.items()}
    known = entity_stems(e for env in envs.values() for e in env.entities)
    # Events count only from records that survived dates and supersession.
    events: list[tuple[dt.date, str, Event, Terms]] = []
    for key, env in sorted(envs.items()):
        if all(p.passage_id in st.rejected for p in by_doc[key]):
            continue
        for ev in env.events:
            if ev.on <= st.day:
                events.append((ev.on, key, ev, event_terms(ev.what, env.title, len(env.events) == 1, known)))
    events.sort(key=lambda t: (t[0], t[1], t[2].what))
    for key, env in sorted(envs.items()):
        if not env.condition:
            continue
        cond = terms(env.condition, known)
        # the identifiers its text names ("recall R-26-0117"): an event naming one is about that thing
        linked = frozenset(i for p in by_doc[key] for i in identifiers(tokenize(p.text))
                           if any(c.isdigit() for c in i)) | cond.identifiers
        start = start_of(env)
        for on, ev_key, ev, ev_terms in events:
            if ev_key == key or (start is not None and on < start):
                continue  # an event before the condition was stated is not its stopping event
            if not condition_met(cond, env.entities, ev_terms, envs[ev_key].entities, linked):
                continue
            bearers = [p for p in by_doc[ev_key] if p.passage_id not in st.rejected]
            by = best_passage(bearers, event_cue(ev_terms, on))
            for p in by_doc[key]:
                if p.passage_id not in st.rejected:
                    st.reject(p.passage_id, "condition_ended", by,
                              f"stopping event recorded in {ev_key} on {on.isoformat()}, on or before valid_at "
                              f"{st.day.isoformat()}", f"proves the stopping event of {key} ({on.isoformat()})")
            break
