"""Build cost of the evidence layer (a benchmark, not a test).

Builds one BEIR corpus (SciFact by default) in-process three times in the same run and
reports the ratios: with the evidence layer (envelope enrichment from the text, statement
extraction and instruction flags stored per shard), and with it and the statement vectors
(each statement's clause encoded by the tenant's embedder, what ``quarry build`` does),
against the same build without it. Text caches are cleared before each build, so no build
reuses another's parses.
The embeddings are computed once and charged to both builds alike (they are the same
work), so the ratio is over the whole build. It also times loading the evidence graph of
the built index (the links are derived at first resolution) and counts what it holds.

    python -m quarry.eval.bench_evidence --dataset ../shared/data/beir/scifact \\
        --embedder default --out eval/results/evidence_build.md [--limit 2000]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

from quarry.core.embed.embedders import passage_text_for_embedding
from quarry.core.embed.factory import build_embedder
from quarry.core.evidence.graph import graph_of
from quarry.core.evidence.vectors import VECTORS_FILE
from quarry.core.index.build import build_tenant_index
from quarry.core.index.shards import TenantIndex
from quarry.core.ingest.contextualize_extractive import ExtractiveContextualizer
from quarry.core.ingest.pipeline import prepare
from quarry.core.ingest.sources import load_beir_corpus

REPO = Path(__file__).resolve().parents[2]
DEFAULT_DATASET = REPO.parent / "shared" / "data" / "beir" / "scifact"


_TEXT_MODULES = ("quarry.core.evidence.subjects", "quarry.core.evidence.statements", "quarry.core.evidence.sentences",
                 "quarry.core.evidence.predicates", "quarry.core.evidence.quantities", "quarry.core.evidence.question",
                 "quarry.core.text.tokenizer")


def _clear_text_caches() -> None:
    """Empty the memoised parses (not the loaded pipelines: their caches are tiny)."""
    import importlib

    for name in _TEXT_MODULES:
        for f in vars(importlib.import_module(name)).values():
            info = getattr(f, "cache_info", None)
            if info is not None and (info().maxsize or 0) > 16:
                f.cache_clear()


def _build(root: str, tenant: str, docs, embeddings, with_evidence: bool, statement_encoder=None) -> float:
    _clear_text_caches()
    t0 = time.perf_counter()
    passages, parents = prepare(docs, ExtractiveContextualizer(), enrich_envelopes=with_evidence)
    emb = embeddings(passages)
    build_tenant_index(root, tenant, passages, parents, emb, embedder_name="bench", evidence_facts=with_evidence,
                       statement_encoder=statement_encoder)
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m quarry.eval.bench_evidence", description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", default=str(DEFAULT_DATASET), help="a BEIR dataset folder (corpus.jsonl)")
    ap.add_argument("--embedder", default="default", help="'default' (packaged MiniLM), 'hashing' or a model dir")
    ap.add_argument("--limit", type=int, default=None, help="use only the first N documents")
    ap.add_argument("--out", default=str(REPO / "eval" / "results" / "evidence_build.md"))
    ap.add_argument("--json", dest="json_out", default=None, help="also write the raw figures as JSON")
    args = ap.parse_args(argv)
    if not (Path(args.dataset) / "corpus.jsonl").exists():
        print(f"bench_evidence: no corpus.jsonl under {args.dataset}", file=sys.stderr)
        return 2
    if args.limit is not None and args.limit < 1:
        print("bench_evidence: --limit must be at least 1", file=sys.stderr)
        return 2

    import numpy as np

    docs = load_beir_corpus(args.dataset, "bench", limit=args.limit)
    embedder = build_embedder(args.embedder)
    getattr(embedder, "load", lambda: None)()
    cache: dict[str, np.ndarray] = {}
    embed_s = [0.0]

    def embeddings(passages):
        missing = [p for p in passages if p.passage_id not in cache]
        if missing:
            t0 = time.perf_counter()
            for p, v in zip(missing, embedder.encode([passage_text_for_embedding(p) for p in missing])):
                cache[p.passage_id] = v
            embed_s[0] += time.perf_counter() - t0
        return np.stack([cache[p.passage_id] for p in passages])

    with tempfile.TemporaryDirectory(prefix="quarry-bench-evidence-") as tmp:
        embeddings(prepare(docs, ExtractiveContextualizer(), enrich_envelopes=False)[0])  # charged to both arms
        e = embed_s[0]
        off = _build(f"{tmp}/off", "bench", docs, embeddings, False) + e
        on = _build(f"{tmp}/on", "bench", docs, embeddings, True) + e
        vec = _build(f"{tmp}/vec", "bench", docs, embeddings, True, statement_encoder=embedder.encode) + e
        vec_file = sum(f.stat().st_size for f in Path(f"{tmp}/vec").rglob(VECTORS_FILE))
        t0 = time.perf_counter()
        idx = TenantIndex.load(f"{tmp}/vec", "bench")
        g = graph_of(idx)
        load_s = time.perf_counter() - t0
        n_stmt = sum(len(f.statements) for f in g.facts.values())
        n_links = sum(len(v) for v in g.links.values()) // 2
        n_instr = sum(1 for f in g.facts.values() if f.instruction)
        n_pass = len(g.facts)
    fig = {
        "date": dt.date.today().isoformat(), "machine": f"{platform.machine()}, {__import__('os').cpu_count()} cores",
        "dataset": Path(args.dataset).name, "documents": len(docs), "passages": n_pass, "embedder": embedder.name,
        "embed_s": round(e, 2), "build_without_s": round(off, 2), "build_with_s": round(on, 2),
        "ratio": round(on / off, 3), "build_with_vectors_s": round(vec, 2), "ratio_vectors": round(vec / off, 3),
        "vectors_over_without_vectors": round(vec / on, 3), "vectors_file_bytes": vec_file, "graph_load_s": round(load_s, 3), "statements": n_stmt,
        "links": n_links, "instruction_shaped": n_instr,
    }
    lines = [
        "# Build cost of the evidence layer", "",
        f"`python -m quarry.eval.bench_evidence --dataset {args.dataset} --embedder {args.embedder}"
        + (f" --limit {args.limit}" if args.limit else "") + "`", "",
        f"{fig['date']}, {fig['machine']}; {fig['dataset']}: {fig['documents']} documents, {fig['passages']} passages, "
        f"embedder {fig['embedder']} (embedding {fig['embed_s']} s, charged to both builds).", "",
        "| build | seconds | ratio |", "| --- | ---: | ---: |",
        f"| without the evidence layer (no enrichment, no statements) | {fig['build_without_s']} | 1.00 |",
        f"| with enrichment, statements and instruction flags | {fig['build_with_s']} | {fig['ratio']:.2f} |",
        f"| with them and the statement vectors (`quarry build`'s default) | {fig['build_with_vectors_s']} "
        f"| {fig['ratio_vectors']:.2f} |", "",
        f"The statement vectors cost {fig['vectors_over_without_vectors']:.2f}x the build with the evidence layer "
        f"without them; their file is {fig['vectors_file_bytes'] / 1e6:.1f} MB.", "",
        f"Evidence graph of the built index: loaded in {fig['graph_load_s']} s; {fig['statements']} statements, "
        f"{fig['links']} document links, {fig['instruction_shaped']} instruction-shaped passages.",
    ]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(lines) + "\n")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(fig, indent=2) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
