"""Run state for the bounded search loop (DESIGN §5, seed 003 "The bounded search loop").

A run is one agent task. It carries a search budget (3 by default), the passage ids its
searches returned, and whether searching has ended. Everything here is pure: the serving
layer keeps states in one store and applies these functions inside a single atomic
operation, so the rules cannot be raced or reset by a client.

Rules:

- **Budget.** At most ``budget`` searches. A search is *reserved* (counted) before it runs,
  so a request that fails or is replayed still spends its slot.
- **New evidence.** A search whose results add no passage id the run has not seen ends the
  budget at once. The first search is exempt: an empty first result is information and
  the agent gets one chance to rewrite the query (seed 003's loop applies the rule only to
  searches after the first; seed 004's "pet insurance" agent reformulates once).
- **One exit.** ``submit_answer`` finishes the run; nothing is accepted after it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, ConfigDict

from quarry.core.records import Principal

DEFAULT_BUDGET = 3


class RunState(BaseModel):
    model_config = ConfigDict(frozen=True)

    run_id: str
    principal_key: str
    budget: int = DEFAULT_BUDGET
    used: int = 0
    seen_ids: frozenset[str] = frozenset()  # passage ids returned by this run's searches
    exhausted: bool = False  # no further search allowed
    fetched_ids: frozenset[str] = frozenset()  # ids read through fetch (ACL-checked, so citable)
    rejected_ids: frozenset[str] = frozenset()  # ids this run's evidence resolution rejected (citation check 5)
    finished: bool = False  # submit_answer (or a search past the budget) ended the run
    outcome: str | None = None  # "answered" or an abstention reason code

    @property
    def searches_left(self) -> int:
        return 0 if self.exhausted or self.finished else max(0, self.budget - self.used)

    @property
    def retrieved_ids(self) -> frozenset[str]:
        """Ids retrieved for this principal in this run: what citation check 1 accepts."""
        return self.seen_ids | self.fetched_ids


class BudgetExhausted(Exception):
    """A search was attempted with no budget left."""


def groups_hash(groups: Iterable[str]) -> str:
    # Sorted and NUL-joined so {a,b} and {b,a} agree and "a,b" cannot collide with ["a,b"].
    return hashlib.sha256("\0".join(sorted(set(groups))).encode()).hexdigest()[:16]


def principal_key(principal: Principal) -> str:
    """Binds a run to who created it: tenant, subject and the exact group set. A token
    for the same subject with different groups is a different principal, because the
    run's retrieved ids were filtered by the old groups."""
    return f"{principal.tenant}/{principal.subject}/{groups_hash(principal.groups)}"


def new_run(run_id: str, principal: Principal, budget: int = DEFAULT_BUDGET) -> RunState:
    if budget < 1:
        raise ValueError("budget must be at least 1")
    return RunState(run_id=run_id, principal_key=principal_key(principal), budget=budget)


def reserve_search(state: RunState) -> RunState:
    """Count one search before it runs. Raises ``BudgetExhausted`` when none is left."""
    if state.searches_left <= 0:
        raise BudgetExhausted(state.run_id)
    used = state.used + 1
    return state.model_copy(update={"used": used, "exhausted": used >= state.budget})


def record_results(
    state: RunState, returned_ids: Iterable[str], *, first_search_exempt: bool = True,
    rejected_ids: Iterable[str] = (),
) -> tuple[RunState, frozenset[str]]:
    """Apply a reserved search's results: add new ids, remember what resolution rejected,
    and apply the new-evidence rule."""
    returned = frozenset(returned_ids)
    new_ids = returned - state.seen_ids
    exhausted = state.exhausted or state.used >= state.budget
    if not new_ids and not (first_search_exempt and state.used <= 1):
        exhausted = True
    return state.model_copy(update={"seen_ids": state.seen_ids | returned, "exhausted": exhausted,
                                    "rejected_ids": state.rejected_ids | frozenset(rejected_ids)}), new_ids


def apply_search(
    state: RunState, returned_ids: Iterable[str], *, first_search_exempt: bool = True,
    rejected_ids: Iterable[str] = (),
) -> tuple[RunState, frozenset[str]]:
    """Reserve and record in one step (for callers whose search already ran)."""
    return record_results(reserve_search(state), returned_ids, first_search_exempt=first_search_exempt,
                          rejected_ids=rejected_ids)


def record_fetch(state: RunState, ids: Iterable[str], rejected_ids: Iterable[str] = ()) -> RunState:
    """A fetch adds what it returned, and what the fetched passages' own resolution
    rejected (a superseded passage fetched by id is still never citable)."""
    return state.model_copy(update={"fetched_ids": state.fetched_ids | frozenset(ids),
                                    "rejected_ids": state.rejected_ids | frozenset(rejected_ids)})


def finish(state: RunState, outcome: str) -> RunState:
    return state.model_copy(update={"finished": True, "exhausted": True, "outcome": outcome})


# -- store decisions --------------------------------------------------------------------
# Each run-store backend (the in-cluster actor, Redis) loads one RunState, applies one of
# these functions and writes the new state back in one atomic step. The rules therefore
# live once, here; a backend only supplies atomicity and durability.


class RunView(BaseModel):
    """What a caller may learn about its own run (never the ids it saw)."""

    model_config = ConfigDict(frozen=True)

    run_id: str
    budget: int
    used: int
    searches_left: int
    finished: bool
    outcome: str | None = None
    seen: int = 0


