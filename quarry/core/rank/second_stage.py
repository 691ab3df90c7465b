"""Which second stage serves a (tenant, generation), and the passages it scores (DESIGN §4
step 5, §6). The Reranker deployment caches these choices and batches the cross-encoder;
the policy lives here:

1. the learned ranker that tenant's promotion gate enabled (``quarry.core.rank.gate``; the
   model's sha256 must match the recorded decision), when learned rankers are on;
2. otherwise the configured cross-encoder, unless the gate recorded a cross-encoder
   decision that said no;
3. otherwise nothing: the fused order stands and the stage info says why.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from quarry.core.index.manifest import SecondStageDecision
from quarry.core.index.shards import TenantIndex
from quarry.core.rank.gate import load_second_stage, read_decision
from quarry.core.records import Candidate, Passage
from quarry.core.rank.rerank import RerankInput
from quarry.core.search.records import StageInfo

log = logging.getLogger("quarry.core.rank.second_stage")

_CHANGE_FIELDS = ("enabled", "model_id", "decided_at", "kind")


@dataclass(frozen=True)
class SecondStageChoice:
    kind: Literal["learned", "cross-encoder"] | None
    info: StageInfo
    ranker: Callable[..., Any] | None = None  # the learned ranker when kind == "learned"


def _recorded(index_root: str, tenant: str, gen: int) -> SecondStageDecision:
    try:
        return read_decision(index_root, tenant, gen)
    except Exception as e:  # noqa: BLE001 - an unreadable manifest must not fail searches
        log.exception("reading the gate decision of %s gen %s failed", tenant, gen)
        return SecondStageDecision(enabled=False, reason=f"gate decision unreadable ({type(e).__name__})")


def choose_second_stage(index_root: str, tenant: str, gen: int, *, cross_encoder: str | None,
                        learned_enabled: bool) -> SecondStageChoice:
    """The policy above for one generation. ``cross_encoder``: the configured
    cross-encoder's name, or None when there is none."""
    recorded = _recorded(index_root, tenant, gen)
    base: dict[str, Any] = {"generation": gen, "gate": recorded.summary()}
    kind = recorded.kind if recorded.decided_at else None
    if kind == "cross-encoder":
        if recorded.enabled and cross_encoder is not None:
            return SecondStageChoice("cross-encoder", StageInfo(
                **base, kind="cross-encoder", enabled=True, name=cross_encoder, reason=recorded.reason,
                model_id=recorded.model_id or cross_encoder))
        why = recorded.reason if not recorded.enabled else "no cross-encoder configured"
        return SecondStageChoice(None, StageInfo(**base, kind=None, enabled=False, reason=why))
    if learned_enabled and recorded.enabled:
        try:
            fn, decision = load_second_stage(index_root, tenant, gen)
        except Exception as e:  # noqa: BLE001 - a broken model degrades to the next stage
            log.exception("loading the learned ranker of %s gen %s failed", tenant, gen)
            fn, decision = None, recorded.refused(f"loading the learned ranker failed ({type(e).__name__})")
        base["gate"] = decision.summary()
        if fn is not None:
            mid = decision.model_id or ""
            return SecondStageChoice("learned", StageInfo(
                **base, kind="learned", enabled=True, name=f"learned:{mid[:12]}", reason=decision.reason,
                metrics=decision.metrics, model_id=mid), ranker=fn)
        recorded = decision
    if cross_encoder is not None:
        return SecondStageChoice("cross-encoder", StageInfo(
            **base, kind="cross-encoder", enabled=True, name=cross_encoder, model_id=cross_encoder,
            reason="configured cross-encoder (reranker_factory); no gate-promoted learned ranker"))
    why = recorded.reason or "no second stage configured"
    if recorded.enabled and not learned_enabled:
        why = "learned rankers are switched off in this deployment (learned_ranker: false)"
    return SecondStageChoice(None, StageInfo(**base, kind=None, enabled=False, reason=why))


def decision_changed(index_root: str, tenant: str, gen: int, info: StageInfo) -> bool:
    """Whether the recorded gate decision differs from the one ``info`` was chosen under
    (a ranker promoted or demoted for a live generation). An unreadable decision is no
    change: keep serving what was chosen."""
    try:
        now = read_decision(index_root, tenant, gen).summary()
    except Exception:  # noqa: BLE001
        return False
    was = info.gate or {}
    return any(now.get(k) != was.get(k) for k in _CHANGE_FIELDS)


def stage_trace(info: StageInfo) -> dict[str, Any]:
    """Stage info as recorded in traces and /healthz: kind, enabled, why, gate metrics, model id."""
    gate = info.gate or {}
    return {
        "kind": info.kind, "enabled": info.enabled, "name": info.name,
        "reason": info.reason, "model_id": info.model_id or gate.get("model_id"),
        "metrics": info.metrics or gate.get("metrics"), "generation": info.generation,
        "gate": {k: gate.get(k) for k in ("kind", "enabled", "reason", "model_id", "decided_at") if k in gate} or None,
    }



def candidate_passages(index: TenantIndex, candidates: Sequence[Candidate]) -> list[Passage]:
    """The passages of first-stage candidates, read by row from the generation they came
    from; a row that holds another passage (another generation) is an error, never text
    ranked under the wrong id."""
    passages = [index.passage_at(c.row) for c in candidates]
    for c, p in zip(candidates, passages):
        if c.passage_id != p.passage_id:
            raise ValueError(f"candidate {c.passage_id!r} does not match row {c.row} of {index.tenant} "
                             f"gen {index.generation}")
    return passages


def rerank_inputs(passages: Sequence[Passage]) -> list[RerankInput]:
    """What a cross-encoder scores for each passage: id, title, heading path, chunk text."""
    return [RerankInput(p.passage_id, p.envelope.title, tuple(p.heading_path), p.text) for p in passages]
