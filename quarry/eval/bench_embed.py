"""Embedding throughput and agreement: the same texts through ``SentenceTransformerEmbedder``
on CPU and (when present) CUDA. Used for the GPU check on a lent machine.

    python -m quarry.eval.bench_embed --model DIR --texts 4000 [--reference REF.npy] [--save OUT.npy]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np


def sample_texts(n: int) -> list[str]:
    """Passages of the shipped sample corpus, cycled to ``n`` (numbered so none repeat)."""
    from quarry.core.ingest.chunking import chunk_document
    from quarry.core.ingest.sources import SAMPLE_CORPUS, load_documents

    docs, _ = load_documents(SAMPLE_CORPUS)
    base = [p.text for d in docs for p in chunk_document(d)[0]]
    return [f"{base[i % len(base)]} ({i})" for i in range(n)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="sentence-transformers model dir (default: packaged MiniLM)")
    ap.add_argument("--texts", type=int, default=2000)
    ap.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--reference", default=None, help=".npy of embeddings of the same texts to compare with")
    ap.add_argument("--save", default=None, help="write the embeddings here (.npy)")
    args = ap.parse_args(argv)

    from quarry.core.embed.embedders import SentenceTransformerEmbedder

    texts = sample_texts(args.texts)
    emb = SentenceTransformerEmbedder(args.model, device=args.device, batch_size=args.batch_size).load()
    emb.encode(texts[:256])  # warm-up
    t = time.perf_counter()
    vecs = emb.encode(texts)
    dt = time.perf_counter() - t
    out = {"device": str(emb._model.device), "texts": len(texts), "seconds": round(dt, 3),
           "texts_per_s": round(len(texts) / dt, 1), "batch_size": args.batch_size}
    if args.reference:
        ref = np.load(args.reference)
        cos = np.sum(ref[: len(vecs)] * vecs[: len(ref)], axis=1)
        out["min_cosine_vs_reference"] = float(cos.min())
        out["mean_cosine_vs_reference"] = float(cos.mean())
    if args.save:
        np.save(args.save, vecs)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
