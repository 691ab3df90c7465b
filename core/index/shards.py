"""Per-tenant shard indexes: bm25s lexical + FAISS dense + passages store + filter columns.

Tenants never share an index (BM25 statistics would leak between them). Term statistics
are tenant-wide (:class:`TermStats`), so a tenant's merged top-k over shards equals its
unsharded top-k. Each shard is built from passages, parents and their embeddings into a
local folder, then uploaded under ``<root>/<tenant>/gen-<n>/shard-<k>/``.
"""

from __future__ import annotations

import hashlib
import json
import math
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from quarry.core.index import layout
from quarry.core.embed.embedders import passage_text_for_embedding
from quarry.core.changes.log import parse_state
from quarry.core.index.dense_gpu import GpuDense
from quarry.core.index.filters import FilterColumns, RowOverlay
from quarry.core.lru import LRU
from quarry.core.records import ParentSection, Passage, Principal
from quarry.core.text.tokenizer import tokenize

TOKENIZER_VERSION = "ident-stem-1"
BM25_K1 = 1.5
BM25_B = 0.75
APPROX_THRESHOLD = 50_000  # rows per shard above which the dense leg uses HNSW
ROW_BITS = 32  # a tenant-wide row id packs (shard << ROW_BITS) | local row


def pack_row(shard: int, row: int) -> int:
    return (shard << ROW_BITS) | row


def unpack_row(gid: int) -> tuple[int, int]:
    return gid >> ROW_BITS, gid & ((1 << ROW_BITS) - 1)


def shard_of(doc_id: str, n_shards: int) -> int:
    """Shard by document hash: all passages of a document live in one shard."""
    if n_shards < 1:
        raise ValueError("n_shards must be >= 1")
    return int.from_bytes(hashlib.sha1(doc_id.encode()).digest()[:8], "big") % n_shards


def lexical_text(p: Passage) -> str:
    """The lexical leg indexes what the dense leg embeds (title, headings, context, text)."""
    return passage_text_for_embedding(p)


@dataclass
class TermStats:
    """Tenant-wide BM25 statistics; mergeable across partitions and shards."""

    n_docs: int = 0
    total_len: int = 0
    df: dict[str, int] = field(default_factory=dict)

    @classmethod
    def from_tokens(cls, token_lists: Sequence[Sequence[str]]) -> "TermStats":
        s = cls()
        for toks in token_lists:
            s.n_docs += 1
            s.total_len += len(toks)
            for t in set(toks):
                s.df[t] = s.df.get(t, 0) + 1
        return s

    def subtract(self, other: "TermStats") -> "TermStats":
        """These statistics without ``other``'s rows (rows a delta tombstones)."""
        df = dict(self.df)
        for t, c in other.df.items():
            left = df.get(t, 0) - c
            if left < 0:
                raise ValueError(f"cannot subtract statistics: term {t!r} would have df {left}")
            if left:
                df[t] = left
            else:
                df.pop(t, None)
        return TermStats(self.n_docs - other.n_docs, self.total_len - other.total_len, df)

    def merge(self, other: "TermStats") -> "TermStats":
        df = dict(self.df)
        for t, c in other.df.items():
            df[t] = df.get(t, 0) + c
        return TermStats(self.n_docs + other.n_docs, self.total_len + other.total_len, df)

    @property
    def avgdl(self) -> float:
        return self.total_len / self.n_docs if self.n_docs else 0.0

    def idf(self, term: str) -> float:
        """Lucene's idf, as bm25s's default 'lucene' method computes it."""
        df = self.df.get(term, 0)
        return math.log(1 + (self.n_docs - df + 0.5) / (df + 0.5))


def term_stats(passages: Sequence[Passage]) -> TermStats:
    return TermStats.from_tokens([tokenize(lexical_text(p)) for p in passages])


