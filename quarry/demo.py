"""``quarry demo``: the main job on the embedded defaults.

Builds the shipped sample corpus (3 tenants) into per-tenant indexes and runs a handful of
searches as different principals, printing cited results: an exact identifier, a dated
question, a group-restricted document seen by an insider and by an outsider, and a
question the corpus cannot answer.
"""

from __future__ import annotations

import datetime as dt
import sys
import time
from pathlib import Path

DEFAULT_ROOT = "var/demo-index"

SEARCHES = [
    # (tenant, groups, query, doc_type, valid_at, why)
    ("acme", "all-staff", "E-4471", None, None, "an exact error code: the lexical leg keeps it whole"),
    ("acme", "all-staff", "Which settlement cutoff applies to Acme's EUR batch?", None, "2026-01-19",
     "dated question: evidence in force on 19 January 2026, with authority and validity"),
    ("acme", "all-staff", "treasury account details", None, None,
     "a finance-admins-only document, searched by all-staff: it must not appear"),
    ("acme", "finance-admins", "treasury account details", None, None, "the same search by finance-admins"),
    ("globex", "all-staff", "Does the Pro plan include SSO?", None, None, "the pricing footnote case"),
    ("initech", "all-staff", "What is the data retention period in Brazil?", None, None,
     "a question the corpus cannot answer: an honest empty result"),
]


def add_arguments(p) -> None:
    p.add_argument("--index-root", default=DEFAULT_ROOT, help=f"where to build the indexes (default {DEFAULT_ROOT})")
    p.add_argument("--embedder", default=None, help="local sentence-transformers dir, or 'hashing' (default: packaged MiniLM)")


def run(args) -> int:
    from quarry.core.contextualize import ExtractiveContextualizer
    from quarry.core.embedding import HashingEmbedder, SentenceTransformerEmbedder
    from quarry.core.index import TenantIndex
    from quarry.core.pipeline import build_corpus
    from quarry.core.records import Principal, SearchRequest
    from quarry.core.search import hybrid_search
    from quarry.core.sources import SAMPLE_CORPUS, load_documents
    from quarry.search_cmd import format_result

    say = lambda m: print(f"[demo] {m}", flush=True)  # noqa: E731
    embedder = HashingEmbedder() if args.embedder == "hashing" else SentenceTransformerEmbedder(args.embedder)
    docs, bad = load_documents(SAMPLE_CORPUS)
    say(f"sample corpus: {len(docs)} documents, {len(bad)} quarantined, from {SAMPLE_CORPUS}")
    t = time.perf_counter()
    gens = build_corpus(docs, args.index_root, embedder, ExtractiveContextualizer(), progress=say)
    say(f"built {', '.join(f'{k} gen-{v}' for k, v in gens.items())} under {Path(args.index_root).resolve()} "
        f"in {time.perf_counter() - t:.1f}s")
    indexes = {t: TenantIndex.load(args.index_root, t) for t in gens}
    for tenant, groups, query, doc_type, valid_at, why in SEARCHES:
        principal = Principal(tenant=tenant, subject="demo", groups=frozenset(groups.split(",")))
        req = SearchRequest(query=query, top_k=3, doc_type=doc_type,
                            valid_at=dt.date.fromisoformat(valid_at) if valid_at else None)
        print(f"\n=== {tenant} as {groups}: {query!r}" + (f" valid_at={valid_at}" if valid_at else ""))
        print(f"    ({why})")
        print(format_result(hybrid_search(indexes[tenant], principal, req, embedder)))
    return 0


if __name__ == "__main__":
    from quarry.cli import main

    sys.exit(main(["demo", *sys.argv[1:]]))
