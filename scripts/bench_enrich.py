"""Enrichment speed on BEIR SciFact abstracts (python scripts/bench_enrich.py [N] [DIR]).

Loads N documents as ``core.sources.load_beir_corpus`` wraps them, warms the spaCy
pipeline and dateparser once (a per-process cost), then times ``core.enrich.enrich``
over all of them and prints documents per second and what was extracted.
"""

from __future__ import annotations

import collections
import sys
import time

from quarry.core.text import nlp
from quarry.core.ingest.enrich import enrich
from quarry.core.ingest.sources import load_beir_corpus


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    path = sys.argv[2] if len(sys.argv) > 2 else "/work/shared/data/beir/scifact"
    docs = load_beir_corpus(path, tenant="scifact", limit=n)
    t0 = time.perf_counter()
    nlp.pipeline()
    nlp.parse_date("15 January 2026", tenant="warm-up")  # loads dateparser
    warm = time.perf_counter() - t0
    t0 = time.perf_counter()
    out = [enrich(d) for d in docs]
    dt_s = time.perf_counter() - t0
    fields = collections.Counter(f for e in out for f in e.extracted)
    print(f"{len(docs)} docs ({sum(len(d.text) for d in docs) / 1e6:.1f} MB) in {dt_s:.2f} s: "
          f"{len(docs) / dt_s:.0f} docs/s, {1e3 * dt_s / len(docs):.2f} ms/doc; warm-up {warm:.1f} s; "
          f"extracted {dict(fields)}")


if __name__ == "__main__":
    main()
