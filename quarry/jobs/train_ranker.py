"""``quarry train-ranker``: train a tenant's learned second stage from labels, gate it, store it.

    quarry train-ranker --index-root ROOT --tenant T --labels FILE [--queries queries.jsonl]
        [--split-seed 0] [--holdout 0.2] [--margin 0.005] [--width 50] [--groups G1,G2] [--json]

Labels are either

- BEIR qrels (TSV with header ``query-id corpus-id score``) with ``--queries`` pointing at a
  BEIR ``queries.jsonl``; or
- a JSONL of evidence cases, one per line: ``{"query": str, "relevant": [id, ...]}``
  (optional ``"id"``; ids are doc ids or passage ids; an optional ``"grades": {id: int}``
  overrides the default grade 1).

A candidate is relevant when its doc id (or passage id) is labelled. Candidates are mined
with Quarry's own first stage (mask, lexical and dense legs with floors, RRF; width
``--width``) as a principal of the tenant whose groups are ``--groups``; by default that is
**every group named in the generation's filter columns**, so the principal sees every
passage of the tenant (``--groups '*'`` mines only whole-tenant passages). Mining never
crosses tenants: the index is the tenant's own. Features use only each query's candidates
and their passages (:mod:`quarry.core.rank.features`); training is
:func:`quarry.core.rank.train.train_and_gate`, the same path ``quarry eval beir`` uses.

Labelled queries are split into train and held-out by ``--split-seed``; the ranker trains
on the train part; fused and learned nDCG@10 are compared on the held-out part; the gate
(:mod:`quarry.core.rank.gate`) enables the ranker only if it wins by ``--margin``. The model and
the decision are stored with the generation (``gen-<n>/ranker/``, ``second_stage`` in the
manifests) unless ``--no-store``.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
import time
from pathlib import Path
from typing import Any

from quarry.core.errors import UsageError
from quarry.core.embed.factory import build_embedder, embedder_for_index
from quarry.core.embed.embedders import SentenceTransformerEmbedder
from quarry.core.rank.gate import DEFAULT_MARGIN, record_decision
from quarry.core.index.shards import TenantIndex
from quarry.core.rank.train import TrainSettings, train_and_gate
from quarry.core.records import PUBLIC_GROUP, Principal
from quarry.core.search.settings import SearchSettings
from quarry.core.rank.sentence_vectors import SentenceVectors
from quarry.core.ingest.sources import read_qrels, read_queries


def add_arguments(p) -> None:
    p.add_argument("--index-root", required=True, help="index root (local path or fsspec URI)")
    p.add_argument("--tenant", required=True, help="tenant whose index and labels these are")
    p.add_argument("--generation", type=int, default=None, help="index generation (default: the live one)")
    p.add_argument("--labels", required=True, help="BEIR qrels TSV, or JSONL of evidence cases {query, relevant}")
    p.add_argument("--queries", default=None, help="BEIR queries.jsonl (needed with a qrels TSV)")
    p.add_argument("--split-seed", type=int, default=0, help="seed of the train/held-out split and of LightGBM")
    p.add_argument("--holdout", type=float, default=0.2, help="fraction of labelled queries held out (default 0.2)")
    p.add_argument("--margin", type=float, default=None, help="nDCG@10 gain required on held-out (default 0.005)")
    p.add_argument("--width", type=int, default=50, help="candidates per query from the first stage (default 50)")
    p.add_argument("--groups", default=None,
                   help="comma-separated groups of the mining principal (default: every group in the index; '*' = "
                        "whole-tenant passages only)")
    p.add_argument("--embedder", default=None, help="dense embedder: local sentence-transformers dir or 'hashing' "
                                                    "(default: the index's)")
    p.add_argument("--sentence-features", dest="sentence_features", action="store_true", default=False,
                   help="add the MiniLM sentence max-similarity features (slow on CPU: ~50k sentence vectors for "
                        "SciFact; off by default)")
    p.add_argument("--no-sentence-features", dest="sentence_features", action="store_false",
                   help="skip the sentence-similarity features (the default)")
    p.add_argument("--reference-date", default=None, help="recency reference date YYYY-MM-DD (default: today)")
    p.add_argument("--no-store", action="store_true", help="train and report, but store neither model nor decision")
    p.add_argument("--json", action="store_true", help="print the report as JSON")


# ----------------------------------------------------------------------------- labels


def read_labels(labels: str | Path, queries: str | Path | None = None) -> tuple[dict[str, str], dict[str, dict[str, int]]]:
    """``(queries {qid: text}, qrels {qid: {doc_or_passage_id: grade}})`` from either format."""
    path = Path(labels)
    with path.open("r", encoding="utf-8", newline="") as fh:
        first = fh.readline()
    if first.lstrip().startswith("{"):
        return _read_cases(path)
    if queries is None:
        raise UsageError(f"{path} looks like a qrels TSV: pass --queries (a BEIR queries.jsonl)")
    qrels = read_qrels(path)
    texts = read_queries(queries)
    missing = [q for q in qrels if q not in texts]
    if missing:
        print(f"train-ranker: {len(missing)} labelled query id(s) have no text in {queries}; skipped", file=sys.stderr)
    return {q: texts[q] for q in qrels if q in texts}, {q: g for q, g in qrels.items() if q in texts}


def _read_cases(path: Path) -> tuple[dict[str, str], dict[str, dict[str, int]]]:
    texts: dict[str, str] = {}
    qrels: dict[str, dict[str, int]] = {}
    with path.open("r", encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            row = json.loads(line)
            query, relevant = row.get("query"), row.get("relevant")
            if not isinstance(query, str) or not query.strip() or not isinstance(relevant, list):
                raise UsageError(f"{path}:{n}: an evidence case needs 'query' (text) and 'relevant' (a list of ids)")
            qid = str(row.get("id") or f"case-{n}")
            if qid in texts:
                raise UsageError(f"{path}:{n}: duplicate case id {qid!r}")
            grades = row.get("grades") or {}
            texts[qid] = query
            qrels[qid] = {str(r): int(grades.get(str(r), 1)) for r in relevant}
    return texts, qrels


# ----------------------------------------------------------------------------- run


def mining_principal(index, groups: str | None):
    """The principal candidates are mined as: the tenant with ``groups`` (comma list), by
    default every group in the generation's filter columns (so every passage is visible)."""
    if groups is None:
        gs = frozenset(g for sh in index.shards for g in sh.filters.groups)
    else:
        gs = frozenset(g.strip() for g in groups.split(",") if g.strip() and g.strip() != PUBLIC_GROUP)
    return Principal(tenant=index.tenant, subject="train-ranker", groups=gs)


