"""Freshness on BEIR SciFact: base + delta + masks against a full rebuild, compaction, and
what changes cost (``python -m quarry.eval.bench_freshness``; results in
``eval/results/freshness.md`` and ``.json``).

1. Build the corpus (one tenant), delete 10% of the documents and upsert them back changed
   (each loses its last sentence),
   through the change path (``core.delta.apply_local``: the fold and delta publish the
   PySpark job uses, upserts prepared in-process).
2. Rebuild from the same final sources. Per test query: are the top-10 documents of the
   hybrid search the same (as a list, and as a set), and nDCG@10 of both.
3. Compact, and compare again (expected: identical).
4. Per-query cost of base + delta + masks against the compacted index, interleaved in one
   run (a ratio), and the cost of the per-request watermark read against a search.
5. Change-to-visible: one ACL revocation, and 10,000 mixed changes (1,000 upserts, 1,000
   deletes, 8,000 ACL changes): from the start of apply to the first query that sees it.

The embedder is the deterministic HashingEmbedder (MiniLM needs minutes per build on two
shared cores; the merge logic under test does not depend on the embedder).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import random
import statistics
import tempfile
import time
from pathlib import Path

from quarry.core.index import layout
from quarry.core.changes.log import Change
from quarry.core.changes.compact import compact
from quarry.core.changes.delta import apply_local
from quarry.core.embed.embedders import HashingEmbedder
from quarry.core.index.shards import TenantIndex
from quarry.core.rank.metrics import doc_ranking, mean, ndcg_at_k
from quarry.core.ingest.pipeline import build_corpus
from quarry.core.records import Principal, SearchRequest
from quarry.core.search.in_process import search
from quarry.core.search.settings import SearchSettings
from quarry.core.ingest.sources import load_beir_corpus, load_beir_queries, load_qrels
from quarry.core.text.units import split_sentences

TENANT = "scifact"


def _rankings(index, queries, emb, settings):
    p = Principal(tenant=TENANT, subject="bench", groups=frozenset({"readers"}))
    out, secs = {}, []
    for qid, q in queries.items():
        t = time.perf_counter()
        r = search(index, p, SearchRequest(query=q, top_k=10), emb, settings)
        secs.append(time.perf_counter() - t)
        out[qid] = doc_ranking([c.doc_id for c in sorted(r.candidates, key=lambda c: c.fused_rank)])[:10]
    return out, secs


def _compare(a, b, qrels):
    same_list = sum(a[q] == b[q] for q in a) / len(a)
    same_set = sum(set(a[q]) == set(b[q]) for q in a) / len(a)
    qs = [q for q in a if q in qrels]
    na, nb = mean([ndcg_at_k(a[q], qrels[q]) for q in qs]), mean([ndcg_at_k(b[q], qrels[q]) for q in qs])
    return {"top10_same_list": round(same_list, 4), "top10_same_set": round(same_set, 4),
            "ndcg10": round(na, 4), "ndcg10_rebuild": round(nb, 4), "ndcg10_diff": round(abs(na - nb), 4)}


def _edited(text: str) -> str:
    """A realistic edit: the abstract loses its last sentence (or, when it has one
    sentence, gains a short correction note)."""
    sents = split_sentences(text)
    return " ".join(sents[:-1]) if len(sents) > 1 else text + " (corrected)"


def _change(op, doc_id, at, **kw):
    return Change(op=op, tenant=TENANT, doc_id=doc_id, at=at, **kw)


def _visible_after(root, index, emb, probe_doc, revoked_groups) -> float:
    """Seconds for a replica holding ``index`` to reload (watermark check) and answer a query."""
    t = time.perf_counter()
    fresh = index.with_watermark(layout.read_watermark(root, TENANT))
    p = Principal(tenant=TENANT, subject="bench", groups=frozenset(revoked_groups))
    if fresh.document(probe_doc, p):
        raise RuntimeError("the change is not visible after the reload")
    return time.perf_counter() - t


def run(dataset: str, work: str, limit: int | None, seed: int = 13) -> dict:
    emb = HashingEmbedder(256)
    settings = SearchSettings()
    docs = load_beir_corpus(dataset, TENANT, acl=("readers",), limit=limit)
    qrels = load_qrels(dataset, "test")
    queries = {q: t for q, t in load_beir_queries(dataset).items() if q in qrels}
    rng = random.Random(seed)
    out: dict = {"documents": len(docs), "queries": len(queries), "embedder": emb.name,
                 "machine": "2 shared cores, other jobs running: absolute times are pessimistic, ratios are same-run"}
    root_a, root_b = str(Path(work) / "delta"), str(Path(work) / "rebuild")

    t = time.perf_counter()
    build_corpus(docs, root_a, emb)
    out["base_build_s"] = round(time.perf_counter() - t, 2)

    picked = rng.sample(range(len(docs)), k=max(1, len(docs) // 10))
    at0 = dt.datetime(2026, 6, 1, tzinfo=dt.timezone.utc)
    changes, final = [], list(docs)
    for i in picked:
        d = docs[i]
        changed = d.model_copy(update={"text": _edited(d.text)})
        changes.append(_change("delete", d.doc_id, at0))
        changes.append(_change("upsert", d.doc_id, at0 + dt.timedelta(seconds=1), document=changed))
        final[i] = changed
    t = time.perf_counter()
    apply_local(root_a, TENANT, changes, emb)
    out["apply_10pct"] = {"changes": len(changes), "seconds": round(time.perf_counter() - t, 2)}
    delta_index = TenantIndex.load(root_a, TENANT)

    t = time.perf_counter()
    build_corpus(final, root_b, emb)
    out["rebuild_s"] = round(time.perf_counter() - t, 2)
    rebuilt = TenantIndex.load(root_b, TENANT)

    got, _ = _rankings(delta_index, queries, emb, settings)
    want, _ = _rankings(rebuilt, queries, emb, settings)
    out["base_plus_delta_vs_rebuild"] = _compare(got, want, qrels)

    t = time.perf_counter()
    compact(root_a, TENANT)
    out["compact_s"] = round(time.perf_counter() - t, 2)
    compacted = TenantIndex.load(root_a, TENANT)
    got_c, _ = _rankings(compacted, queries, emb, settings)
    out["compacted_vs_rebuild"] = _compare(got_c, want, qrels)

    # per-query cost, interleaved rounds so load drifts hit both alike
    d_secs, c_secs = [], []
    for _ in range(3):
        d_secs += _rankings(delta_index, queries, emb, settings)[1]
        c_secs += _rankings(compacted, queries, emb, settings)[1]
    med_d, med_c = statistics.median(d_secs), statistics.median(c_secs)
    out["per_query"] = {"delta_masks_p50_ms": round(med_d * 1000, 3), "compacted_p50_ms": round(med_c * 1000, 3),
                        "ratio": round(med_d / med_c, 3)}
    n = 2000
    t = time.perf_counter()
    for _ in range(n):
        layout.read_watermark(root_a, TENANT)
    wm = (time.perf_counter() - t) / n
    out["watermark_check"] = {"us_per_request": round(wm * 1e6, 1), "fraction_of_search": round(wm / med_c, 4)}

    # change-to-visible: one revocation
    probe = docs[next(i for i in range(len(docs)) if i not in set(picked))].doc_id
    t = time.perf_counter()
    apply_local(root_a, TENANT, [_change("acl", probe, at0 + dt.timedelta(hours=1), acl=("auditors",))], emb)
    applied = time.perf_counter() - t
    reload = _visible_after(root_a, compacted, emb, probe, ["readers"])
    out["visible_1_change"] = {"apply_s": round(applied, 3), "reload_and_query_s": round(reload, 4),
                               "total_s": round(applied + reload, 3)}

    # change-to-visible: 10,000 mixed changes
    at1 = at0 + dt.timedelta(hours=2)
    many, order = [], list(range(len(docs)))
    rng.shuffle(order)
    n_up = n_del = min(1000, len(docs) // 5)
    for k, i in enumerate(order[:n_up]):
        d = docs[i]
        many.append(_change("upsert", d.doc_id, at1 + dt.timedelta(seconds=k),
                            document=d.model_copy(update={"text": d.text + " Second revision."})))
    for k, i in enumerate(order[n_up:n_up + n_del]):
        many.append(_change("delete", docs[i].doc_id, at1 + dt.timedelta(seconds=k)))
    rest = order[n_up + n_del:]
    for k in range(10_000 - n_up - n_del):
        many.append(_change("acl", docs[rest[k % len(rest)]].doc_id, at1 + dt.timedelta(seconds=10_000 + k),
                            acl=("readers", f"g{k % 7}")))
    last_probe = docs[order[n_up + n_del - 1]].doc_id  # deleted in this batch
    before = TenantIndex.load(root_a, TENANT)
    t = time.perf_counter()
    _, res = apply_local(root_a, TENANT, many, emb)
    applied = time.perf_counter() - t
    reload = _visible_after(root_a, before, emb, last_probe, ["readers"])
    out["visible_10000_changes"] = {"changes": len(many), "applied": sum(o == "applied" for o in res.outcomes.values()),
                                    "apply_s": round(applied, 2), "reload_and_query_s": round(reload, 3),
                                    "total_s": round(applied + reload, 2)}
    return out


def to_markdown(r: dict, cmd: str) -> str:
    a, c, q, w = r["base_plus_delta_vs_rebuild"], r["compacted_vs_rebuild"], r["per_query"], r["watermark_check"]
    v1, v2 = r["visible_1_change"], r["visible_10000_changes"]
    return "\n".join([
        "# Freshness on SciFact", "", f"`{cmd}` ({r['documents']} documents, {r['queries']} test queries, "
        f"{r['embedder']}; {r['machine']}).", "",
        "| comparison with a full rebuild | top-10 same (list) | top-10 same (set) | nDCG@10 | rebuild nDCG@10 | diff |",
        "|---|---:|---:|---:|---:|---:|",
        f"| base + delta + masks (10% deleted, upserted back changed) | {a['top10_same_list']:.2%} | "
        f"{a['top10_same_set']:.2%} | {a['ndcg10']} | {a['ndcg10_rebuild']} | {a['ndcg10_diff']} |",
        f"| after compact | {c['top10_same_list']:.2%} | {c['top10_same_set']:.2%} | {c['ndcg10']} | "
        f"{c['ndcg10_rebuild']} | {c['ndcg10_diff']} |", "",
        "| cost | value |", "|---|---:|",
        f"| search p50, base + delta + masks | {q['delta_masks_p50_ms']} ms |",
        f"| search p50, compacted | {q['compacted_p50_ms']} ms |",
        f"| ratio delta / compacted | {q['ratio']} |",
        f"| watermark read per request | {w['us_per_request']} µs ({w['fraction_of_search']:.2%} of a search) |",
        f"| 1 change (ACL revocation): apply + reload + query | {v1['total_s']} s (reload+query {v1['reload_and_query_s']} s) |",
        f"| {v2['changes']} changes ({v2['applied']} applied): apply + reload + query | {v2['total_s']} s "
        f"(reload+query {v2['reload_and_query_s']} s) |",
        f"| {r['apply_10pct']['changes']} changes (10% delete + upsert) | {r['apply_10pct']['seconds']} s |",
        f"| base build / rebuild / compact | {r['base_build_s']} s / {r['rebuild_s']} s / {r['compact_s']} s |", "",
    ])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m quarry.eval.bench_freshness", description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", default=str(Path(__file__).resolve().parents[3] / "shared/data/beir/scifact"))
    ap.add_argument("--limit", type=int, default=None, help="first N documents only")
    ap.add_argument("--work", default=None, help="where the indexes go (default: a temp dir)")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parents[2] / "eval" / "results" / "freshness"))
    args = ap.parse_args(argv)
    work = args.work or tempfile.mkdtemp(prefix="quarry-fresh-bench-")
    r = run(args.dataset, work, args.limit)
    cmd = "python -m quarry.eval.bench_freshness" + (f" --limit {args.limit}" if args.limit else "")
    Path(args.out + ".json").write_text(json.dumps(r, indent=2, sort_keys=True))
    Path(args.out + ".md").write_text(to_markdown(r, cmd))
    print(to_markdown(r, cmd))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
