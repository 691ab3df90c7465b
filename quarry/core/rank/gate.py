"""The promotion gate for second stages (DESIGN §4 step 5, §8).

A second stage (the learned ranker, or a cross-encoder) is enabled for a tenant only when,
on that tenant's held-out split, its nDCG@10 beats the fused order's by at least
``margin``. Otherwise the fused order is served. The decision, its numbers and the model's
identity (sha256 of the model file) are recorded in the tenant's manifests:

    <root>/<tenant>/gen-<n>/ranker/model.txt       the LightGBM text model
    <root>/<tenant>/gen-<n>/ranker/ranker.json     metadata: features, version, training report
    <root>/<tenant>/gen-<n>/ranker/sentences.npz   optional sentence-vector cache (this generation)
    <root>/<tenant>/gen-<n>/ranker/labels.json     the labelled queries and split it was gated on
                                                   (the gate re-runs on them when a new generation
                                                   is published: quarry.core.rank.carry_over)
    <root>/<tenant>/gen-<n>/manifest.json          "second_stage": the decision
    <root>/<tenant>/manifest.json                  the same, when gen-<n> is the live generation

:func:`load_second_stage` is what serving calls: it returns a ``SecondStage`` only when the
recorded decision enabled it and the stored model's sha256 matches the recorded identity.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from quarry.core.embed.factory import build_embedder
from quarry.core.index import layout
from quarry.core.index.manifest import SecondStageDecision, read_manifest, record_second_stage
from quarry.core.rank.model import LearnedRanker
from quarry.core.rank.sentence_vectors import SentenceVectors

if TYPE_CHECKING:  # pragma: no cover
    from quarry.core.embed.embedders import Embedder
    from quarry.core.search.survivors import SecondStage

__all__ = ["DEFAULT_MARGIN", "GateDecision", "check_margin", "evaluate_gate", "ranker_dir", "record_decision",
           "read_decision", "load_second_stage"]

DEFAULT_MARGIN = 0.005  # nDCG@10 points a stage must gain on the held-out split
RANKER_DIR = "ranker"
SENTENCE_CACHE = "sentences.npz"
LABELS = "labels.json"  # the labelled queries and split settings the ranker was gated with
SERVE_MAX_PASSAGES = 200_000  # sentence-vector cache bound in a serving replica (~3 GB at 10 x 384-d)


@dataclass(frozen=True)
class GateDecision:
    enabled: bool
    reason: str
    metrics: dict[str, Any] = field(default_factory=dict)
    model_id: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"enabled": self.enabled, "reason": self.reason, "metrics": dict(self.metrics),
                "model_id": self.model_id}


def check_margin(margin: float) -> None:
    """A gate margin is a finite number >= 0: a negative margin would let a losing stage through."""
    if not (isinstance(margin, (int, float)) and math.isfinite(margin) and margin >= 0):
        raise ValueError(f"margin must be a finite number >= 0, got {margin!r}")


def evaluate_gate(
    fused_ndcg: float,
    stage_ndcg: float,
    margin: float = DEFAULT_MARGIN,
    *,
    model_id: str | None = None,
    n_queries: int | None = None,
    reason: str | None = None,
    extra: dict[str, Any] | None = None,
) -> GateDecision:
    """Enable a stage only if ``stage_ndcg >= fused_ndcg + margin`` and it strictly wins.

    ``margin`` must be >= 0: a negative margin would let a losing stage through. NaN
    numbers or zero held-out queries never enable (``reason`` then says why; a caller may
    pass its own ``reason`` for the no-evidence case).
    """
    check_margin(margin)
    metrics: dict[str, Any] = {
        "metric": "ndcg@10",
        "fused": None if math.isnan(fused_ndcg) else round(float(fused_ndcg), 6),
        "stage": None if math.isnan(stage_ndcg) else round(float(stage_ndcg), 6),
        "delta": None if math.isnan(fused_ndcg) or math.isnan(stage_ndcg) else round(float(stage_ndcg - fused_ndcg), 6),
        "margin": float(margin),
        "heldout_queries": n_queries,
        **(extra or {}),
    }
    if math.isnan(fused_ndcg) or math.isnan(stage_ndcg):
        return GateDecision(False, reason or "no held-out evaluation: the fused order stands", metrics, model_id)
    if n_queries is not None and n_queries <= 0:
        return GateDecision(False, reason or "no held-out queries: the fused order stands", metrics, model_id)
    delta = stage_ndcg - fused_ndcg
    if delta > 0 and delta >= margin - 1e-12:
        return GateDecision(True, f"stage nDCG@10 {stage_ndcg:.4f} beats fused {fused_ndcg:.4f} by "
                                  f"{delta:+.4f} >= margin {margin}", metrics, model_id)
    return GateDecision(False, f"stage nDCG@10 {stage_ndcg:.4f} vs fused {fused_ndcg:.4f} ({delta:+.4f}) "
                               f"does not beat the margin {margin}: the fused order stands", metrics, model_id)


def ranker_dir(root: str, tenant: str, generation: int) -> str:
    return layout.join(layout.generation_dir(root, tenant, generation), RANKER_DIR)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def record_decision(
    root: str,
    tenant: str,
    generation: int,
    decision: GateDecision,
    ranker: LearnedRanker | None = None,
    *,
    sentence_cache: SentenceVectors | None = None,
    kind: str = "learned",
    report: dict[str, Any] | None = None,
    labels: dict[str, Any] | None = None,
) -> SecondStageDecision:
    """Store ``ranker`` (if any) under ``gen-<n>/ranker/`` and write the decision into the
    generation's manifest and, when that generation is live, the tenant's manifest
    (``quarry.core.index.manifest.record_second_stage``).

    Each file is replaced atomically (layout.write_json / write_atomic). The model is
    written before the manifests name it, so a reader never sees a decision pointing at
    a missing model. Returns the decision recorded. Concurrent writers of the same
    manifest are not serialised (last writer wins): run one train-ranker per tenant.
    """
    if decision.enabled and ranker is None:
        raise ValueError("an enabled decision needs the model it enabled")
    record: dict[str, Any] = {
        "kind": kind,
        **decision.to_json(),
        "decided_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
    }
    if ranker is not None:
        if decision.model_id is not None and decision.model_id != ranker.model_id:
            raise ValueError("the decision names a different model than the one given")
        with tempfile.TemporaryDirectory(prefix="quarry-ranker-") as tmp:
            local = ranker.save(Path(tmp) / RANKER_DIR)
            if sentence_cache is not None and len(sentence_cache):
                sentence_cache.save(local / SENTENCE_CACHE)
            if labels is not None:  # what the gate can be re-run with on a later generation
                (local / LABELS).write_text(json.dumps(labels, sort_keys=True))
            dest = ranker_dir(root, tenant, generation)
            files = {}
            # model.txt last: its presence with a matching sha is what load_second_stage trusts.
            names = sorted(p.name for p in local.iterdir() if p.is_file())
            for name in [n for n in names if n != "model.txt"] + ["model.txt"]:
                data = (local / name).read_bytes()
                layout.write_atomic(layout.join(dest, name), data)
                files[name] = _sha256(data)
        record.update(model_id=ranker.model_id, path=RANKER_DIR, files=files,
                      feature_names=list(ranker.feature_names), sentence_features=ranker.uses_sentence)
    if report is not None:
        record["report"] = report
    recorded = SecondStageDecision.model_validate(record)
    record_second_stage(root, tenant, generation, recorded)
    return recorded


def read_decision(root: str, tenant: str, generation: int | None = None) -> SecondStageDecision:
    """The recorded second-stage decision of a generation (default: the live one), with
    the generation it was read from, or a 'nothing recorded' decision."""
    gen = generation if generation is not None else layout.current_generation(root, tenant)
    if gen is None:
        return SecondStageDecision(enabled=False, reason=f"no published index for tenant {tenant!r}", model_id=None)
    rec = read_manifest(root, tenant, gen).second_stage
    if rec is None:
        return SecondStageDecision(enabled=False, model_id=None, generation=gen,
                                   reason="no second stage recorded for this generation: the fused order stands")
    return rec.model_copy(update={"generation": gen})


def load_second_stage(
    root: str,
    tenant: str,
    generation: int | None = None,
    embedder: "Embedder | None" = None,
    cache_dir: str | None = None,
) -> tuple["SecondStage | None", SecondStageDecision]:
    """For serving: ``(second_stage, decision)``. ``second_stage`` is None when no decision
    was recorded, the gate said no, the stored model is missing, or its sha256 differs
    from the recorded ``model_id`` (the decision then says why; the fused order stands).

    A model with sentence features needs the embedder it was trained with (default: the
    packaged MiniLM, loaded lazily on first use); its cached sentence vectors are loaded
    from ``ranker/sentences.npz`` when present, and misses are embedded on the fly.
    """
    decision = read_decision(root, tenant, generation)
    if not decision.enabled:
        return None, decision
    if decision.kind != "learned":
        return None, decision.refused(f"second stage kind {decision.kind!r} is not loaded here: the fused order stands")
    src = layout.join(layout.generation_dir(root, tenant, decision.generation), decision.path or RANKER_DIR)
    try:
        local = layout.fetch_dir(src, cache_dir or tempfile.gettempdir())
        text = (Path(local) / "model.txt").read_bytes()
    except (FileNotFoundError, OSError) as e:
        return None, decision.refused(f"ranker model missing ({e}): the fused order stands")
    if _sha256(text) != decision.model_id:
        return None, decision.refused("stored ranker does not match the recorded model_id: the fused order stands")
    sentence = None
    if decision.sentence_features:
        if embedder is None:
            embedder = build_embedder("default")
        sentence = SentenceVectors(embedder, max_passages=SERVE_MAX_PASSAGES)
        sentence.load(Path(local) / SENTENCE_CACHE)
    ranker = LearnedRanker.load(local, sentence=sentence)
    return ranker.as_second_stage(), decision
