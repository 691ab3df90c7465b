"""Measure the BM25 IDF side channel : a measurement, not a test.

Term statistics (document frequency, document count, average length) are computed over the
whole tenant, including passages only some groups may read. Restricted text is never
scored for a principal who cannot read it (the ACL mask is applied inside the leg), but it
still shifts the IDF of every term it contains, and so the scores and the *order* of the
passages the principal can see. Agents never receive scores, only the order, so the
question is how often the order moves and whether an attacker can steer it into one bit.

Two parts, both in-process over the real index build and the real lexical leg:

1. **Sample corpus.** For each tenant, and each principal holding one group, build the
   tenant's index twice: as served (all documents), and with only the documents that
   principal may read (what per-visibility-class statistics would give it). Probe with
   terms that occur in restricted text and in visible text, and compare the principal's
   visible top 10: relative score change, and whether the order differs.
2. **Targeted probe.** A synthetic tenant where the attacker can read two documents, one
   with a secret term and one with a reference term, and ``n`` restricted documents contain
   the secret term. The query "secret reference" ranks the two visible documents; the
   attacker reads off whether restricted documents contain the term. Reported per ``n``,
   with tenant-wide statistics and with visible-only statistics.

    python -m quarry.eval.idf_side_channel --out eval/results/idf_side_channel.md
"""

from __future__ import annotations

import argparse
import random
import re
import statistics
import sys
import tempfile
from collections import Counter
from pathlib import Path

TOP = 10


def _lexical_top(index, principal, query: str, width: int = TOP) -> list[tuple[str, float]]:
    from quarry.core.search.retrieval import lexical_leg

    hits = lexical_leg(index, index.masks(principal), query, width, 0.0)
    return [(index.passage_at(r).passage_id, float(s)) for r, s in zip(hits.rows, hits.scores)]


def _build(root: Path, docs) -> object:
    from quarry.core.embed.embedders import HashingEmbedder
    from quarry.core.index.shards import TenantIndex
    from quarry.core.ingest.pipeline import build_corpus

    tenant = docs[0].tenant
    build_corpus(docs, str(root), HashingEmbedder(dim=32))
    return TenantIndex.load(str(root), tenant)


_WORD = re.compile(r"[a-z]{5,}")


def _probe_terms(restricted, visible, k: int, rng: random.Random) -> list[str]:
    """Words in restricted text that also occur in visible text (so the principal gets hits)."""
    seen_visible = Counter(w for d in visible for w in set(_WORD.findall(d.text.lower())))
    cands = sorted({w for d in restricted for w in _WORD.findall(d.text.lower())} & set(seen_visible))
    rng.shuffle(cands)
    return cands[:k]


def measure_sample(tmp: Path, probes_per_principal: int, seed: int) -> list[dict]:
    from quarry.core.records import PUBLIC_GROUP, Principal
    from quarry.core.ingest.sources import SAMPLE_CORPUS, load_documents

    docs, _ = load_documents(SAMPLE_CORPUS)
    rng = random.Random(seed)
    rows = []
    for tenant in sorted({d.tenant for d in docs}):
        tdocs = [d for d in docs if d.tenant == tenant]
        full = _build(tmp / f"{tenant}-full", tdocs)
        groups = sorted({g for d in tdocs for g in d.acl if g != PUBLIC_GROUP})
        for g in groups:
            p = Principal(tenant=tenant, subject="probe", groups=frozenset({g}))
            visible = [d for d in tdocs if p.can_read(tenant, d.acl)]
            restricted = [d for d in tdocs if not p.can_read(tenant, d.acl)]
            if not restricted or not visible:
                continue
            own = _build(tmp / f"{tenant}-{g}", visible)
            terms = _probe_terms(restricted, visible, probes_per_principal, rng)
            queries = terms + [f"{a} {b}" for a, b in zip(terms[::2], terms[1::2])]
            rel, moved, n = [], 0, 0
            for q in queries:
                a, b = _lexical_top(full, p, q), _lexical_top(own, p, q)
                if not a and not b:
                    continue
                n += 1
                sb = dict(b)
                rel += [abs(s - sb[pid]) / sb[pid] for pid, s in a if sb.get(pid)]
                moved += [pid for pid, _ in a] != [pid for pid, _ in b]
            rows.append({"tenant": tenant, "group": g, "visible_docs": len(visible),
                         "restricted_docs": len(restricted), "queries": n,
                         "median_rel_score_change": statistics.median(rel) if rel else 0.0,
                         "max_rel_score_change": max(rel, default=0.0),
                         "order_differs": moved})
    return rows


