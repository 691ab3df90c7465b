"""The learned second stage carried over to a newly built generation (a build, a compaction),
so publishing never silently drops a ranker the gate had promoted.

When the live generation serves a learned ranker, :func:`carry_over` copies its stored files
(``gen-<old>/ranker/``, except the per-generation sentence-vector cache) to the new
generation and re-runs the promotion gate there (:func:`quarry.core.rank.train.regate`: the
stored labelled queries, the same seeded split, candidates mined from the new generation).
The decision is recorded in the new generation's manifest with a reason that says where the
ranker came from: "carried over from gen-3, re-gated: ..." when it still beats the fused
order, "carried over from gen-3, dropped on re-gate: ..." when it does not (or when it
cannot be re-gated). Called before the new generation is published, so ``publish`` copies
the decision into the tenant's manifest with everything else.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import tempfile
from pathlib import Path

from quarry.core.embed.factory import build_embedder, embedder_for_index
from quarry.core.index import layout
from quarry.core.index.manifest import SecondStageDecision, record_second_stage
from quarry.core.rank.gate import LABELS, RANKER_DIR, SENTENCE_CACHE, read_decision, ranker_dir
from quarry.core.rank.model import LearnedRanker
from quarry.core.rank.sentence_vectors import SentenceVectors
from quarry.core.rank.train import TrainSettings, regate
from quarry.core.records import PUBLIC_GROUP, Principal
from quarry.core.search.settings import SearchSettings


def _record(root: str, tenant: str, generation: int, prev: SecondStageDecision, enabled: bool, reason: str,
            metrics=None, files=None, report=None) -> SecondStageDecision:
    """The previous decision's identity (kind, model, features) with this generation's verdict."""
    rec = {k: v for k, v in prev.to_json().items() if k not in ("generation", "files", "path", "report")}
    rec.update(enabled=enabled, reason=reason, decided_at=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"))
    if metrics is not None:
        rec["metrics"] = metrics
    if files:
        rec.update(files=files, path=RANKER_DIR)
    if report is not None:
        rec["report"] = report
    decision = SecondStageDecision.model_validate(rec)
    record_second_stage(root, tenant, generation, decision)
    return decision.model_copy(update={"generation": generation})


def carry_over(root: str, tenant: str, from_generation: int | None, to_generation: int,
               cache_dir: str | None = None) -> SecondStageDecision | None:
    """Carry ``from_generation``'s enabled learned ranker to ``to_generation`` (built, not yet
    published) and re-gate it there. Returns the decision recorded, or None when there was
    nothing to carry (no previous generation, or it served no learned ranker)."""
    if from_generation is None or from_generation == to_generation:
        return None
    prev = read_decision(root, tenant, from_generation)
    if not prev.enabled or prev.kind != "learned":
        return None
    origin = f"carried over from gen-{from_generation}"
    src = ranker_dir(root, tenant, from_generation)
    try:
        local = Path(layout.fetch_dir(src, cache_dir or tempfile.gettempdir()))
        model = (local / "model.txt").read_bytes()
        labels = json.loads((local / LABELS).read_text())
    except (FileNotFoundError, OSError, ValueError) as e:
        return _record(root, tenant, to_generation, prev, False,
                       f"{origin}, dropped on re-gate: no stored labels or model to re-gate with ({type(e).__name__})")
    if hashlib.sha256(model).hexdigest() != prev.model_id:
        return _record(root, tenant, to_generation, prev, False,
                       f"{origin}, dropped on re-gate: stored ranker does not match the recorded model_id")
    from quarry.core.index.shards import TenantIndex  # the index is loaded only when there is a ranker to re-gate

    index = TenantIndex.load(root, tenant, to_generation, cache_dir=cache_dir, with_changes=False)
    embedder = embedder_for_index(index.manifest)
    sentence = SentenceVectors(build_embedder("default")) if prev.sentence_features else None
    ranker = LearnedRanker.load(local, sentence=sentence)
    groups = labels.get("groups")
    if groups is None:
        gs = frozenset(g for sh in index.shards for g in sh.filters.groups)
    else:
        gs = frozenset(g.strip() for g in groups.split(",") if g.strip() and g.strip() != PUBLIC_GROUP)
    w = int(labels.get("width", 50))
    ts = TrainSettings(holdout=float(labels["holdout"]), seed=int(labels["seed"]), margin=float(labels["margin"]),
                       reference_date=ranker.reference_date)
    decision, report = regate(index, ranker, Principal(tenant=tenant, subject="carry-over", groups=gs), embedder,
                              labels["queries"], {q: {k: int(v) for k, v in g.items()} for q, g in labels["qrels"].items()},
                              SearchSettings(lexical_width=w, dense_width=w, candidate_width=w), ts)
    dest = ranker_dir(root, tenant, to_generation)
    files = {}
    names = sorted(p.name for p in local.iterdir() if p.is_file() and p.name not in (SENTENCE_CACHE, ".complete"))
    for name in [n for n in names if n != "model.txt"] + ["model.txt"]:  # model.txt last, as record_decision
        data = (local / name).read_bytes()
        layout.write_atomic(layout.join(dest, name), data)
        files[name] = hashlib.sha256(data).hexdigest()
    verdict = "re-gated" if decision.enabled else "dropped on re-gate"
    return _record(root, tenant, to_generation, prev, decision.enabled, f"{origin}, {verdict}: {decision.reason}",
                   metrics=decision.metrics, files=files,
                   report={"carried_over_from": from_generation, **report})