def _bm25_with_stats(token_lists: Sequence[Sequence[str]], stats: TermStats):
    """A bm25s index whose scores use tenant-wide df/N/avgdl instead of the shard's own."""
    import bm25s

    vocab = sorted({t for toks in token_lists for t in toks})
    vid = {t: i for i, t in enumerate(vocab)}
    idf = np.array([stats.idf(t) for t in vocab], dtype=np.float64)
    rows, cols, tfs, lens = [], [], [], []
    for r, toks in enumerate(token_lists):
        ids, counts = np.unique(np.array([vid[t] for t in toks], dtype=np.int64), return_counts=True)
        rows.append(np.full(len(ids), r, dtype=np.int64))
        cols.append(ids)
        tfs.append(counts.astype(np.float64))
        lens.append(np.full(len(ids), len(toks), dtype=np.float64))
    n = len(token_lists)
    if rows:
        rows_a, cols_a, tf, dl = (np.concatenate(x) for x in (rows, cols, tfs, lens))
    else:
        rows_a = cols_a = np.zeros(0, dtype=np.int64)
        tf = dl = np.zeros(0)
    # Lucene BM25 term score: idf * tf / (tf + k1 * (1 - b + b * dl / avgdl)).
    denom = tf + BM25_K1 * (1 - BM25_B + BM25_B * dl / max(stats.avgdl, 1e-9))
    data = (idf[cols_a] * tf / denom).astype(np.float32)
    import scipy.sparse as sp

    csc = sp.csc_matrix((data, (rows_a, cols_a)), shape=(n, max(len(vocab), 1)), dtype=np.float32)
    bm = bm25s.BM25(k1=BM25_K1, b=BM25_B, method="lucene")
    bm.scores = {
        "data": csc.data.astype(np.float32),
        "indices": csc.indices.astype(np.int32),
        "indptr": csc.indptr.astype(np.int32),
        "num_docs": n,
    }
    bm.vocab_dict = vid if vocab else {"": 0}
    bm.nonoccurrence_array = None
    return bm


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


@dataclass(frozen=True)
class ShardInfo:
    shard: int
    passages: int
    parents: int
    documents: int
    dense_kind: str
    checksums: dict[str, str]

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


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
) -> ShardInfo:
    """Build one shard in a temporary local folder and upload it to ``uri`` (a shard folder
    of a generation or a delta): the one way every job writes a shard. The files are a pure
    function of the inputs: the same passages, embeddings and stats give identical bytes."""
    import faiss
    import pyarrow.parquet as pq

    if len(passages) != len(embeddings):
        raise ValueError(f"{len(passages)} passages but {len(embeddings)} embeddings")
    order = sorted(range(len(passages)), key=lambda i: passages[i].passage_id)  # stable row ids
    passages = [passages[i] for i in order]
    embeddings = np.asarray(embeddings, dtype=np.float32)[order] if len(order) else np.asarray(embeddings, np.float32)
    parents = sorted(parents, key=lambda s: s.parent_id)
    with tempfile.TemporaryDirectory(prefix="quarry-shard-") as tmp:
        out = Path(tmp) / "shard"
        out.mkdir()
        token_lists = [tokenize(lexical_text(p)) for p in passages]
        _bm25_with_stats(token_lists, stats).save(str(out / "bm25"), show_progress=False)
        index, kind = _dense_index(embeddings, approx_threshold)
        faiss.write_index(index, str(out / "dense.faiss"))
        np.save(out / "embeddings.npy", embeddings)
        pq.write_table(_passages_table(passages), out / "passages.parquet")
        pq.write_table(_parents_table(parents), out / "parents.parquet")
        if evidence_facts:  # statements and flags, the evidence graph's input (else derived at first load)
            from quarry.core.evidence.graph import passage_facts

            (out / "evidence.jsonl").write_text("".join(f.to_json() + "\n" for f in passage_facts(passages)))
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
            checksums=layout.file_checksums(out),
        )
        layout.upload_dir(out, uri)
    return info


