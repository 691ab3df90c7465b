"""Scoring one run of a case: which passages an expected id names, the decision's verdict
for each, and what the decision got wrong against the case's expected resolution.

Ids match at document granularity: a document id matches any of its passages (any
version), a ``doc@version`` that version's, and an id with ``#`` names one passage. The
four boundaries a run is scored at are :data:`BOUNDARIES`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from quarry.core.records import SELECTED_VERDICTS, Decision, Verdict
from quarry.eval.case_model import EvidenceCase

__all__ = ["BOUNDARIES", "decision_verdicts", "doc_of", "holds_terms", "matches", "resolution_failures"]

BOUNDARIES: tuple[tuple[str, str, str], ...] = (
    ("candidates", "Minimum evidence enters candidate set", "query, source routing or first-stage recall"),
    ("second_stage", "Minimum evidence survives the second stage",
     "reranker discarded necessary evidence (without one: the fused top_k cut it)"),
    ("delivered", "Minimum evidence delivered in the final k", "expansion or the delivered-token ceiling cut it"),
    ("resolution", "Resolution correct", "evidence precedence: the wrong source governs"),
)


def doc_of(passage_id: str) -> str:
    """'{doc_id}@{version}#{anchor}' -> doc_id."""
    return passage_id.split("#", 1)[0].rsplit("@", 1)[0]


def matches(case_id: str, passage_id: str) -> bool:
    """A case id names a document (any version), a ``doc@version``, or one passage (with '#')."""
    if "#" in case_id:
        return case_id == passage_id
    if "@" in case_id:
        return passage_id.split("#", 1)[0] == case_id
    return doc_of(passage_id) == case_id


def decision_verdicts(decision: Decision) -> dict[str, Verdict]:
    """Every passage the decision names, with its verdict (the precedence of
    ``Decision.verdict``: rejected, unresolved, governing, supporting, related)."""
    out: dict[str, Verdict] = {}
    for r in decision.related:
        out[r.passage_id] = "related"
    for s in decision.supporting:
        out[s.passage_id] = "supporting"
    for s in decision.governing:
        out[s.passage_id] = "governing"
    for u in decision.unresolved:
        for p in u.passage_ids:
            out[p] = "unresolved"
    for r in decision.rejected:
        out[r.passage_id] = "rejected"
    return out


def _labels(decision: Decision, verdicts: dict[str, Verdict], want: str) -> list[str]:
    """The verdicts of the passages ``want`` names, for a failure line (a related passage
    the rules would reject reads ``related(outdated:REASON)``)."""
    outdated = {r.passage_id: r.outdated for r in decision.related if r.outdated is not None}
    return sorted({f"related(outdated:{outdated[p]})" if v == "related" and p in outdated else v
                   for p, v in verdicts.items() if matches(want, p)})


def resolution_failures(case: EvidenceCase, decision: Decision) -> list[str]:
    """What the decision got wrong against the case's expected resolution (empty = correct).

    Expected governing ids must be governing; expected selected ids governing or
    supporting; must-reject ids rejected (with an allowed code, by the named id);
    ``unresolved`` ids unresolved; ``not_selected`` ids rejected, unresolved, or related
    with an ``outdated`` reason (never citable). A plain related passage is neither
    selected nor rejected."""
    verdicts = decision_verdicts(decision)
    outdated = {r.passage_id for r in decision.related if r.outdated is not None}
    fails = []

    def got(want: str) -> str:
        return "/".join(_labels(decision, verdicts, want)) or "not delivered"

    for want in case.expected_governing:
        if not any(v == "governing" for p, v in verdicts.items() if matches(want, p)):
            fails.append(f"{want}: expected governing, got {got(want)}")
    # Cases written before the record named governing evidence (no governing: or selected:
    # field, the sample suite) meant by "selected" what the record then said: kept, neither
    # rejected nor unresolved. A related passage that is not outdated is kept in that sense.
    kept = SELECTED_VERDICTS if (case.governing is not None or case.selected is not None) else (
        SELECTED_VERDICTS | {"related"})
    for want in case.expected_selected:
        if not any(v in kept and p not in outdated for p, v in verdicts.items() if matches(want, p)):
            fails.append(f"{want}: expected selected, got {got(want)}")
    for must in case.rejected:
        hits = [r for r in decision.rejected if matches(must.id, r.passage_id)]
        ok = [r for r in hits if r.reason in must.reason and (must.by is None or (r.by and matches(must.by, r.by)))]
        if ok:
            continue
        if hits:
            fails.append(f"{must.id}: rejected as {hits[0].reason} by {hits[0].by}, expected "
                         f"{'/'.join(must.reason)}" + (f" by {must.by}" if must.by else ""))
        else:
            if not _labels(decision, verdicts, must.id) and not must.must_be_seen:
                continue
            fails.append(f"{must.id}: expected rejected ({'/'.join(must.reason)}), got {got(must.id)}")
    for want in case.unresolved:
        if not any(v == "unresolved" for p, v in verdicts.items() if matches(want, p)):
            fails.append(f"{want}: expected unresolved, got {got(want)}")
    for want in case.not_selected:
        mine = {p: v for p, v in verdicts.items() if matches(want, p)}
        denied = [p for p, v in mine.items() if v in ("rejected", "unresolved") or p in outdated]
        if not denied or any(v in SELECTED_VERDICTS for v in mine.values()):
            fails.append(f"{want}: expected rejected or unresolved, got {got(want)}")
    if case.nothing_unresolved and decision.unresolved:
        fails.append("expected nothing unresolved, got " + "; ".join(
            "/".join(u.passage_ids) for u in decision.unresolved))
    return fails


def holds_terms(text: str, terms: Sequence[str]) -> bool:
    """Every term occurs in ``text`` as a whole word (case-insensitive)."""
    return all(re.search(rf"(?<![\w-]){re.escape(t)}(?![\w-])", text, re.IGNORECASE) for t in terms)
