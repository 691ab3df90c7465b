"""Building a tenant's generation: each shard from passages, parents and their embeddings
into a local folder, uploaded under ``<root>/<tenant>/gen-<n>/shard-<k>/``; then the
manifest (``quarry.core.index.manifest``), written last.

:func:`build_and_upload_shard` is the one way every job writes a shard (the Spark build,
``apply-changes``' delta shard, compaction); :func:`build_tenant_index` is the in-process
build of a whole generation, the reference the Spark job must match.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from quarry.core.evidence.graph import passage_facts
from quarry.core.evidence.vectors import VECTORS_FILE, Encode, encode_facts
from quarry.core.index import layout
from quarry.core.index.filters import FilterColumns
from quarry.core.index.lexical import TermStats, bm25_with_stats, lexical_text, term_stats
from quarry.core.index.manifest import ShardInfo, make_manifest, write_manifest
from quarry.core.index.manifest import publish as publish_generation
from quarry.core.records import ParentSection, Passage
from quarry.core.text.tokenizer import tokenize

APPROX_THRESHOLD = 50_000  # rows per shard above which the dense leg uses HNSW


def shard_of(doc_id: str, n_shards: int) -> int:
    """Shard by document hash: all passages of a document live in one shard."""
    if n_shards < 1:
        raise ValueError("n_shards must be >= 1")
    return int.from_bytes(hashlib.sha1(doc_id.encode()).digest()[:8], "big") % n_shards


def n_shards_for(n_docs: int, shard_docs: int | None) -> int:
    """Shards per tenant: one per ``shard_docs`` documents (at least one)."""
    if not shard_docs:
        return 1
    return max(1, math.ceil(n_docs / shard_docs))


def _passages_table(passages: Sequence[Passage]):
    import pyarrow as pa

    return pa.table({
        "passage_id": [p.passage_id for p in passages],
        "doc_id": [p.doc_id for p in passages],
        "version": [p.envelope.version for p in passages],
        "anchor": [p.anchor for p in passages],
        "parent_id": [p.parent_id for p in passages],
        "text": [p.text for p in passages],
        "context": [p.context for p in passages],
        "token_count": pa.array([p.token_count for p in passages], type=pa.int32()),
        "record": [p.model_dump_json() for p in passages],
    })


def _parents_table(parents: Sequence[ParentSection]):
    import pyarrow as pa

    return pa.table({
        "parent_id": [s.parent_id for s in parents],
        "doc_id": [s.envelope.doc_id for s in parents],
        "token_count": pa.array([s.token_count for s in parents], type=pa.int32()),
        "record": [s.model_dump_json() for s in parents],
    })


def _dense_index(embeddings: np.ndarray, approx_threshold: int):
    import faiss

    n, dim = embeddings.shape
    if n > approx_threshold:
        index = faiss.IndexHNSWFlat(dim, 32, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = 80
        kind = "hnsw32"
    else:
        index = faiss.IndexFlatIP(dim)
        kind = "flat"
    if n:
        index.add(np.ascontiguousarray(embeddings, dtype=np.float32))
    return index, kind


def build_and_upload_shard(
    tenant: str,
    shard: int,
    passages: Sequence[Passage],
    parents: Sequence[ParentSection],
    embeddings: np.ndarray,
    stats: TermStats,
    uri: str,
    approx_threshold: int = APPROX_THRESHOLD,
    evidence_facts: bool = True,
    statement_encoder: Encode | None = None,
) -> ShardInfo:
    """Build one shard in a temporary local folder and upload it to ``uri`` (a shard folder
    of a generation or a delta): the one way every job writes a shard. The files are a pure
    function of the inputs: the same passages, embeddings and stats give identical bytes.

    ``statement_encoder`` is the tenant's embedder's ``encode`` (the model the passages were
    embedded with): with it, each statement's masked clause is encoded into
    ``evidence_vectors.npy`` (:mod:`quarry.core.evidence.vectors`); without it no such file."""
    import faiss
    import pyarrow.parquet as pq

    if len(passages) != len(embeddings):
        raise ValueError(f"{len(passages)} passages but {len(embeddings)} embeddings")
    order = sorted(range(len(passages)), key=lambda i: passages[i].passage_id)  # stable row ids
    passages = [passages[i] for i in order]
    embeddings = np.asarray(embeddings, dtype=np.float32)[order] if len(order) else np.asarray(embeddings, np.float32)
    parents = sorted(parents, key=lambda s: s.parent_id)
    # A local destination is built beside it and renamed into place (one rename, no copy);
    # a remote one is built in a temporary folder, uploaded and verified by re-reading.
    local = layout.is_local(uri)
    if local:
        dest = Path(layout.fs_and_path(uri)[1])
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = tempfile.mkdtemp(prefix=f".{dest.name}.building-", dir=dest.parent)
        os.chmod(tmp, 0o755)  # a shard folder like any other once renamed (mkdtemp makes it 0700)
    else:
        tmp = tempfile.mkdtemp(prefix="quarry-shard-")
    try:
        out = Path(tmp)
        token_lists = [tokenize(lexical_text(p)) for p in passages]
        bm25_with_stats(token_lists, stats).save(str(out / "bm25"), show_progress=False)
        index, kind = _dense_index(embeddings, approx_threshold)
        faiss.write_index(index, str(out / "dense.faiss"))
        np.save(out / "embeddings.npy", embeddings)
        pq.write_table(_passages_table(passages), out / "passages.parquet")
        pq.write_table(_parents_table(parents), out / "parents.parquet")
        if evidence_facts:  # statements and flags, the evidence graph's input (else derived at first load)
            facts = passage_facts(passages)
            (out / "evidence.jsonl").write_text("".join(f.to_json() + "\n" for f in facts))
            if statement_encoder is not None:
                np.save(out / VECTORS_FILE, encode_facts(facts, statement_encoder))
        cols = FilterColumns.from_envelopes(tenant, [p.envelope for p in passages])
        np.savez(out / "filters.npz", **cols.to_arrays())
        (out / "shard.json").write_text(json.dumps({
            "tenant": tenant, "shard": shard, "groups": list(cols.groups), "doc_types": list(cols.doc_types),
            "passages": len(passages), "parents": len(parents), "dense_kind": kind,
            "dim": int(embeddings.shape[1]) if embeddings.ndim == 2 else 0,
        }, sort_keys=True))
        info = ShardInfo(
            shard=shard, passages=len(passages), parents=len(parents),
            documents=len({p.doc_id for p in passages}), dense_kind=kind,
            checksums=layout.file_checksums(out), sizes=layout.file_sizes(out),
        )
        if local:
            if dest.exists():  # a retried task's earlier copy
                shutil.rmtree(dest)
            os.replace(out, dest)  # the bytes hashed above are the bytes in place
            tmp = None
        else:
            layout.upload_dir(out, uri)
            # Verified here, where it was written (a Spark task: the executor), by re-reading the
            # upload; the publisher then checks only presence and sizes (manifest.publish).
            layout.verify_files(uri, info.checksums)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    return info


def build_tenant_index(
    root: str,
    tenant: str,
    passages: Sequence[Passage],
    parents: Sequence[ParentSection],
    embeddings: np.ndarray,
    *,
    n_shards: int = 1,
    embedder_name: str = "unknown",
    embedder_encoder: str | None = None,
    chunker_version: str = "unknown",
    source_watermark: str | None = None,
    extra: dict[str, Any] | None = None,
    publish: bool = True,
    approx_threshold: int = APPROX_THRESHOLD,
    evidence_facts: bool = True,
    statement_encoder: Encode | None = None,
) -> int:
    """In-process build of one tenant's new generation (the Spark job does the same steps
    distributed). Returns the generation number; publishes it unless ``publish=False``."""
    if any(p.tenant != tenant for p in passages):
        raise ValueError(f"build_tenant_index({tenant!r}) was given passages of another tenant")
    gen = layout.next_generation(root, tenant)
    stats = term_stats(passages)
    by_shard: dict[int, list[int]] = {s: [] for s in range(n_shards)}
    for i, p in enumerate(passages):
        by_shard[shard_of(p.doc_id, n_shards)].append(i)
    emb = np.asarray(embeddings, dtype=np.float32)
    infos = []
    for s, rows in by_shard.items():
        docs = {passages[i].doc_id for i in rows}
        infos.append(build_and_upload_shard(
            tenant, s, [passages[i] for i in rows], [x for x in parents if x.envelope.doc_id in docs],
            emb[rows] if rows else np.zeros((0, emb.shape[1] if emb.ndim == 2 else 0), np.float32),
            stats, layout.shard_dir(root, tenant, gen, s), approx_threshold, evidence_facts,
            statement_encoder,
        ))
    dim = int(emb.shape[1]) if emb.ndim == 2 else 0
    write_manifest(root, make_manifest(
        tenant, gen, infos, n_docs=stats.n_docs, avgdl=stats.avgdl, embedder_name=embedder_name, dim=dim,
        chunker_version=chunker_version, source_watermark=source_watermark, encoder=embedder_encoder,
        **(extra or {})))
    if publish:
        publish_generation(root, tenant, gen)
    return gen