class Shard:
    """A loaded shard: memory-mapped where the formats allow it."""

    def __init__(self, local_dir: str | Path):
        import bm25s
        import faiss
        import pyarrow as pa
        import pyarrow.parquet as pq

        d = Path(local_dir)
        self.dir = d
        meta = json.loads((d / "shard.json").read_text())
        self.shard: int = meta["shard"]
        self.tenant: str = meta["tenant"]
        self.dense_kind: str = meta["dense_kind"]
        self.bm25 = bm25s.BM25.load(str(d / "bm25"), mmap=True, show_progress=False, verbosity=0)
        flags = getattr(faiss, "IO_FLAG_MMAP_IFC", 0) | getattr(faiss, "IO_FLAG_READ_ONLY", 0)
        try:
            self.dense = faiss.read_index(str(d / "dense.faiss"), flags)
        except RuntimeError:  # an index type that cannot be memory-mapped
            self.dense = faiss.read_index(str(d / "dense.faiss"))
        self.passages = pq.read_table(pa.memory_map(str(d / "passages.parquet")))
        self.parents = pq.read_table(pa.memory_map(str(d / "parents.parquet")))
        with np.load(d / "filters.npz") as z:
            arrays = {k: z[k] for k in z.files}
        self.filters = FilterColumns.from_arrays(self.tenant, meta["groups"], meta["doc_types"], arrays)
        self.passage_ids: list[str] = self.passages.column("passage_id").to_pylist()
        self.doc_ids: list[str] = self.passages.column("doc_id").to_pylist()
        self.versions: list[str] = self.passages.column("version").to_pylist()
        self._records = self.passages.column("record")
        self.gpu = None  # a quarry.core.index.dense_gpu.GpuDense once attach_gpu() ran
        self._facts: list | None = None
        self._words: dict[int, frozenset[str]] = {}
        self._parent_row = {pid: i for i, pid in enumerate(self.parents.column("parent_id").to_pylist())}

    def __len__(self) -> int:
        return len(self.passage_ids)

    def facts(self) -> list:
        """Per row: the passage's stored evidence facts (``core.evidence_graph``); a shard
        built before facts were stored gets them from its text, once."""
        if self._facts is None:
            from quarry.core.evidence.graph import PassageFacts, passage_facts

            path = self.dir / "evidence.jsonl"
            if path.exists():
                self._facts = [PassageFacts.from_json(line) for line in path.read_text().splitlines() if line]
            else:
                self._facts = passage_facts([self.passage(r) for r in range(len(self))])
        return self._facts

    def row_words(self, row: int) -> frozenset[str]:
        """Stemmed words of a row's heading trail and text (choosing a linked document's passage)."""
        w = self._words.get(row)
        if w is None:
            p = self.passage(row)
            w = self._words[row] = frozenset(tokenize(" ".join(p.heading_path) + " " + p.text))
        return w

    def passage(self, row: int) -> Passage:
        return Passage.model_validate_json(self._records[row].as_py())

    def parent(self, parent_id: str) -> ParentSection | None:
        i = self._parent_row.get(parent_id)
        if i is None:
            return None
        return ParentSection.model_validate_json(self.parents.column("record")[i].as_py())

    def attach_gpu(self, faiss_module=None, **kw) -> None:
        """Serve this shard's dense leg from the GPU. Callers first prove the build honours
        selectors (``quarry.core.index.dense_gpu.choose_backend``); the post-filter below stays."""
        self.gpu = GpuDense(self.embeddings(), faiss_module, **kw)

    def parent_ids(self) -> list[str]:
        return list(self._parent_row)

    def embeddings(self) -> np.ndarray:
        return np.load(self.dir / "embeddings.npy")

    def document_frequencies(self) -> dict[str, int]:
        """Per-term document frequency in this shard, read back from the BM25 matrix
        (one stored column per vocabulary term; every posting is non-zero)."""
        indptr = np.asarray(self.bm25.scores["indptr"])
        counts = np.diff(indptr)
        return {t: int(counts[j]) for t, j in self.bm25.vocab_dict.items() if j < counts.size and counts[j]}

    def vocab_ids(self, tokens: Sequence[str]) -> list[int]:
        v = self.bm25.vocab_dict
        return [v[t] for t in tokens if t in v]

    def lexical(self, token_ids: Sequence[int], mask: np.ndarray, width: int, floor: float):
        """Top ``width`` visible rows by BM25, score strictly above ``floor`` (>= 0).
        The mask is applied inside bm25s (``weight_mask``): denied rows score exactly 0."""
        if not token_ids or not mask.any() or len(self) == 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        scores = self.bm25.get_scores_from_ids(list(token_ids), weight_mask=mask.astype(np.float32))
        keep = np.flatnonzero(scores > floor)
        if keep.size > width:
            keep = keep[np.argpartition(-scores[keep], width - 1)[:width]]
        return keep, scores[keep]

    def dense_search(self, qvec: np.ndarray, mask: np.ndarray, width: int, floor: float):
        """Top ``width`` visible rows by cosine; the mask is a FAISS IDSelector so denied
        rows are never compared."""
        import faiss

        allowed = int(mask.sum())
        if allowed == 0 or len(self) == 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        bits = np.packbits(mask.astype(np.uint8), bitorder="little")
        sel = faiss.IDSelectorBitmap(len(mask), faiss.swig_ptr(bits))
        if self.dense_kind.startswith("hnsw"):
            params = faiss.SearchParametersHNSW(sel=sel, efSearch=max(128, width))
        else:
            params = faiss.SearchParameters(sel=sel)
        k = min(width, allowed)
        if self.gpu is not None:
            dist, ids = self.gpu.search(qvec, mask, k)
        else:
            dist, ids = self.dense.search(np.ascontiguousarray(qvec.reshape(1, -1), dtype=np.float32), k,
                                          params=params)
            dist, ids = dist[0], ids[0]
        ok = (ids >= 0) & (dist > floor)
        ok &= mask[np.clip(ids, 0, len(mask) - 1)]  # defence in depth; never trust an index type
        del bits
        return ids[ok].astype(np.int64), dist[ok]