class SearchDecision(BaseModel):
    """The result of spending (or trying to spend) one search on a run."""

    model_config = ConfigDict(frozen=True)

    view: RunView
    allowed: bool
    newly_finished: bool = False  # this refusal ended the run (budget_exhausted)
    new_ids: tuple[str, ...] = ()


class AnswerStart(BaseModel):
    model_config = ConfigDict(frozen=True)

    view: RunView
    allowed: bool
    retrieved_ids: tuple[str, ...] = ()
    rejected_ids: tuple[str, ...] = ()  # what this run's evidence resolution rejected (citation check 5)


def view(state: RunState) -> RunView:
    return RunView(run_id=state.run_id, budget=state.budget, used=state.used, searches_left=state.searches_left,
                   finished=state.finished, outcome=state.outcome, seen=len(state.seen_ids))


def _refuse(state: RunState) -> tuple[RunState | None, SearchDecision]:
    # A search past the budget finishes the run with budget_exhausted (the agent used a
    # tool it no longer had); only the first refusal changes the state.
    if state.finished:
        return None, SearchDecision(view=view(state), allowed=False)
    done = finish(state, "budget_exhausted")
    return done, SearchDecision(view=view(done), allowed=False, newly_finished=True)


def decide_reserve(state: RunState) -> tuple[RunState | None, SearchDecision]:
    """Spend one slot before the search runs. Returns (state to store or None, decision)."""
    try:
        s = reserve_search(state)
    except BudgetExhausted:
        return _refuse(state)
    return s, SearchDecision(view=view(s), allowed=True)


def decide_record(state: RunState, ids: Iterable[str], rejected_ids: Iterable[str] = ()
                  ) -> tuple[RunState | None, SearchDecision]:
    """Apply a reserved search's delivered ids (the second half of ``decide_reserve``)."""
    s, new = record_results(state, ids, rejected_ids=rejected_ids)
    return s, SearchDecision(view=view(s), allowed=True, new_ids=tuple(sorted(new)))


def decide_search(state: RunState, ids: Iterable[str], rejected_ids: Iterable[str] = ()
                  ) -> tuple[RunState | None, SearchDecision]:
    """Reserve and record in one decision, after the search ran: the one-round-trip path.
    A refused search's results are never delivered, so the budget holds exactly as with a
    reservation made beforehand; only the (bounded) work of the refused search is spent."""
    try:
        s, new = apply_search(state, ids, rejected_ids=rejected_ids)
    except BudgetExhausted:
        return _refuse(state)
    return s, SearchDecision(view=view(s), allowed=True, new_ids=tuple(sorted(new)))


def decide_fetch(state: RunState, ids: Iterable[str], rejected_ids: Iterable[str] = ()
                 ) -> tuple[RunState | None, RunView]:
    if state.finished:
        return None, view(state)
    s = record_fetch(state, ids, rejected_ids)
    return s, view(s)


def decide_begin_answer(state: RunState) -> tuple[RunState | None, AnswerStart]:
    """Claim the one exit. Marking the run finished here (not after the checks) makes two
    concurrent submits on two replicas unable to both pass."""
    if state.finished:
        return None, AnswerStart(view=view(state), allowed=False)
    return finish(state, "pending"), AnswerStart(view=view(state), allowed=True,
                                                 retrieved_ids=tuple(sorted(state.retrieved_ids)),
                                                 rejected_ids=tuple(sorted(state.rejected_ids)))


def decide_end_answer(state: RunState, outcome: str) -> tuple[RunState | None, RunView]:
    s = finish(state, outcome)
    return s, view(s)


def tenant_of(pkey: str) -> str:
    """The tenant part of a principal key (tenant names cannot contain '/')."""
    return pkey.split("/", 1)[0]


def subject_of(pkey: str) -> str:
    """``tenant/subject`` of a principal key: per-subject quotas ignore the group set."""
    return pkey.rsplit("/", 1)[0]


# --------------------------------------------------------------------------- purge


def names_document(value: Any, doc_id: str, version: str | None = None) -> bool:
    """Whether a JSON value holds the document's id or an id built from it, at any depth:
    ``doc``, ``doc@version``, ``doc#anchor``, ``doc@version#anchor`` (with ``version``: only
    ids of that version, and records with that ``doc_id`` and ``version``)."""
    if isinstance(value, str):
        if version is None:
            return value == doc_id or value.startswith((f"{doc_id}@", f"{doc_id}#"))
        key = f"{doc_id}@{version}"
        return value == key or value.startswith(f"{key}#")
    if isinstance(value, dict):
        if version is not None and value.get("doc_id") == doc_id and value.get("version") == version:
            return True
        if version is None and value.get("doc_id") == doc_id:
            return True
        return any(names_document(v, doc_id, version) for v in value.values())
    if isinstance(value, list):
        return any(names_document(v, doc_id, version) for v in value)
    return False


def without_document(state: RunState, doc_id: str, version: str | None = None) -> RunState:
    """``state`` with every id naming the document (``names_document``) removed: what a purge
    leaves of a run that saw, fetched or rejected it."""
    def keep(ids: frozenset[str]) -> frozenset[str]:
        return frozenset(i for i in ids if not names_document(i, doc_id, version))

    return state.model_copy(update={"seen_ids": keep(state.seen_ids), "fetched_ids": keep(state.fetched_ids),
                                    "rejected_ids": keep(state.rejected_ids)})
