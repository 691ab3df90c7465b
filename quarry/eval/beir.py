"""BEIR runner: build (or reuse) a dataset's index and measure each stage on its own.

Stages: ``lexical`` (the BM25 leg alone), ``dense`` (the embedding leg alone), ``hybrid``
(both legs fused by RRF), ``context`` (hybrid over passages with extractive preambles),
``rerank`` (a learned second stage trained on the train split, gated). Metrics are
nDCG@10 and recall@100 at document level (a document ranks at its best passage).
Throughput compares the lexical leg, filters on, with raw bm25s on the same corpus in
the same run.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


from quarry.core.index import layout
from quarry.core.ingest.chunking import ChunkSettings
from quarry.core.ingest.contextualize_factory import make_contextualizer
from quarry.core.embed.factory import build_embedder, check_embedder
from quarry.core.errors import UsageError
from quarry.core.index.lexical import lexical_text
from quarry.core.index.manifest import read_manifest
from quarry.core.index.shards import TenantIndex
from quarry.core.rank.metrics import doc_ranking, mean, ndcg_at_k, recall_at_k
from quarry.core.ingest.pipeline import build_corpus
from quarry.core.rank.train import train_and_gate
from quarry.core.records import Principal, SearchRequest
from quarry.core.search.retrieval import first_stage, lexical_leg
from quarry.core.search.settings import SearchSettings
from quarry.core.ingest.sources import load_beir_corpus, load_beir_queries, load_qrels, write_source_jsonl
from quarry.eval.expected import check as check_expected
from quarry.eval.expected import load_expected

WIDTH = 100  # each leg's width and the candidate width, so recall@100 is measurable
# The second stage reorders the serving default candidate width (50); the fused tail
# after it keeps its order, so recall@100 is comparable with hybrid's.
RERANK_WIDTH = 50
CHUNK_TOKENS = 512  # BEIR documents are abstracts: keep most of them whole


@dataclass(frozen=True)
class Dataset:
    name: str
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]


def load_dataset(dataset_dir: str | Path, split: str = "test") -> Dataset:
    d = Path(dataset_dir)
    queries = load_beir_queries(d)
    qrels = {q: r for q, r in load_qrels(d, split).items() if q in queries}
    return Dataset(d.name, queries, qrels)


def log(msg: str) -> None:
    print(f"[eval] {msg}", file=sys.stderr, flush=True)


def _recipe_path(index_root: str, tenant: str) -> str:
    return layout.join(layout.tenant_dir(index_root, tenant), "eval-recipe.json")


def ensure_index(dataset_dir: Path, index_root: str, tenant: str, contextualizer: str, embedder,
                 build: str = "spark") -> int:
    """Build the dataset's index unless a generation with the same recipe is live.
    ``build='spark'`` runs the PySpark build job (local mode); 'in-process' the core
    pipeline. Both give the same passages, shards and scores (tests/jobs checks)."""
    gen = layout.current_generation(index_root, tenant)
    recipe = {"dataset": str(Path(dataset_dir).resolve()), "contextualizer": contextualizer,
              "embedder": embedder.name, "chunk_tokens": CHUNK_TOKENS}
    if gen is not None:
        try:
            saved = layout.read_json(_recipe_path(index_root, tenant))
        except FileNotFoundError:
            legacy = read_manifest(index_root, tenant, gen).model_extra or {}  # indexes that kept it in the manifest
            saved = {"generation": gen, "recipe": legacy.get("recipe")}
        if saved.get("generation") == gen and saved.get("recipe") == recipe:
            log(f"reusing {tenant} gen-{gen} under {index_root}")
            return gen
    t0 = time.perf_counter()
    docs = load_beir_corpus(dataset_dir, tenant)
    if build == "spark":
        import tempfile

        from pyspark.sql import SparkSession

        from quarry.jobs.build import run_build  # needs pyspark: deferred
        from quarry.jobs.build_settings import BuildSettings

        with tempfile.TemporaryDirectory(prefix="quarry-beir-") as tmp:
            src = write_source_jsonl(docs, Path(tmp) / f"{tenant}.jsonl")
            spec = "hashing" if embedder.name.startswith("hashing") else str(getattr(embedder, "path", "default"))
            report = run_build(BuildSettings(source=str(src), index_root=index_root, contextualizer=contextualizer,
                                             embedder=spec, master="local[*]", chunk_tokens=CHUNK_TOKENS),
                               spark=SparkSession.getActiveSession())  # reuse a live session; else own one
        gen = report.tenants[tenant].generation
    else:
        gen = build_corpus(docs, index_root, embedder, make_contextualizer(contextualizer),
                           ChunkSettings(max_tokens=CHUNK_TOKENS), progress=log)[tenant]
    layout.write_json(_recipe_path(index_root, tenant), {"generation": gen, "recipe": recipe})
    log(f"{tenant}: built gen-{gen} ({build}) in {time.perf_counter() - t0:.1f}s")
    return gen


def _score(rankings: dict[str, list[str]], ds: Dataset) -> dict[str, float]:
    nd = [ndcg_at_k(rankings[q], ds.qrels[q], 10) for q in ds.qrels]
    rc = [recall_at_k(rankings[q], ds.qrels[q], 100) for q in ds.qrels]
    return {"ndcg@10": round(mean(nd), 4), "recall@100": round(mean(rc), 4)}


def run_stages(index, ds: Dataset, embedder, second_stage=None) -> dict[str, dict[str, float]]:
    """Lexical, dense and hybrid (and rerank when a second stage is given) over the queries,
    all from one :func:`quarry.core.search.retrieval.first_stage` call per query (each leg's own
    ranking rides in its record)."""
    settings = SearchSettings(lexical_width=WIDTH, dense_width=WIDTH, candidate_width=WIDTH)
    principal = Principal(tenant=index.tenant, subject="eval")
    qids = list(ds.qrels)
    qvecs = embedder.encode([ds.queries[q] for q in qids])
    docs_of = lambda rows: doc_ranking([index.passage_at(r).doc_id for r in rows])  # noqa: E731
    out: dict[str, dict[str, list[str]]] = {"lexical": {}, "dense": {}, "hybrid": {}}
    if second_stage is not None:
        out["rerank"] = {}
    for qi, q in enumerate(qids):
        fs = first_stage(index, principal, SearchRequest(query=ds.queries[q]), embedder, settings, qvecs[qi])
        cands = list(fs.candidates)
        out["lexical"][q] = docs_of(fs.lexical_rows)
        out["dense"][q] = docs_of(fs.dense_rows)
        out["hybrid"][q] = doc_ranking([c.doc_id for c in cands])
        if second_stage is not None:
            passages = [index.passage_at(c.row) for c in cands]
            head, tail = cands[:RERANK_WIDTH], cands[RERANK_WIDTH:]
            ranked = second_stage(ds.queries[q], head, passages[:RERANK_WIDTH], len(head))
            out["rerank"][q] = doc_ranking([c.doc_id for c in (*ranked, *tail)])
    return {name: _score(r, ds) for name, r in out.items()}


def _best_time(fn: Callable[[], Any], repeats: int = 3) -> float:
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def throughput(index, dataset_dir: Path, ds: Dataset) -> dict[str, float]:
    """Queries/s of the lexical leg with the principal's filter mask applied (our tokenizer
    included), against raw bm25s over the same texts in the same run, three ways: tokenizing
    each query with ``bm25s.tokenize`` (which builds vocabulary objects per call), and at the
    library's best with the queries tokenized beforehand, one ``retrieve`` per query and one
    batched ``retrieve``. ``ratio`` is ours against the per-query pre-tokenized figure, the
    fair one-at-a-time comparison (the Retriever answers one query per request)."""
    import bm25s
    import Stemmer

    texts = []
    for sh in index.shards:
        for r in range(len(sh)):
            texts.append(lexical_text(sh.passage(r)))
    stemmer = Stemmer.Stemmer("english")
    raw = bm25s.BM25()
    raw.index(bm25s.tokenize(texts, stopwords="en", stemmer=stemmer, show_progress=False), show_progress=False)
    queries = [ds.queries[q] for q in ds.qrels]
    pretok = bm25s.tokenize(queries, stopwords="en", stemmer=stemmer, return_ids=False, show_progress=False)
    pretok = [t for t in pretok if t]  # an all-stopword query has nothing to retrieve
    principal = Principal(tenant=index.tenant, subject="eval", groups=frozenset({"eval"}))

    def ours():
        masks = index.masks(principal)  # filters on: the mask is built (cached) and applied in-leg
        for q in queries:
            lexical_leg(index, masks, q, WIDTH, 0.0)

    def raw_tokenizing():
        for q in queries:
            raw.retrieve(bm25s.tokenize([q], stopwords="en", stemmer=stemmer, show_progress=False),
                         k=WIDTH, show_progress=False, n_threads=1)

    def raw_per_query():
        for toks in pretok:
            raw.retrieve([toks], k=WIDTH, show_progress=False, n_threads=1)

    def raw_batched():
        raw.retrieve(pretok, k=WIDTH, show_progress=False, n_threads=1)

    fns = {"lexical": ours, "raw_tokenizing": raw_tokenizing, "raw_per_query": raw_per_query,
           "raw_batched": raw_batched}
    for fn in fns.values():
        fn()  # warm caches
    t = {name: _best_time(fn) for name, fn in fns.items()}
    qps = {name: round((len(queries) if name in ("lexical", "raw_tokenizing") else len(pretok)) / sec, 1)
           for name, sec in t.items()}
    return {"lexical_qps": qps["lexical"], "raw_bm25s_qps": qps["raw_per_query"],
            "raw_bm25s_tokenizing_qps": qps["raw_tokenizing"], "raw_bm25s_batched_qps": qps["raw_batched"],
            "ratio": round(qps["lexical"] / qps["raw_per_query"], 3)}


def evaluate(dataset_dir: str | Path, index_root: str, contextualizer: str | None = None,
             train_split: str | None = None, embedder=None, split: str = "test",
             build: str = "spark") -> dict[str, Any]:

    dataset_dir = Path(dataset_dir)
    embedder = embedder or build_embedder("default")
    ds = load_dataset(dataset_dir, split)
    tenant = ds.name.lower()
    ensure_index(dataset_dir, index_root, tenant, "none", embedder, build)
    index = TenantIndex.load(index_root, tenant)
    check_embedder(index.manifest, embedder)
    second_stage, gate = None, None
    if train_split:
        second_stage, gate = train_second_stage(index, dataset_dir, train_split, embedder)
    log(f"running {len(ds.qrels)} {split} queries")
    stages = run_stages(index, ds, embedder, second_stage)
    if train_split and second_stage is None:
        stages["rerank"] = dict(stages["hybrid"])  # the gate kept the fused order
    if contextualizer and contextualizer != "none":
        ctenant = f"{tenant}-ctx-{contextualizer}"
        ensure_index(dataset_dir, index_root, ctenant, contextualizer, embedder, build)
        stages["context"] = run_stages(TenantIndex.load(index_root, ctenant), ds, embedder)["hybrid"]
    result: dict[str, Any] = {"dataset": ds.name, "split": split, "queries": len(ds.qrels), "stages": stages,
                              "throughput": throughput(index, dataset_dir, ds), "embedder": embedder.name,
                              "generation": index.generation}
    if gate is not None:
        result["gate"] = gate
    return result


def train_second_stage(index, dataset_dir: Path, split: str, embedder):
    """Train the learned ranker on ``split`` qrels only (never the test split) and gate it."""
    if split == "test":
        raise ValueError("--train-split must not be the test split")
    ds = load_dataset(dataset_dir, split)
    principal = Principal(tenant=index.tenant, subject="eval")
    settings = SearchSettings(lexical_width=WIDTH, dense_width=WIDTH, candidate_width=RERANK_WIDTH)
    ranker, decision, report = train_and_gate(index, principal, embedder,
                                              {q: ds.queries[q] for q in ds.qrels}, ds.qrels, settings)
    gate = {"decision": decision.to_json(), "report": report}
    return (ranker.as_second_stage() if ranker is not None and decision.enabled else None), gate


def format_table(result: dict[str, Any]) -> str:
    lines = [f"{result['dataset']} ({result['queries']} {result.get('split', 'test')} queries)",
             "| stage | nDCG@10 | recall@100 |", "|---|---:|---:|"]
    for name, m in result["stages"].items():
        lines.append(f"| {name} | {m['ndcg@10']:.4f} | {m['recall@100']:.4f} |")
    t = result["throughput"]
    lines.append(f"\nlexical leg (filters on): {t['lexical_qps']} q/s; raw bm25s, pre-tokenized: "
                 f"{t['raw_bm25s_qps']} q/s one at a time (ratio {t['ratio']}), "
                 f"{t.get('raw_bm25s_batched_qps')} q/s batched; tokenizing each query: "
                 f"{t.get('raw_bm25s_tokenizing_qps')} q/s")
    return "\n".join(lines)


def add_arguments(p) -> None:
    p.add_argument("dataset_dir", help="a BEIR dataset folder (corpus.jsonl, queries.jsonl, qrels/)")
    p.add_argument("--index-root", required=True, help="where to build/reuse the dataset's index")
    p.add_argument("--split", default="test", help="qrels split to evaluate (default: test)")
    p.add_argument("--contextualizer", choices=["none", "extractive"], default=None,
                   help="also build a contextualized index and report stage 'context'")
    p.add_argument("--train-split", default=None,
                   help="train the learned ranker on this qrels split (e.g. train) and report stage 'rerank'")
    p.add_argument("--embedder", default=None, help="local sentence-transformers model dir, or 'hashing'")
    p.add_argument("--encoder", default="torch", choices=("torch", "onnx", "onnx-int8"),
                   help="query (and in-process build) encoder backend (default torch)")
    p.add_argument("--build", choices=["spark", "in-process"], default="spark",
                   help="how to build a missing index: the PySpark job (default) or the in-process pipeline")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--check", nargs="?", const="", default=None, metavar="EXPECTED.json",
                   help="exit 1 if a stage's figure drifts beyond the pinned tolerance "
                        "(default file: eval/expected/<dataset>.json)")


def run(args) -> int:
    d = Path(args.dataset_dir)
    if not (d / "corpus.jsonl").exists():
        raise UsageError(f"{d} is not a BEIR dataset folder (no corpus.jsonl)")
    splits = sorted(q.stem for q in (d / "qrels").glob("*.tsv"))
    for flag, split in (("--split", args.split), ("--train-split", args.train_split)):
        if split is not None and split not in splits:
            raise UsageError(f"{flag} {split!r}: {d} has no qrels/{split}.tsv; choose one of {', '.join(splits)}")
    if args.train_split is not None and args.train_split in (args.split, "test"):
        raise UsageError(f"--train-split {args.train_split!r} must differ from the evaluated split and never be "
                         "'test' (training on test labels would inflate the figures)")
    try:
        emb = build_embedder(args.embedder, encoder=args.encoder)
    except ValueError as e:  # a bad model path or encoder: the user's to fix
        raise UsageError(str(e)) from None
    expected = None
    if args.check is not None:
        expected = load_expected(d.name, args.check or None)
        if expected is None:
            raise UsageError(f"--check: no pinned expectations for {d.name} "
                             f"({args.check or f'eval/expected/{d.name.lower()}.json'} not found)")
    result = evaluate(d, args.index_root, args.contextualizer, args.train_split, emb, args.split, args.build)
    drifts = None
    if expected is not None:
        drifts = check_expected(result, expected)
        result["check"] = {"passed": not drifts, "drifts": drifts, "tolerance": expected.get("tolerance")}
    print(json.dumps(result) if args.json else format_table(result))
    if drifts:
        print("check failed: " + "; ".join(drifts), file=sys.stderr)
        return 1
    return 0