@dataclass(frozen=True)
class Delta:
    """A published change overlay over one base generation (see ``quarry.core.changes.log``)."""

    seq: int
    watermark: str  # the DELTA text this was loaded from: replicas compare it per request
    state: Any  # quarry.core.changes.log.TenantState
    shard: Shard | None  # upserted passages, or None when only deletes/ACL changes were applied


def load_delta(root: str, tenant: str, generation: int, watermark: str | None,
               cache_dir: str | None = None) -> Delta | None:
    """The delta a watermark names, if it applies to ``generation`` (else None)."""
    parsed = layout.parse_watermark(watermark)
    if parsed is None or parsed[1] != generation:
        return None
    seq = parsed[0]
    d = layout.delta_dir(root, tenant, seq)
    manifest = layout.read_json(layout.join(d, "manifest.json"))
    fs, path = layout.fs_and_path(layout.join(d, "state.json"))
    with fs.open(path, "r") as f:
        state = parse_state(f.read())
    shard = None
    if manifest.get("shard"):
        shard_uri = layout.join(layout.changes_dir(root, tenant), manifest["shard"])
        shard = Shard(layout.fetch_dir(shard_uri, cache_dir or tempfile.gettempdir()))
    return Delta(seq=seq, watermark=str(watermark), state=state, shard=shard)


