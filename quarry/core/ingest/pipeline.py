"""The in-process build: the reference the Spark job must match, and the small-corpus path
used by the demo, the tests and the BEIR runner. Steps as DESIGN §7, on one machine."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from quarry.core.ingest.chunking import CHUNKER_VERSION, ChunkSettings, chunk_document
from quarry.core.ingest.contextualize import Contextualizer, NoContextualizer, with_context
from quarry.core.embed.embedders import Embedder, passage_text_for_embedding
from quarry.core.ingest.enrich import enrich
from quarry.core.index.build import build_tenant_index, n_shards_for
from quarry.core.records import ParentSection, Passage, SourceDocument


def prepare(
    docs: Sequence[SourceDocument],
    contextualizer: Contextualizer | None = None,
    chunk_settings: ChunkSettings = ChunkSettings(),
    enrich_envelopes: bool = True,
) -> tuple[list[Passage], list[ParentSection]]:
    """Enrich, chunk and contextualize documents (one tenant or many). Enrichment runs
    before chunking so every passage's envelope carries what the text states."""
    ctx = contextualizer or NoContextualizer()
    passages: list[Passage] = []
    parents: list[ParentSection] = []
    for d in docs:
        if enrich_envelopes:
            d = enrich(d)
        ps, pa = chunk_document(d, chunk_settings)
        passages.extend(with_context(ps, ctx.contextualize(d, ps)))
        parents.extend(pa)
    return passages, parents


def build_corpus(
    docs: Sequence[SourceDocument],
    root: str,
    embedder: Embedder,
    contextualizer: Contextualizer | None = None,
    chunk_settings: ChunkSettings = ChunkSettings(),
    shard_docs: int | None = None,
    extra: dict[str, Any] | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, int]:
    """Build and publish one generation per tenant; returns {tenant: generation}."""
    by_tenant: dict[str, list[SourceDocument]] = {}
    for d in docs:
        by_tenant.setdefault(d.tenant, []).append(d)
    out = {}
    for tenant, tdocs in sorted(by_tenant.items()):
        passages, parents = prepare(tdocs, contextualizer, chunk_settings)
        if progress:
            progress(f"{tenant}: {len(tdocs)} docs -> {len(passages)} passages, embedding with {embedder.name}")
        emb = embedder.encode([passage_text_for_embedding(p) for p in passages])
        out[tenant] = build_tenant_index(
            root, tenant, passages, parents, emb, n_shards=n_shards_for(len(tdocs), shard_docs),
            embedder_name=embedder.name, embedder_encoder=getattr(embedder, "encoder", None),
            chunker_version=CHUNKER_VERSION, extra=extra, statement_encoder=embedder.encode,
        )
    return out
