"""Shared helpers for the build-job tests: the in-process reference build and comparisons."""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np


def paused_at(stage: str, marker: Path) -> list[str]:
    """The command prefix that runs a module (``[*paused_at(...), "quarry", "build",
    args...]``) with its driver stopped at ``stage`` (see pause_at_stage.py)."""
    return [sys.executable, str(Path(__file__).with_name("pause_at_stage.py")), stage, str(marker)]


def reference_build(docs, root: str, tenant: str, *, contextualizer, embedder, shard_docs: int) -> int:
    """core only: enrich + chunk_document + contextualizer + embedder + build_tenant_index."""
    from quarry.core.ingest.chunking import CHUNKER_VERSION, chunk_document
    from quarry.core.ingest.enrich import enrich
    from quarry.core.ingest.contextualize import with_context
    from quarry.core.embed.embedders import passage_text_for_embedding
    from quarry.core.index.build import build_tenant_index

    mine = [d for d in docs if d.tenant == tenant]
    passages, parents = [], []
    for d in map(enrich, mine):
        ps, pars = chunk_document(d)
        ps = with_context(ps, contextualizer.contextualize(d, ps))
        passages += ps
        parents += pars
    emb = embedder.encode([passage_text_for_embedding(p) for p in passages])
    return build_tenant_index(root, tenant, passages, parents, emb, n_shards=max(1, math.ceil(len(mine) / shard_docs)),
                              embedder_name=embedder.name, chunker_version=CHUNKER_VERSION,
                              statement_encoder=embedder.encode)  # as the in-process build (build_corpus)


def all_groups(docs, tenant: str) -> frozenset[str]:
    return frozenset(g for d in docs if d.tenant == tenant for g in d.acl)


def principal_for(docs, tenant: str):
    from quarry.core.records import Principal

    return Principal(tenant=tenant, subject="tester", groups=all_groups(docs, tenant))


def search(index, principal, query: str, embedder, top_k: int = 5):
    from quarry.core.records import SearchRequest
    from quarry.core.search.in_process import search as search_in_process

    return search_in_process(index, principal, SearchRequest(query=query, top_k=top_k), embedder)


def compare_indexes(a, b, principal, queries: Sequence[str], embedder, *, exact: bool = True, top_k: int = 5) -> int:
    """Assert both indexes return the same top-k (ids and scores); returns hits compared."""
    n = 0
    for q in queries:
        ra, rb = search(a, principal, q, embedder, top_k), search(b, principal, q, embedder, top_k)
        assert [e.passage_id for e in ra.excerpts] == [e.passage_id for e in rb.excerpts], q
        assert [e.text for e in ra.excerpts] == [e.text for e in rb.excerpts], q
        ca = [(c.passage_id, c.fused_score, c.lexical_score, c.dense_score) for c in ra.candidates]
        cb = [(c.passage_id, c.fused_score, c.lexical_score, c.dense_score) for c in rb.candidates]
        assert [x[0] for x in ca] == [x[0] for x in cb], q
        for x, y in zip(ca, cb):
            for s, t in zip(x[1:], y[1:]):
                if exact:
                    assert s == t, (q, x, y)
                elif s is not None or t is not None:
                    assert s is not None and t is not None and abs(s - t) < 1e-4, (q, x, y)
        n += len(ra.excerpts)
    return n


def passage_ids(root: str, tenant: str) -> list[str]:
    from quarry.core.index.shards import TenantIndex

    idx = TenantIndex.load(root, tenant)
    return sorted(pid for sh in idx.shards for pid in sh.passage_ids)


def assert_excerpts_are_evidence(index, principal, queries, embedder) -> int:
    """Every excerpt's text is its passage's text or its parent's text, never the context."""
    n = 0
    for q in queries:
        for ex in search(index, principal, q, embedder).excerpts:
            p = index.passage(ex.passage_id, principal)
            assert p is not None
            assert p.context, f"{p.passage_id} has no context"
            parent = index.parent(p.parent_id, principal)
            allowed = {p.text} | ({parent.text} if parent else set())
            assert ex.text in allowed or (ex.truncated and p.text.startswith(ex.text)), ex.passage_id
            assert p.context not in ex.text, ex.passage_id
            n += 1
    return n


def write_jsonl(path: Path, lines: Sequence[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def embeddings_equal(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and bool(np.array_equal(a, b))