def train(args) -> dict[str, Any]:
    t0 = time.perf_counter()
    ref = dt.date.fromisoformat(args.reference_date) if args.reference_date else dt.date.today()
    train_settings = TrainSettings(holdout=args.holdout, seed=args.split_seed, reference_date=ref,
                                   margin=DEFAULT_MARGIN if args.margin is None else args.margin)
    try:  # a missing labels file or index is the caller's to fix
        queries, qrels = read_labels(args.labels, args.queries)
        index = TenantIndex.load(args.index_root, args.tenant, args.generation)
    except FileNotFoundError as e:
        raise UsageError(str(e)) from None
    embedder = embedder_for_index(index.manifest, args.embedder)
    principal = mining_principal(index, args.groups)
    w = int(args.width)
    settings = SearchSettings(lexical_width=w, dense_width=w, candidate_width=w)
    sentence = None
    if args.sentence_features:
        sentence_model = embedder if isinstance(embedder, SentenceTransformerEmbedder) else build_embedder("default")
        sentence = SentenceVectors(sentence_model)
    ranker, decision, report = train_and_gate(index, principal, embedder, queries, qrels, settings, train_settings,
                                              sentence)
    report = {
        "tenant": args.tenant,
        "generation": index.generation,
        "labels": str(args.labels),
        "principal_groups": sorted(principal.groups),
        "width": w,
        "sentence_features": sentence is not None,
        "reference_date": ref.isoformat(),
        **report,
    }
    if not args.no_store:
        rec = record_decision(args.index_root, args.tenant, index.generation, decision, ranker,
                              sentence_cache=sentence,
                              report={k: report[k] for k in ("queries", "split", "heldout") if k in report},
                              labels=gate_labels(queries, qrels, train_settings, w, args.groups))
        report["stored"] = {"manifest": f"gen-{index.generation}/manifest.json",
                            "ranker": f"gen-{index.generation}/{rec.path}/" if rec.path else None}
    report["seconds"] = round(time.perf_counter() - t0, 2)
    return report


def gate_labels(queries, qrels, ts: TrainSettings, width: int, groups: str | None) -> dict[str, Any]:
    """What the promotion gate needs to re-run on a later generation (stored with the model)."""
    return {"queries": {q: queries[q] for q in qrels if q in queries}, "qrels": {q: dict(g) for q, g in qrels.items()},
            "holdout": ts.holdout, "seed": ts.seed, "margin": ts.margin, "width": width, "groups": groups}


def format_report(r: dict[str, Any]) -> str:
    q = r["queries"]
    lines = [
        f"tenant {r['tenant']} gen-{r['generation']}: {q['labelled']} labelled queries "
        f"({q['train']} train, {q['heldout']} held out, seed {r['split']['seed']}), width {r['width']}, "
        f"sentence features {'on' if r['sentence_features'] else 'off'}",
    ]
    if "heldout" in r:
        h = r["heldout"]
        lines.append(f"held-out nDCG@10: fused {h['fused_ndcg@10']:.4f}  learned {h['learned_ndcg@10']:.4f}  "
                     f"({h['delta']:+.4f}; {h['wins']} wins, {h['losses']} losses)")
    g = r["gate"]
    lines.append(f"gate: {'ENABLED' if g['enabled'] else 'not enabled'} - {g['reason']}")
    if g.get("model_id"):
        lines.append(f"model: sha256 {g['model_id']}")
    if r.get("feature_importances"):
        lines.append("feature importances (gain share): " + ", ".join(
            f"{k} {v:.3f}" for k, v in r["feature_importances"].items() if v > 0))
    if r.get("stored"):
        lines.append(f"stored: {r['stored']['ranker'] or '(decision only)'}; manifest {r['stored']['manifest']}")
    lines.append(f"took {r['seconds']} s")
    return "\n".join(lines)


def run(args) -> int:
    report = train(args)
    print(json.dumps(report, indent=2, sort_keys=True, default=str) if args.json else format_report(report))
    return 0
