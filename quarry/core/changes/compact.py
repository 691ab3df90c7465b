"""Compaction (DESIGN §3 "Updates"): fold a tenant's delta, tombstones and ACL overrides
into a new base generation that equals a full rebuild from the same final sources.

Nothing is re-chunked or re-embedded: the live rows of the base and the delta are taken
as they are (their stored embeddings), ACL overrides are written into their envelopes,
and the shards are rebuilt with fresh tenant-wide statistics, so passage ids and scores
equal a rebuild's. The new generation is published like a build's (manifest last,
checksums verified, ``CURRENT`` swapped atomically); the old watermark then names an
older generation and is ignored until the next ``apply-changes`` rebases onto the new one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from quarry.core.errors import UsageError
from quarry.core.index import layout
from quarry.core.index.build import build_tenant_index
from quarry.core.index.manifest import publish
from quarry.core.index.shards import TenantIndex
from quarry.core.records import ParentSection, Passage


@dataclass(frozen=True)
class CompactionInput:
    index: TenantIndex
    passages: list[Passage]
    parents: list[ParentSection]
    embeddings: np.ndarray


def _with_acl(rec, acl: tuple[str, ...] | None):
    if acl is None or tuple(rec.envelope.acl) == acl:
        return rec
    return rec.model_copy(update={"envelope": rec.envelope.model_copy(update={"acl": acl})})


def compaction_input(index: TenantIndex) -> CompactionInput:
    """Every row and parent section the overlay keeps, with its ACL override applied."""
    passages, vecs = [], []
    emb_cache: dict[int, np.ndarray] = {}
    for si, r in index.live_rows():
        sh = index.shards[si]
        p = sh.passage(r)
        _, acl = index.version_view(si, p.doc_id, p.envelope.version)
        passages.append(_with_acl(p, acl))
        if si not in emb_cache:
            emb_cache[si] = sh.embeddings()
        vecs.append(emb_cache[si][r])
    parents = []
    for si, sh in enumerate(index.shards):
        for pid in sh.parent_ids():
            sec = sh.parent(pid)
            live, acl = index.version_view(si, sec.envelope.doc_id, sec.envelope.version)
            if live:
                parents.append(_with_acl(sec, acl))
    dim = index.manifest.embedder.dim
    emb = np.stack(vecs).astype(np.float32) if vecs else np.zeros((0, dim), np.float32)
    return CompactionInput(index, passages, parents, emb)


def write_compacted(ci: CompactionInput) -> int:
    """Build (but do not publish) the compacted generation; returns its number."""
    ix, m = ci.index, ci.index.manifest
    if not ci.passages:
        raise UsageError(f"{ix.tenant}: every document was deleted; a tenant index cannot be empty")
    extra = {k: getattr(m, k) for k in ("contextualizer", "contextualizer_llm", "run_id") if k in m.model_fields_set}
    extra["compacted_from"] = {"generation": ix.generation, "delta": ix.delta_seq, "watermark": ix.watermark}
    return build_tenant_index(
        ix.root, ix.tenant, ci.passages, ci.parents, ci.embeddings, n_shards=len(ix.base_shards),
        embedder_name=m.embedder.name, chunker_version=m.chunker_version,
        source_watermark=m.source_watermark, extra=extra, publish=False,
        statement_encoder=_statement_encoder(ix),
    )


def _statement_encoder(index: TenantIndex):
    """Statement vectors of the compacted shards: the vectors the folded shards store
    (the same texts encode to the same vectors), the manifest's own model for any other;
    None when no shard of the index stores vectors (the compacted one stores none either)."""
    from quarry.core.evidence.vectors import VECTORS_FILE, known_vectors, reusing

    if not any((sh.dir / VECTORS_FILE).exists() for sh in index.shards):
        return None
    known = known_vectors(f for sh in index.shards for f in sh.facts())

    def model():
        from quarry.core.embed.factory import embedder_for_index

        return embedder_for_index(index.manifest).encode
    return reusing(known, model)


def publish_compacted(index: TenantIndex, generation: int) -> None:
    """Switch ``CURRENT`` to the compacted generation, unless changes were applied since
    the compaction read its input (they would be lost): then raise, and nothing changes."""
    if _live_watermark(index.root, index.tenant, index.generation) != index.watermark:
        raise UsageError(f"{index.tenant}: changes were applied during compaction; run it again")
    if layout.current_generation(index.root, index.tenant) != index.generation:
        raise UsageError(f"{index.tenant}: CURRENT moved during compaction; run it again")
    publish(index.root, index.tenant, generation)


def _live_watermark(root: str, tenant: str, generation: int) -> str | None:
    """The watermark of the changes applied to ``generation``: None when none was, and when the
    ``DELTA`` pointer still names a generation compacted away (it is stale, not a change)."""
    raw = layout.read_watermark(root, tenant)
    parsed = layout.parse_watermark(raw)
    return raw if parsed is not None and parsed[1] == generation else None


def compact(root: str, tenant: str) -> int | None:
    """Compact one tenant in-process; returns the new generation (None: nothing to fold)."""
    index = TenantIndex.load(root, tenant)
    if index.delta is None:
        return None
    gen = write_compacted(compaction_input(index))
    from quarry.core.rank.carry_over import carry_over  # deferred: ranking code loads only for compaction

    carry_over(root, tenant, index.generation, gen)
    publish_compacted(index, gen)
    return gen