def measure_targeted(tmp: Path, max_n: int) -> list[dict]:
    from quarry.core.records import Principal, SourceDocument

    filler = "the quarterly operations summary lists routine items for the team to review"

    def doc(i: str, text: str, acl: tuple[str, ...]) -> SourceDocument:
        return SourceDocument(doc_id=f"d-{i}", tenant="probe", acl=acl, doc_type="page", title=f"Note {i}",
                              text=f"{text}. {filler}.")

    base = [doc("v1", "zorblax appears in this visible note", ("staff",)),
            doc("v2", "kestrelid appears in this visible note", ("staff",))]
    base += [doc(f"bg{i}", "background note about kestrelid and other things", ("*",)) for i in range(3)]
    attacker = Principal(tenant="probe", subject="mallory", groups=frozenset({"staff"}))
    rows = []
    for n in range(max_n + 1):
        secret = [doc(f"r{i}", "zorblax acquisition plan", ("board",)) for i in range(n)]
        full = _build(tmp / f"targeted-{n}", base + secret)
        own = _build(tmp / f"targeted-{n}-own", base)
        a, b = _lexical_top(full, attacker, "zorblax kestrelid"), _lexical_top(own, attacker, "zorblax kestrelid")
        first = lambda hits: hits[0][0].split("@")[0] if hits else None  # noqa: E731
        rows.append({"restricted_with_secret": n, "first_tenant_stats": first(a), "first_visible_stats": first(b),
                     "score_v1_tenant": dict(a).get(next((p for p, _ in a if p.startswith("d-v1@")), ""), 0.0)})
    return rows


def report(sample: list[dict], targeted: list[dict]) -> str:
    lines = ["# BM25 IDF side channel", "",
             "Measured in-process with the real build and lexical leg (`python -m quarry.eval.idf_side_channel`). "
             "Deterministic (no timing), so the shared machine's load does not affect these numbers.", "",
             "## Sample corpus: visible top-10 with tenant-wide vs visible-only statistics", "",
             "| tenant | principal group | visible docs | restricted docs | probe queries | median rel. score change | "
             "max rel. score change | queries whose visible order differs |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in sample:
        lines.append(f"| {r['tenant']} | {r['group']} | {r['visible_docs']} | {r['restricted_docs']} | {r['queries']} | "
                     f"{r['median_rel_score_change']:.1%} | {r['max_rel_score_change']:.1%} | "
                     f"{r['order_differs']} / {r['queries']} |")
    tq = sum(r["queries"] for r in sample)
    tm = sum(r["order_differs"] for r in sample)
    lines += ["", f"Overall: the visible order differs in {tm} of {tq} probe queries ({tm / max(tq, 1):.1%}).", "",
              "## Targeted probe: one bit per query", "",
              "The attacker reads `d-v1` (holds *zorblax*) and `d-v2` (holds *kestrelid*, also in 3 public notes); "
              "`n` board-only documents hold *zorblax*. Query: `zorblax kestrelid`.", "",
              "| n restricted docs with the secret term | first result, tenant-wide stats | "
              "first result, visible-only stats | BM25 score of d-v1 (tenant-wide) |",
              "| ---: | --- | --- | ---: |"]
    for r in targeted:
        lines.append(f"| {r['restricted_with_secret']} | {r['first_tenant_stats']} | {r['first_visible_stats']} | "
                     f"{r['score_v1_tenant']:.3f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--probes", type=int, default=40, help="probe terms per (tenant, group) principal")
    ap.add_argument("--max-n", type=int, default=6, help="largest number of restricted docs in the targeted probe")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="write the Markdown report here (default: stdout only)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        sample = measure_sample(tmp, args.probes, args.seed)
        targeted = measure_targeted(tmp, args.max_n)
    md = report(sample, targeted)
    print(md)
    if args.out:
        Path(args.out).write_text(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
