"""Filtered dense-leg benchmark: CPU flat and HNSW, and (where FAISS sees a GPU that passed
the selector self-test) GPU flat and CAGRA, at filter selectivities of 1%, 10%, 50% and 90%
of the rows. Recall@10 is against exact filtered search (numpy over the allowed rows);
``outside`` counts returned rows outside the filter *before* any post-filter, so it
measures the index itself.

    python -m quarry.eval.bench_dense --rows 100000 --dim 384 --queries 200 [--json OUT]

Vectors are random unit vectors (a hard case for approximate indexes: no cluster
structure). Timings are per single query, one at a time, as the Retriever issues them.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

SELECTIVITIES = (0.01, 0.10, 0.50, 0.90)


def unit(rng, n: int, dim: int) -> np.ndarray:
    v = rng.standard_normal((n, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def exact_filtered(vecs: np.ndarray, mask: np.ndarray, q: np.ndarray, k: int) -> np.ndarray:
    allowed = np.flatnonzero(mask)
    s = vecs[allowed] @ q
    top = np.argsort(-s, kind="stable")[:k]
    return allowed[top]


def backends(vecs: np.ndarray, want_gpu: bool):
    import faiss

    from quarry.core.index.dense_gpu import choose_backend

    n, dim = vecs.shape
    flat = faiss.IndexFlatIP(dim)
    flat.add(vecs)
    yield "cpu-flat", flat, lambda sel: faiss.SearchParameters(sel=sel)
    hnsw = faiss.IndexHNSWFlat(dim, 32, faiss.METRIC_INNER_PRODUCT)
    hnsw.hnsw.efConstruction = 80
    hnsw.add(vecs)
    yield "cpu-hnsw32", hnsw, lambda sel: faiss.SearchParametersHNSW(sel=sel, efSearch=128)
    if not want_gpu:
        return
    choice = choose_backend("gpu")
    print(json.dumps({"gpu_choice": choice.to_json()}))
    if choice.device != "gpu":
        return
    res = faiss.StandardGpuResources()
    cfg = faiss.GpuIndexFlatConfig()
    gflat = faiss.GpuIndexFlatIP(res, dim, cfg)
    gflat.add(vecs)
    yield "gpu-flat", gflat, lambda sel: faiss.SearchParameters(sel=sel)
    if hasattr(faiss, "GpuIndexCagra"):
        ccfg = faiss.GpuIndexCagraConfig()
        cagra = faiss.GpuIndexCagra(res, dim, faiss.METRIC_INNER_PRODUCT, ccfg)
        cagra.train(vecs)

        def cagra_params(sel):
            p = faiss.SearchParametersCagra()
            p.sel = sel
            p.itopk_size = 128
            return p

        yield "gpu-cagra", cagra, cagra_params


def run(rows: int, dim: int, queries: int, k: int, want_gpu: bool, seed: int = 0) -> list[dict]:
    import faiss

    rng = np.random.default_rng(seed)
    vecs = unit(rng, rows, dim)
    qs = unit(rng, queries, dim)
    masks = {s: rng.random(rows) < s for s in SELECTIVITIES}
    truth = {s: [exact_filtered(vecs, m, q, k) for q in qs] for s, m in masks.items()}
    out = []
    for name, index, params_for in backends(vecs, want_gpu):
        for s, mask in masks.items():
            bits = np.packbits(mask.astype(np.uint8), bitorder="little")
            sel = faiss.IDSelectorBitmap(rows, faiss.swig_ptr(bits))
            params = params_for(sel)
            index.search(qs[:1], k, params=params)  # warm-up
            lat, recall, outside = [], [], 0
            for q, want in zip(qs, truth[s]):
                t = time.perf_counter()
                _, ids = index.search(q.reshape(1, -1), k, params=params)
                lat.append((time.perf_counter() - t) * 1000)
                got = [int(i) for i in ids[0] if i >= 0]
                outside += sum(1 for i in got if not mask[i])
                recall.append(len(set(got) & set(want.tolist())) / max(1, len(want)))
            del bits
            out.append({"backend": name, "selectivity": s, "p50_ms": round(float(np.percentile(lat, 50)), 3),
                        "p95_ms": round(float(np.percentile(lat, 95)), 3),
                        "qps": round(1000 / float(np.mean(lat)), 1), "recall@10": round(float(np.mean(recall)), 4),
                        "outside_filter": outside})
            print(json.dumps(out[-1]), flush=True)
    return out


def table(rows: list[dict]) -> str:
    head = "| backend | selectivity | p50 ms | p95 ms | q/s | recall@10 | rows outside filter |\n|---|---|---|---|---|---|---|"
    body = [f"| {r['backend']} | {r['selectivity']:.0%} | {r['p50_ms']} | {r['p95_ms']} | {r['qps']} | "
            f"{r['recall@10']} | {r['outside_filter']} |" for r in rows]
    return "\n".join([head, *body])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--no-gpu", action="store_true", help="CPU backends only")
    ap.add_argument("--json", default=None, help="write the rows as JSON here")
    args = ap.parse_args(argv)
    rows = run(args.rows, args.dim, args.queries, args.k, not args.no_gpu)
    print(table(rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": args.rows, "dim": args.dim, "queries": args.queries, "results": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
