"""Executor-side stage functions of the build job (DESIGN §7).

Each function here runs inside a Spark Python worker (``mapInPandas``/``applyInPandas``)
and delegates to ``quarry.core`` in a few lines. Records travel between stages as JSON
strings (``model_dump_json``/``model_validate_json``) next to the scalar columns Spark
needs to partition and group (tenant, doc_id, shard). Nothing here runs on the driver
except the schema constants.

Module-level caches (``_EMBEDDERS``, ``_CONTEXTUALIZERS``) live as long as the Python
worker: with ``spark.python.worker.reuse=true`` a model is loaded once per worker, not
once per task or batch.
"""

from __future__ import annotations

import itertools
import json
import os
import pickle
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from pydantic import ValidationError

from quarry.core.index import layout
from quarry.core.ingest.chunking import ChunkSettings, chunk_document
from quarry.core.ingest.contextualize import LLMSettings, with_context
from quarry.core.ingest.contextualize_factory import make_contextualizer
from quarry.core.embed.factory import build_embedder
from quarry.core.embed.embedders import passage_text_for_embedding
from quarry.core.ingest.enrich import enrich
from quarry.core.index.build import build_and_upload_shard, shard_of
from quarry.core.index.lexical import TermStats, lexical_text
from quarry.core.records import ParentSection, Passage, SourceDocument, is_slug, validation_reason
from quarry.core.ingest.sources import read_file, record_id, validate
from quarry.core.text.units import count_tokens
from quarry.core.text.tokenizer import tokenize

UNKNOWN_TENANT = "_unknown"

# --------------------------------------------------------------------------- schemas (DDL)

FILES_SCHEMA = "file_idx long, path string"
RAW_SCHEMA = "file_idx long, rec_idx long, source string, raw binary"
VALIDATED_SCHEMA = (
    "kind string, tenant string, doc_id string, version string, file_idx long, rec_idx long, "
    "source string, record_id string, reason string, doc_json string"
)
QUARANTINE_IN = "tenant string, record_id string, source string, reason string"
QUARANTINE_OUT = "tenant string, n long"
CHUNKED_SCHEMA = (
    "tenant string, doc_id string, shard int, doc_json string, passages array<string>, "
    "parents array<string>, n_passages int, n_parents int"
)
COST_COLUMNS = (
    "documents", "passages", "requests", "input_tokens", "output_tokens",
    "estimated_usage", "retries", "failures", "fallbacks",
)  # fmt: skip
CONTEXT_SCHEMA = (
    "tenant string, doc_id string, shard int, passages array<string>, parents array<string>, "
    "n_passages int, n_parents int, " + ", ".join(f"ctx_{c} long" for c in COST_COLUMNS)
)
EMBEDDED_SCHEMA = (
    "tenant string, shard int, doc_id string, passage_id string, passage_json string, "
    "embedding binary, embed_tokens long, worker_pid long, model_loads long"
)
PARTIAL_STATS_SCHEMA = "tenant string, stats binary"
TENANT_STATS_SCHEMA = "tenant string, n_docs long, total_len long, terms long, stats binary"
SHARD_INFO_SCHEMA = (
    "tenant string, shard int, passages long, parents long, documents long, dense_kind string, "
    "dim int, checksums string, sizes string"
)


def tenant_of_raw(raw: Mapping[str, Any]) -> str:
    """Which tenant an input record is accounted under: its ``tenant`` when that is a
    valid tenant slug, else ``_unknown`` (a record whose tenant cannot be read)."""
    t = raw.get("tenant") if isinstance(raw, Mapping) else None
    return t if is_slug(t) else UNKNOWN_TENANT


# --------------------------------------------------------------------------- read


