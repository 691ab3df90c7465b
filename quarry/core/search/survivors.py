"""The second stage as data (DESIGN §4): a ranker's output (ids, scores, ranks) applied to
the fused candidates, or the fused top-k when none ran. Which ranker serves a tenant is
``quarry.core.rank.second_stage``'s business; this module only applies its answer."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from quarry.core.records import Candidate, Passage, StageReport
from quarry.core.search.records import FirstStage, RankedCandidate, RerankOutcome, StageInfo, Survivors

# An in-process second stage: given the query and the fused candidates (with their
# passages), return the kept candidates reordered, each carrying rerank_score/rerank_rank.
# quarry.core.rank.model and quarry.core.rank.gate provide implementations; None keeps the fused order.
SecondStage = Callable[[str, Sequence[Candidate], Sequence[Passage], int], list[Candidate]]


def rerank_in_process(stage: SecondStage, query: str, candidates: Sequence[Candidate],
                      passages: Sequence[Passage], top_k: int, info: StageInfo | None = None) -> RerankOutcome:
    """Run an in-process second stage and return its output as the Reranker deployment does."""
    ranked = stage(query, candidates, passages, top_k)
    return RerankOutcome(status="applied", info=info or StageInfo(enabled=True, name=getattr(stage, "name", None)),
                         ranked=tuple(RankedCandidate(passage_id=c.passage_id, rerank_score=float(c.rerank_score),
                                                      rerank_rank=int(c.rerank_rank)) for c in ranked))


def _rerank_note(outcome: RerankOutcome | None) -> str:
    if outcome is None:
        return "skipped: fused order stands"
    if outcome.status == "applied":
        i = outcome.info
        note = " ".join(x for x in (i.kind, "second stage", i.name) if x)
        return note + (" (promoted by this index's gate)" if i.kind == "learned" else "")
    if outcome.status == "failed":
        return "skipped: the second stage was unavailable; fused order stands"
    return "skipped: no second stage is enabled for this index; fused order stands"


def apply_second_stage(first: FirstStage, outcome: RerankOutcome | None, top_k: int) -> Survivors:
    """Apply a second stage's ranked ids to the fused candidates. Without an applied stage
    the fused top-k survive. Relevance order only: resolution never reorders it."""
    cands = first.candidates
    if outcome is None or outcome.status != "applied":
        kept = tuple(c.passage_id for c in cands[:top_k])
        return Survivors(candidates=cands, survivors=kept, status=outcome.status if outcome else "skipped",
                         report=StageReport(name="rerank", kept=len(kept), dropped=len(cands) - len(kept),
                                            note=_rerank_note(outcome)))
    by_id = {c.passage_id: c for c in cands}
    unknown = [r.passage_id for r in outcome.ranked if r.passage_id not in by_id]
    if unknown:  # a stage may only reorder what the first stage let through
        raise ValueError(f"second stage returned {len(unknown)} id(s) that are not candidates, e.g. {unknown[0]!r}")
    for r in outcome.ranked:
        by_id[r.passage_id] = by_id[r.passage_id].model_copy(
            update={"rerank_score": r.rerank_score, "rerank_rank": r.rerank_rank})
    kept = tuple(r.passage_id for r in outcome.ranked[:top_k])
    return Survivors(candidates=tuple(by_id[c.passage_id] for c in cands), survivors=kept, status="applied",
                     report=StageReport(name="rerank", kept=len(kept), dropped=len(cands) - len(kept),
                                        note=_rerank_note(outcome)))
