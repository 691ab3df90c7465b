"""Delta generations (DESIGN §3 "Updates"): write and publish a tenant's change overlay.

A delta holds the fold of every change applied since the base generation was built
(``state.json``) and, when upserts were applied, one small shard of their passages. Its
BM25 statistics are the tenant-wide statistics of what a rebuild would index: the base's,
minus the rows the overlay tombstones, plus the delta's rows. Base rows keep the scores
they were built with, so scores over base + delta are close to a rebuild's, not equal;
:func:`quarry.core.changes.compact.compact` makes them equal.

The Spark job (``quarry.jobs.apply_changes``) and the in-process :func:`apply_local` share
:func:`current_state`, :func:`quarry.core.changes.log.fold` and :func:`publish_delta`; they
differ only in where upserts are chunked, contextualized and embedded.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from quarry.core.index import layout
from quarry.core.changes.log import Change, FoldResult, TenantState, dump_state, fold, parse_state, with_lags
from quarry.core.errors import UsageError
from quarry.core.ingest.chunking import ChunkSettings
from quarry.core.ingest.contextualize import LLMSettings
from quarry.core.embed.factory import check_embedder
from quarry.core.embed.embedders import passage_text_for_embedding
from quarry.core.evidence.vectors import known_vectors, reusing
from quarry.core.index.build import build_and_upload_shard
from quarry.core.index.lexical import TermStats, lexical_text
from quarry.core.index.manifest import IndexManifest
from quarry.core.index.shards import Delta, TenantIndex
from quarry.core.ingest.pipeline import prepare
from quarry.core.records import ParentSection, Passage
from quarry.core.text.tokenizer import tokenize


def current_state(index: TenantIndex) -> TenantState:
    """The applied-change state over ``index``'s base generation: the live delta's state,
    or the last published one rebased after a compaction or rebuild, or a fresh one."""
    if index.delta is not None:
        return index.delta.state
    parsed = layout.parse_watermark(layout.read_watermark(index.root, index.tenant))
    if parsed is not None:
        fs, path = layout.fs_and_path(layout.join(layout.delta_dir(index.root, index.tenant, parsed[0]), "state.json"))
        with fs.open(path, "r") as f:
            return parse_state(f.read()).rebased(index.generation)
    return TenantState(tenant=index.tenant, base=index.generation)


def base_versions(index: TenantIndex):
    """doc_id -> {version: acl} as the base generation holds them (the fold's starting point)."""
    def lookup(doc_id: str) -> dict[str, tuple[str, ...]]:
        out: dict[str, tuple[str, ...]] = {}
        for si, r in index._doc_rows.get(doc_id, []):
            if si < len(index.base_shards) and not index.shards[si].filters.deleted[r]:
                out.setdefault(index.shards[si].versions[r], ())
        return out

    return lookup


@dataclass(frozen=True)
class UpsertContextualizer:
    """How upserts over a base are contextualized: ``kind`` (with ``llm``, the endpoint
    configuration, for 'llm'), the base's own kind, and ``fallback``: why ``kind`` differs
    from what the base was built with, when it does (recorded in the delta's manifest and
    the job report, never silent)."""

    kind: str
    base: str | None
    llm: LLMSettings | None = None
    fallback: str | None = None

    def record(self) -> dict:
        out = {"kind": self.kind, "base": self.base, "fallback": self.fallback}
        if self.llm is not None:
            out["llm"] = {"base_url": self.llm.base_url, "model": self.llm.model}
        return out


def upsert_contextualizer(manifest: IndexManifest, requested: str = "auto", llm: LLMSettings | None = None,
                          use_recorded_llm: bool = True) -> UpsertContextualizer:
    """The contextualizer for upserts: ``requested``, or for 'auto' what the base was built
    with (the Spark build records it), the LLM included: with ``llm`` when the run is given
    an endpoint, else the base's recorded endpoint configuration (unless
    ``use_recorded_llm`` is off). An LLM base without an endpoint for this run falls back
    to 'none', and says so in ``fallback``. Raises ``UsageError`` for 'llm' requested
    without any endpoint."""
    base = manifest.contextualizer
    endpoint = llm
    if endpoint is None and use_recorded_llm and manifest.contextualizer_llm:
        endpoint = LLMSettings.model_validate(manifest.contextualizer_llm)
    if requested == "llm" or (requested == "auto" and base == "llm"):
        if endpoint is not None:
            return UpsertContextualizer("llm", base, endpoint)
        if requested == "llm":
            raise UsageError("--contextualizer llm needs an endpoint: --llm-url and --llm-model, or a base "
                             "built with the llm contextualizer (its endpoint is recorded in the manifest)")
        why = ("the LLM endpoint was switched off for this run (--no-llm)" if manifest.contextualizer_llm else
               "the base's manifest records no LLM endpoint and none was given (--llm-url/--llm-model)")
        return UpsertContextualizer("none", base, fallback=f"base contextualized with llm; upserts with none: {why}")
    if requested != "auto":
        return UpsertContextualizer(requested, base,
                                    fallback=None if requested == base else f"requested {requested} over a {base} base")
    return UpsertContextualizer(base if base in ("extractive", "none") else "none", base,
                                fallback=None if base in ("extractive", "none", None) else f"unknown base contextualizer {base!r}")


def fold_for(index: TenantIndex, changes: Sequence[Change]) -> FoldResult:
    return fold(current_state(index), changes, base_versions(index))


def base_stats(index: TenantIndex) -> TermStats:
    """The base generation's tenant-wide statistics, read back from its shards."""
    df: dict[str, int] = {}
    for sh in index.base_shards:
        for t, c in sh.document_frequencies().items():
            df[t] = df.get(t, 0) + c
    bm = index.manifest.bm25
    n = bm.n_docs if "n_docs" in bm.model_fields_set else sum(len(s) for s in index.base_shards)
    return TermStats(n_docs=n, total_len=int(round(bm.avgdl * n)), df=df)


@dataclass(frozen=True)
class DeltaRows:
    """Upserted passages ready for the delta shard: built like the base (same stages)."""

    passages: list[Passage]
    parents: list[ParentSection]
    embeddings: np.ndarray


def publish_delta(index: TenantIndex, result: FoldResult, fresh: DeltaRows, changes: Sequence[Change],
                  embedder_name: str, contextualizer: dict | None = None, statement_encoder=None) -> int:
    """Write the next delta for ``result.state`` over ``index``'s base and switch the
    watermark. ``fresh`` holds the passages of ``result.upserts`` (and only those).
    ``statement_encoder`` (a callable returning the tenant embedder's ``encode``, built on
    first need) encodes the delta shard's statement vectors; the previous delta's rows
    reuse their stored vectors. Returns the delta's sequence number."""
    root, tenant = index.root, index.tenant
    live = result.state.live_delta()
    seq = layout.next_delta(root, tenant)
    d = layout.delta_dir(root, tenant, seq)
    prev = index.delta if index.delta is not None and index.delta.state.base == index.generation else None
    shard_ref = prev and layout_ref_of(prev)
    if result.upserts or (prev is None and live):
        rows = _carry_over(index, live, set(result.upserts)) if prev is not None else DeltaRows([], [], _empty(fresh))
        passages = rows.passages + fresh.passages
        parents = rows.parents + fresh.parents
        parts = [e for e in (rows.embeddings, fresh.embeddings) if len(e)]
        emb = np.concatenate(parts) if parts else _empty(fresh)
        if {(p.doc_id, p.envelope.version) for p in passages} - set(live):
            raise RuntimeError(f"{tenant}: delta passages outside the live delta versions")
        stats = _delta_stats(index, result.state, passages)
        known = known_vectors(prev.shard.facts()) if prev is not None and prev.shard is not None else {}
        encode = reusing(known, statement_encoder) if statement_encoder is not None else None
        info = build_and_upload_shard(tenant, 0, passages, parents, emb, stats, layout.join(d, "shard"),
                                      statement_encoder=encode)
        shard_ref = f"delta-{seq}/shard"
        shard_sums = {f"shard/{k}": v for k, v in info.checksums.items()}
    else:
        shard_sums = {}
        if not live:
            shard_ref = None
    visible_at = time.time()
    state = with_lags(result.state, changes, result.outcomes, visible_at).model_copy(update={"seq": seq})
    body = dump_state(state)
    layout.write_atomic(layout.join(d, "state.json"), body)
    sums = {"state.json": hashlib.sha256(body).hexdigest(), **shard_sums}
    layout.write_json(layout.join(d, "manifest.json"), {
        "tenant": tenant, "seq": seq, "base": index.generation, "shard": shard_ref, "checksums": sums,
        "embedder": embedder_name, "applied": state.applied, "published_at": visible_at,
        **({"contextualizer": contextualizer} if contextualizer is not None else {}),
    })
    if layout.current_generation(root, tenant) != index.generation:  # the delta would name a retired base
        raise RuntimeError(f"{tenant}: CURRENT moved while changes were applied (a build or compaction "
                           f"published); apply the changes again")
    layout.publish_delta(root, tenant, seq)
    return seq


def layout_ref_of(delta) -> str | None:
    if delta.shard is None:
        return None
    return f"{delta.shard.dir.parent.name}/shard"


def _empty(fresh: DeltaRows) -> np.ndarray:
    dim = fresh.embeddings.shape[1] if fresh.embeddings.ndim == 2 else 0
    return np.zeros((0, dim), np.float32)


def _carry_over(index: TenantIndex, live: dict[tuple[str, str], str], replaced: set[tuple[str, str]]) -> DeltaRows:
    """The previous delta's rows that stay live and were not replaced by these changes
    (their passages and embeddings are reused, never re-embedded)."""
    sh = index.delta.shard if index.delta is not None else None
    if sh is None:
        return DeltaRows([], [], np.zeros((0, 0), np.float32))
    keep = [r for r in range(len(sh)) if (sh.doc_ids[r], sh.versions[r]) in live
            and (sh.doc_ids[r], sh.versions[r]) not in replaced]
    parents = [p for p in (sh.parent(pid) for pid in sh.parent_ids())
               if (p.envelope.doc_id, p.envelope.version) in live
               and (p.envelope.doc_id, p.envelope.version) not in replaced]
    emb = sh.embeddings()
    return DeltaRows([sh.passage(r) for r in keep], parents, emb[keep] if keep else emb[:0])


def _delta_stats(index: TenantIndex, state: TenantState, delta_passages: Sequence[Passage]) -> TermStats:
    """Tenant-wide statistics of base-minus-tombstoned plus the delta's rows."""
    probe = TenantIndex(index.root, index.tenant, index.generation, index.manifest, index.base_shards,
                        _state_only(state))
    gone = []
    for si, rows in enumerate(probe.hidden_rows()):
        sh = probe.shards[si]
        gone.extend(tokenize(lexical_text(sh.passage(int(r)))) for r in rows)
    return base_stats(index).subtract(TermStats.from_tokens(gone)).merge(
        TermStats.from_tokens([tokenize(lexical_text(p)) for p in delta_passages]))


def _state_only(state: TenantState):
    return Delta(seq=state.seq, watermark="", state=state, shard=None)


def apply_local(root: str, tenant: str, changes: Sequence[Change], embedder, contextualizer=None,
                chunk_settings=None, contextualizer_record: dict | None = None) -> tuple[int | None, FoldResult]:
    """Apply one tenant's changes in-process (tests, small tenants): the same fold and
    publish as the Spark job, upserts prepared by ``core.ingest.pipeline.prepare``.
    Returns (delta seq or None when nothing was applied, fold result)."""
    index = TenantIndex.load(root, tenant)
    check_embedder(index.manifest, embedder)  # the manifest is the contract: upserts use the base's model
    result = fold_for(index, changes)
    if not any(o == "applied" for o in result.outcomes.values()):
        return None, result
    docs = [c.document for c in result.upserts.values()]
    passages, parents = prepare(docs, contextualizer, chunk_settings or ChunkSettings())
    dim = index.manifest.embedder.dim
    emb = embedder.encode([passage_text_for_embedding(p) for p in passages]) if passages \
        else np.zeros((0, dim), np.float32)
    seq = publish_delta(index, result, DeltaRows(passages, parents, np.asarray(emb, np.float32)), changes,
                        embedder.name, contextualizer_record, statement_encoder=lambda: embedder.encode)
    return seq, result