def read_files(batches: Iterator[pd.DataFrame], root: str) -> Iterator[pd.DataFrame]:
    """(file_idx, path) -> one row per raw record, the record pickled as-is.

    Uses core's per-format readers with the source root, so Markdown doc ids derived from
    relative paths, ``_source`` strings and unparseable-record markers are exactly those of
    ``core.ingest.sources.read_records(root)``.
    """
    base = Path(root)
    for pdf in batches:
        for file_idx, path in zip(pdf["file_idx"], pdf["path"]):
            f = Path(path)
            rows = {"file_idx": [], "rec_idx": [], "source": [], "raw": []}
            for i, raw in enumerate(read_file(f, base if base.is_dir() else f.parent)):
                rows["file_idx"].append(int(file_idx))
                rows["rec_idx"].append(i)
                rows["source"].append(str(raw.get("_source", path)))
                rows["raw"].append(pickle.dumps(raw, protocol=pickle.HIGHEST_PROTOCOL))
                if len(rows["raw"]) >= 2048:
                    yield pd.DataFrame(rows)
                    rows = {k: [] for k in rows}
            if rows["raw"]:
                yield pd.DataFrame(rows)


# --------------------------------------------------------------------------- validate


def validate_records(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
    """Raw record -> ('doc', tenant, doc_id, version, doc_json) or ('bad', ..., reason)."""
    for pdf in batches:
        out: dict[str, list] = {k: [] for k in (
            "kind", "tenant", "doc_id", "version", "file_idx", "rec_idx", "source", "record_id", "reason", "doc_json")}
        for fi, ri, src, blob in zip(pdf["file_idx"], pdf["rec_idx"], pdf["source"], pdf["raw"]):
            raw = pickle.loads(blob)
            try:
                doc = validate(raw)
            except ValidationError as e:
                row = ("bad", tenant_of_raw(raw), None, None, record_id(raw), validation_reason(e), None)
            else:
                row = ("doc", doc.tenant, doc.doc_id, doc.version, doc.key, None, doc.model_dump_json())
            kind, tenant, doc_id, version, rid, reason, dj = row
            for k, v in (("kind", kind), ("tenant", tenant), ("doc_id", doc_id), ("version", version),
                         ("file_idx", int(fi)), ("rec_idx", int(ri)), ("source", src), ("record_id", rid),
                         ("reason", reason), ("doc_json", dj)):
                out[k].append(v)
        yield pd.DataFrame(out)


def _none(v: Any) -> Any:
    """pandas turns a null string into NaN; JSON output wants null."""
    return None if v is None or (isinstance(v, float) and v != v) else v


def write_quarantine(batches: Iterator[pd.DataFrame], out_uri: str) -> Iterator[pd.DataFrame]:
    """Write this partition's quarantined records as one JSONL part file under
    ``<index-root>/_quarantine/<run-id>/`` (a retried task overwrites its own part) and
    return per-tenant counts. Works for local paths and object stores alike (fsspec)."""
    from pyspark import TaskContext

    frames = [pdf for pdf in batches if len(pdf)]
    if not frames:
        return
    pdf = pd.concat(frames, ignore_index=True)
    ctx = TaskContext.get()
    part = ctx.partitionId() if ctx is not None else os.getpid()
    lines = [
        json.dumps({"tenant": t, "record_id": _none(r), "source": s, "reason": why}, sort_keys=True)
        for t, r, s, why in zip(pdf["tenant"], pdf["record_id"], pdf["source"], pdf["reason"])
    ]
    layout.write_atomic(layout.join(out_uri, f"part-{part:05d}.jsonl"), ("\n".join(lines) + "\n").encode())
    counts = pdf.groupby("tenant").size()
    yield pd.DataFrame({"tenant": list(counts.index), "n": [int(x) for x in counts.values]})


# --------------------------------------------------------------------------- chunk


def chunk_docs(batches: Iterator[pd.DataFrame], n_shards: Mapping[str, int],
               max_tokens: int = 200) -> Iterator[pd.DataFrame]:
    """One row per document, enriched (``core.ingest.enrich``, as ``core.ingest.pipeline.prepare`` does):
    its passages and parent sections (JSON) and its shard."""
    settings = ChunkSettings(max_tokens=max_tokens)
    for pdf in batches:
        rows = []
        for tenant, doc_id, dj in zip(pdf["tenant"], pdf["doc_id"], pdf["doc_json"]):
            doc = enrich(SourceDocument.model_validate_json(dj))
            passages, parents = chunk_document(doc, settings)
            rows.append((tenant, doc_id, shard_of(doc_id, n_shards[tenant]), doc.model_dump_json(),
                         [p.model_dump_json() for p in passages], [s.model_dump_json() for s in parents],
                         len(passages), len(parents)))
        yield pd.DataFrame(rows, columns=["tenant", "doc_id", "shard", "doc_json", "passages", "parents",
                                          "n_passages", "n_parents"])


# --------------------------------------------------------------------------- contextualize

_CONTEXTUALIZERS: dict[str, Any] = {}
_CTX_LOCK = threading.Lock()


def get_contextualizer(kind: str, llm_json: str | None, api_key: Any):
    """One contextualizer per Python worker and configuration."""
    key = f"{kind}|{llm_json}"
    with _CTX_LOCK:
        c = _CONTEXTUALIZERS.get(key)
        if c is None:
            llm = LLMSettings.model_validate_json(llm_json) if llm_json else None
            c = _CONTEXTUALIZERS[key] = make_contextualizer(kind, llm=llm, api_key=api_key)
        return c


def contextualize_docs(batches: Iterator[pd.DataFrame], kind: str, llm_json: str | None,
                       api_key: Any) -> Iterator[pd.DataFrame]:
    """Set each passage's ``context``, per document (the document is sent once to an LLM).

    The cost account's delta for each (batch, tenant) lands on that group's first row, so
    the driver sums exact per-tenant costs with one aggregate; a retried task recomputes
    its rows, so nothing is counted twice.
    """
    ctx = get_contextualizer(kind, llm_json, api_key)
    for pdf in batches:
        out = []
        for tenant, idx in pdf.groupby("tenant", sort=False).groups.items():
            sub = pdf.loc[idx]
            items = [(SourceDocument.model_validate_json(dj), [Passage.model_validate_json(p) for p in ps])
                     for dj, ps in zip(sub["doc_json"], sub["passages"])]
            before = ctx.account.snapshot()
            preambles = ctx.contextualize_many(items)
            after = ctx.account.snapshot()
            delta = {c: int(after[c]) - int(before[c]) for c in COST_COLUMNS}
            for j, ((doc, ps), pre, (_, r)) in enumerate(zip(items, preambles, sub.iterrows())):
                row = {
                    "tenant": tenant, "doc_id": r["doc_id"], "shard": int(r["shard"]),
                    "passages": [p.model_dump_json() for p in with_context(ps, pre)],
                    "parents": list(r["parents"]), "n_passages": int(r["n_passages"]),
                    "n_parents": int(r["n_parents"]),
                }
                for c in COST_COLUMNS:
                    row[f"ctx_{c}"] = delta[c] if j == 0 else 0
                out.append(row)
        yield pd.DataFrame(out, columns=[c.split()[0] for c in CONTEXT_SCHEMA.split(", ")])


# --------------------------------------------------------------------------- embed

_EMBEDDERS: dict[tuple[str, int], Any] = {}
_EMBED_LOADS: dict[tuple[str, int], int] = {}
_EMB_LOCK = threading.Lock()


def get_embedder(spec: str, batch_size: int, torch_threads: int | None = None):
    """The worker's cached embedder (loaded once per Python worker, on GPU when present).

    ``torch_threads``: CPU threads per task (``spark.task.cpus``), so N concurrent tasks
    on N cores do not oversubscribe the CPU with N x N torch threads.
    """
    key = (spec, batch_size)
    with _EMB_LOCK:
        e = _EMBEDDERS.get(key)
        if e is None:
            e = build_embedder(spec, batch_size=batch_size)
            if hasattr(e, "load"):
                if torch_threads:
                    import torch

                    torch.set_num_threads(torch_threads)
                e.load()
            _EMBEDDERS[key] = e
            _EMBED_LOADS[key] = _EMBED_LOADS.get(key, 0) + 1
        return e, _EMBED_LOADS[key]


def embed_passages(batches: Iterator[pd.DataFrame], spec: str, batch_size: int,
                   torch_threads: int | None = None) -> Iterator[pd.DataFrame]:
    """(tenant, shard, doc_id, passage_json) -> + float32 embedding bytes, in batches."""
    emb, loads = get_embedder(spec, batch_size, torch_threads)
    pid = os.getpid()
    for pdf in batches:
        if not len(pdf):
            continue
        passages = [Passage.model_validate_json(p) for p in pdf["passage_json"]]
        texts = [passage_text_for_embedding(p) for p in passages]
        vecs = np.asarray(emb.encode(texts), dtype=np.float32)
        yield pd.DataFrame({
            "tenant": pdf["tenant"].to_numpy(), "shard": pdf["shard"].to_numpy(),
            "doc_id": pdf["doc_id"].to_numpy(), "passage_id": [p.passage_id for p in passages],
            "passage_json": pdf["passage_json"].to_numpy(),
            "embedding": [v.tobytes() for v in vecs],
            "embed_tokens": [count_tokens(t) for t in texts],
            "worker_pid": pid, "model_loads": loads,
        })


# --------------------------------------------------------------------------- term stats
#
# A tenant's statistics are computed on the executors and travel only to that tenant's own
# shard tasks: partial per (partition, tenant), merged per tenant by a groupBy(tenant), then
# joined to the tenant's (tenant, shard) keys. Nothing proportional to the vocabularies of
# all tenants exists on the driver or in any one task.


def stats_to_bytes(s: TermStats) -> bytes:
    return json.dumps({"n_docs": s.n_docs, "total_len": s.total_len, "df": s.df}, separators=(",", ":")).encode()


def stats_from_bytes(b: bytes) -> TermStats:
    d = json.loads(b)
    return TermStats(int(d["n_docs"]), int(d["total_len"]), {str(k): int(v) for k, v in d["df"].items()})


def partial_term_stats(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
    """(tenant, passage_json) -> one partial TermStats per tenant of this partition (mapInPandas).

    Counted batch by batch: memory is one batch's tokens plus each tenant's term counts, not
    the partition's token lists."""
    partial: dict[str, TermStats] = {}
    for pdf in batches:
        for tenant, pj in zip(pdf["tenant"], pdf["passage_json"]):
            partial.setdefault(tenant, TermStats()).add(tokenize(lexical_text(Passage.model_validate_json(pj))))
    if partial:
        yield pd.DataFrame({"tenant": list(partial), "stats": [stats_to_bytes(s) for s in partial.values()]})


def _merged_stats_row(tenant: str, blobs) -> dict[str, Any]:
    total = TermStats()
    for b in blobs:
        total = total.merge(stats_from_bytes(b))
    return {"tenant": tenant, "n_docs": total.n_docs, "total_len": total.total_len,
            "terms": len(total.df), "stats": stats_to_bytes(total)}


def _rows(batches: Iterator[pd.DataFrame], cols: Sequence[str]) -> Iterator[tuple]:
    for pdf in batches:
        yield from zip(*(pdf[c] for c in cols))


def _in_frames(rows: Iterator[dict[str, Any]], columns: list[str], n: int = 1024) -> Iterator[pd.DataFrame]:
    while chunk := list(itertools.islice(rows, n)):
        yield pd.DataFrame(chunk, columns=columns)


def merge_sorted_term_stats(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
    """mapInPandas over the partials, hash-partitioned and sorted by tenant: each tenant's
    partials arrive one after another (possibly across batches) and merge into its row. One
    Python call per partition, not one per tenant (a ``groupBy(tenant).applyInPandas`` paid
    Spark's per-group cost 10,000 times for 10,000 small tenants)."""
    merged = (_merged_stats_row(str(tenant), [b for _, b in rows])
              for tenant, rows in itertools.groupby(_rows(batches, ("tenant", "stats")), key=lambda r: r[0]))
    yield from _in_frames(merged, _STATS_COLUMNS)


_STATS_COLUMNS = [c.split()[0] for c in TENANT_STATS_SCHEMA.split(", ")]


# --------------------------------------------------------------------------- build shards


SHARD_KIND_STATS, SHARD_KIND_PARENT, SHARD_KIND_PASSAGE = 0, 1, 2
_INFO_COLUMNS = [c.split()[0] for c in SHARD_INFO_SCHEMA.split(", ")]


def build_sorted_shards(batches: Iterator[pd.DataFrame], *, root: str, generations: Mapping[str, int],
                        dim: int, approx_threshold: int, spec: str | None = None, batch_size: int = 64,
                        torch_threads: int | None = None) -> Iterator[pd.DataFrame]:
    """mapInPandas over every shard's rows in one frame (tenant, shard, kind, payload,
    embedding, stats: the tenant's statistics row, the shard's parent sections and its
    passages with their embeddings), hash-partitioned by (tenant, shard) and sorted by
    (tenant, shard, kind). A shard's rows arrive one after another; the shard is built and
    uploaded (:func:`build_one_shard`) when its last row has passed, so a task holds one
    shard at a time and many small tenants share one Python call (a
    ``cogroup().applyInPandas`` paid Spark's per-group cost once per shard). Yields one
    ShardInfo row per shard.

    ``spec``: the embed stage's embedder spec; each statement's masked clause is encoded
    with it (the worker's cached model, :func:`get_embedder`) into the shard's
    ``evidence_vectors.npy``. None: no statement vectors."""
    cols = ("tenant", "shard", "kind", "payload", "embedding", "stats")
    encode = None
    if spec is not None:
        def encode(texts):  # the model loads on the first shard that states anything
            return get_embedder(spec, batch_size, torch_threads)[0].encode(list(texts))

    def built() -> Iterator[dict[str, Any]]:
        for (tenant, shard), rows in itertools.groupby(_rows(batches, cols), key=lambda r: (str(r[0]), int(r[1]))):
            stats, parents, passages, emb = [], [], [], []
            for _, _, kind, payload, e, st in rows:
                if kind == SHARD_KIND_STATS:
                    stats.append(st)
                elif kind == SHARD_KIND_PARENT:
                    parents.append(payload)
                else:
                    passages.append(payload)
                    emb.append(e)
            yield build_one_shard((tenant, shard), stats, parents, passages, emb, root=root,
                                  generations=generations, dim=dim, approx_threshold=approx_threshold,
                                  statement_encoder=encode)

    yield from _in_frames(built(), _INFO_COLUMNS, n=64)


def build_one_shard(key, stats_blobs, parent_jsons, passage_jsons, embeddings, *, root: str,
                    generations: Mapping[str, int], dim: int, approx_threshold: int,
                    statement_encoder=None) -> dict[str, Any]:
    """Build and upload one (tenant, shard) with ``core.index.build.build_and_upload_shard``
    into the tenant's new generation folder; its ShardInfo row.

    ``stats_blobs`` must hold exactly one row, the tenant's statistics; a shard that hash
    sharding left empty arrives with that row alone and is built empty, here, like any other."""
    tenant, shard = str(key[0]), int(key[1])
    blobs = [b for b in stats_blobs if b is not None]
    if len(blobs) != 1:
        raise RuntimeError(f"{tenant} shard {shard}: expected one statistics row, got {len(blobs)}")
    stats = stats_from_bytes(blobs[0])
    passages = [Passage.model_validate_json(p) for p in passage_jsons]
    parents = [ParentSection.model_validate_json(p) for p in parent_jsons if isinstance(p, str)]
    if passages:
        emb = np.stack([np.frombuffer(b, dtype=np.float32) for b in embeddings])
    else:
        emb = np.zeros((0, dim), np.float32)
    info = build_and_upload_shard(tenant, shard, passages, parents, emb, stats,
                                  layout.shard_dir(root, tenant, generations[tenant], shard), approx_threshold,
                                  statement_encoder=statement_encoder)
    return {
        "tenant": tenant, "shard": shard, "passages": info.passages, "parents": info.parents,
        "documents": info.documents, "dense_kind": info.dense_kind, "dim": int(emb.shape[1]) if emb.ndim == 2 else dim,
        "checksums": json.dumps(info.checksums, sort_keys=True),  # verified on this executor after upload
        "sizes": json.dumps(info.sizes or {}, sort_keys=True),
    }