class TenantIndex:
    """One tenant's live generation: its shards, the change overlay (delta shard and
    tombstone/ACL masks) and the principal-scoped lookups.

    ``shards`` holds the base generation's shards, then the delta's shard when there is
    one; the legs search them all alike. Every lookup goes through :meth:`masks`, which
    folds the overlay in, so a deleted or revoked row is never scored, fetched or expanded.
    """

    def __init__(self, root: str, tenant: str, generation: int, manifest: dict[str, Any], shards: list[Shard],
                 delta: Delta | None = None):
        self.root, self.tenant, self.generation, self.manifest = root, tenant, generation, manifest
        self.base_shards = list(shards)
        self.delta = delta
        self.shards = self.base_shards + ([delta.shard] if delta is not None and delta.shard is not None else [])
        self._pid: dict[str, tuple[int, int]] = {}
        self._doc_rows: dict[str, list[tuple[int, int]]] = {}
        for si, sh in enumerate(self.shards):  # delta rows come last: a replaced passage id maps to its new copy
            for r, (pid, did) in enumerate(zip(sh.passage_ids, sh.doc_ids)):
                self._pid[pid] = (si, r)
                self._doc_rows.setdefault(did, []).append((si, r))
        self._docs_state = dict(delta.state.docs) if delta is not None else {}
        self.overlays = self._overlays()
        self._masks: LRU[tuple, list[np.ndarray]] = LRU(256)

    @classmethod
    def load(cls, root: str, tenant: str, generation: int | None = None, cache_dir: str | None = None,
             with_changes: bool = True) -> "TenantIndex":
        gen = generation if generation is not None else layout.current_generation(root, tenant)
        if gen is None:
            raise FileNotFoundError(f"no published index for tenant {tenant!r} under {root}")
        manifest = layout.read_manifest(root, tenant, gen)
        cache = cache_dir or tempfile.gettempdir()
        shards = [
            Shard(layout.fetch_dir(layout.shard_dir(root, tenant, gen, s["shard"]), cache))
            for s in manifest["shards"]
        ]
        delta = load_delta(root, tenant, gen, layout.read_watermark(root, tenant), cache) if with_changes else None
        return cls(root, tenant, gen, manifest, shards, delta)

    @property
    def watermark(self) -> str | None:
        """The change watermark this index reflects (None: the base alone)."""
        return self.delta.watermark if self.delta is not None else None

    @property
    def delta_seq(self) -> int:
        return self.delta.seq if self.delta is not None else 0

    def with_watermark(self, watermark: str | None, cache_dir: str | None = None) -> "TenantIndex":
        """The same base generation under another change watermark (the base shards are
        shared, only the delta is read), or ``self`` when nothing changed."""
        if watermark == self.watermark:
            return self
        delta = load_delta(self.root, self.tenant, self.generation, watermark, cache_dir)
        if delta is None and self.delta is None:
            return self
        return TenantIndex(self.root, self.tenant, self.generation, self.manifest, self.base_shards, delta)

    # -- overlay ----------------------------------------------------------------------
    def _is_delta(self, si: int) -> bool:
        return si >= len(self.base_shards)

    def version_view(self, si: int, doc_id: str, version: str) -> tuple[bool, tuple[str, ...] | None]:
        """Whether shard ``si``'s copy of ``doc_id@version`` is live, and its ACL override."""
        st = self._docs_state.get(doc_id)
        if st is None or st.versions is None:
            return (not self._is_delta(si)), None
        vs = st.versions.get(version)
        if vs is None or (vs.origin == "delta") != self._is_delta(si):
            return False, None
        return True, vs.acl

    def _overlays(self):
        hidden: list[list[int]] = [[] for _ in self.shards]
        acl: list[dict[tuple[str, ...], list[int]]] = [{} for _ in self.shards]
        for doc_id in self._docs_state:
            for si, r in self._doc_rows.get(doc_id, []):
                live, override = self.version_view(si, doc_id, self.shards[si].versions[r])
                if not live:
                    hidden[si].append(r)
                elif override is not None:
                    acl[si].setdefault(override, []).append(r)
        return [RowOverlay(np.array(sorted(h), dtype=np.int64),
                           tuple((g, np.array(rows, dtype=np.int64)) for g, rows in sorted(a.items())))
                for h, a in zip(hidden, acl)]

    def hidden_rows(self) -> list[np.ndarray]:
        """Per shard: rows the overlay tombstones (deleted or replaced)."""
        return [o.hidden for o in self.overlays]

    def masks(self, principal: Principal, doc_type=None, valid_at=None) -> list[np.ndarray]:
        """Per-shard row masks with tombstones and ACL overrides folded in, cached by
        (tenant, generation, delta, groups, doc_type, valid_at)."""
        key = (self.tenant, self.generation, self.delta_seq, principal.tenant, tuple(sorted(principal.groups)),
               tuple(sorted(doc_type)) if doc_type else None, valid_at)
        hit = self._masks.get(key)
        if hit is not None:
            return hit
        ms = [o.mask(sh.filters, principal, doc_type, valid_at) for sh, o in zip(self.shards, self.overlays)]
        self._masks.put(key, ms)
        return ms

    def _visible(self, loc: tuple[int, int], principal: Principal) -> bool:
        si, r = loc
        return bool(self.masks(principal)[si][r])

    def row_of(self, passage_id: str) -> int | None:
        loc = self._pid.get(passage_id)
        return None if loc is None else pack_row(*loc)

    def passage_at(self, gid: int) -> Passage:
        si, r = unpack_row(gid)
        return self.shards[si].passage(r)

    def passage(self, passage_id: str, principal: Principal) -> Passage | None:
        """The passage if it exists *and* the principal may read it; None otherwise, so
        'does not exist' and 'may not see' are indistinguishable."""
        loc = self._pid.get(passage_id)
        if loc is None or not self._visible(loc, principal):
            return None
        return self.shards[loc[0]].passage(loc[1])

    def parent(self, parent_id: str, principal: Principal) -> ParentSection | None:
        """The parent section under the overlay: a deleted or replaced copy is skipped, an
        overridden ACL replaces the one the section was built with."""
        for si in reversed(range(len(self.shards))):  # the delta's copy first
            sec = self.shards[si].parent(parent_id)
            if sec is None:
                continue
            live, override = self.version_view(si, sec.envelope.doc_id, sec.envelope.version)
            if not live:
                continue
            return sec if principal.can_read(sec.envelope.tenant, override or sec.envelope.acl) else None
        return None

    def document(self, doc_id: str, principal: Principal) -> list[Passage]:
        rows = [loc for loc in self._doc_rows.get(doc_id, []) if self._visible(loc, principal)]
        return [self.shards[si].passage(r) for si, r in rows]

    def live_rows(self):
        """Every (shard, row) the overlay keeps, whoever asks: what a compaction folds."""
        for si, (sh, o) in enumerate(zip(self.shards, self.overlays)):
            keep = np.ones(len(sh), dtype=bool)
            keep[o.hidden] = False
            keep &= ~sh.filters.deleted
            for r in np.flatnonzero(keep):
                yield si, int(r)

    def __len__(self) -> int:
        return sum(len(s) for s in self.shards)


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
        ))
    manifest = make_manifest(tenant, gen, infos, stats, embedder_name, int(emb.shape[1]) if emb.ndim == 2 else 0,
                             chunker_version, source_watermark, extra, encoder=embedder_encoder)
    layout.write_json(layout.manifest_path(root, tenant, gen), manifest)
    if publish:
        layout.publish(root, tenant, gen)
    return gen


def make_manifest(tenant, generation, infos: Sequence[ShardInfo], stats: TermStats, embedder_name: str, dim: int,
                  chunker_version: str, source_watermark: str | None, extra: dict[str, Any] | None,
                  encoder: str | None = None) -> dict[str, Any]:
    return {
        "tenant": tenant,
        "generation": generation,
        "shards": [i.to_json() for i in sorted(infos, key=lambda i: i.shard)],
        "counts": {
            "passages": sum(i.passages for i in infos),
            "parents": sum(i.parents for i in infos),
            "documents": sum(i.documents for i in infos),
        },
        "chunker_version": chunker_version,
        "tokenizer": TOKENIZER_VERSION,
        "bm25": {"k1": BM25_K1, "b": BM25_B, "method": "lucene", "n_docs": stats.n_docs, "avgdl": stats.avgdl},
        # encoder: the backend that embedded the passages (torch, onnx, onnx-int8, hashing)
        "embedder": {"name": embedder_name, "dim": dim, **({"encoder": encoder} if encoder else {})},
        "source_watermark": source_watermark,
        **(extra or {}),
    }
