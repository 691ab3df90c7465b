"""Token sizes of the funnel for a corpus, for a workload profile's ``funnel`` section:
tokens a candidate shows the second stage (chunk + title + heading trail) and tokens of a
parent section after expansion, each at p50/p95. In-process chunking only (no index, no
model): ``python -m quarry.eval.funnel_stats [--source DIR]`` (default: the sample corpus)."""

from __future__ import annotations

import argparse
import json

from quarry.core.capacity.arithmetic import Dist
from quarry.core.ingest.contextualize_extractive import ExtractiveContextualizer
from quarry.core.ingest.pipeline import prepare
from quarry.core.ingest.sources import SAMPLE_CORPUS, load_documents
from quarry.core.text.units import count_tokens, heading_text


def funnel_token_stats(source: str | None = None) -> dict[str, object]:
    docs, _bad = load_documents(source or SAMPLE_CORPUS)
    cand, sect = [], []
    for tenant in sorted({d.tenant for d in docs}):
        passages, parents = prepare([d for d in docs if d.tenant == tenant], ExtractiveContextualizer())
        cand += [p.token_count + count_tokens(heading_text(p.envelope.title, p.heading_path)) for p in passages]
        sect += [s.token_count for s in parents]
    return {"documents": len(docs), "passages": len(cand), "sections": len(sect),
            "tokens_per_candidate": Dist.from_samples(cand).model_dump(),
            "section_tokens": Dist.from_samples(sect).model_dump()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--source", default=None, help="corpus folder or file (default: quarry/sample_corpus)")
    print(json.dumps(funnel_token_stats(ap.parse_args().source)))


if __name__ == "__main__":
    main()
