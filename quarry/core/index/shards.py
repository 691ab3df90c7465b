"""Loaded shards and a tenant's live generation: bm25s lexical + FAISS dense + passages
store + filter columns, memory-mapped, with the change overlay folded in.

A shard folder is written by ``quarry.core.index.build``; a generation is named by its
manifest (``quarry.core.index.manifest``). :class:`TenantIndex` is what every search,
fetch and job reads: the base generation's shards, then the delta's shard when changes
were applied, behind principal-scoped row masks.
"""

from __future__ import annotations

import json
import tempfile
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from quarry.core.changes.log import TenantState, parse_state
from quarry.core.evidence.graph import PassageFacts, passage_facts
from quarry.core.evidence.vectors import VECTORS_FILE, attach
from quarry.core.index import disk_cache, layout
from quarry.core.index.dense_gpu import GpuDense
from quarry.core.index.filters import FilterColumns, RowOverlay
from quarry.core.index.manifest import IndexManifest, read_manifest
from quarry.core.index.rows import pack_row, unpack_row
from quarry.core.lru import LRU
from quarry.core.records import ParentSection, Passage, Principal
from quarry.core.text.tokenizer import tokenize

# Rough CPython sizes for the per-row objects the byte estimate counts (a dict entry with
# its key string, a list slot with its string, one row's parsed evidence facts).
_DICT_ENTRY_BYTES = 160
_LIST_ITEM_BYTES = 90
_FACTS_ROW_BYTES = 600


def _mapped_bytes(d: Path) -> int:
    """Bytes of the shard's memory-mapped files (the BM25 arrays and the FAISS index)."""
    files = [*(d / "bm25").glob("*.npy"), d / "dense.faiss"]
    return sum(f.stat().st_size for f in files if f.exists())


class Shard:
    """A loaded shard: memory-mapped where the formats allow it."""

    def __init__(self, local_dir: str | Path):
        import bm25s
        import faiss
        import pyarrow as pa
        import pyarrow.parquet as pq

        d = Path(local_dir)
        self.dir = d
        disk_cache.pin(d)  # a bounded disk cache never deletes a copy a loaded shard reads
        weakref.finalize(self, disk_cache.unpin, str(d))
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
        self._records = self.passages.column("record")
        self.gpu = None  # a quarry.core.index.dense_gpu.GpuDense once attach_gpu() ran
        self._facts: list | None = None
        self._words: dict[int, frozenset[str]] = {}
        # Per-row Python objects (id lists, the parent-id dict) are built on first use, not
        # at load: a search reads rows by number; the arrow columns stay the store.
        self._lists: dict[str, list[str]] = {}
        self._parent_rows: dict[str, int] | None = None
        self.mapped_bytes = _mapped_bytes(d)

    def _column(self, name: str) -> list[str]:
        col = self._lists.get(name)
        if col is None:
            col = self._lists[name] = self.passages.column(name).to_pylist()
        return col

    @property
    def passage_ids(self) -> list[str]:
        return self._column("passage_id")

    @property
    def doc_ids(self) -> list[str]:
        return self._column("doc_id")

    @property
    def versions(self) -> list[str]:
        return self._column("version")

    @property
    def _parent_row(self) -> dict[str, int]:
        if self._parent_rows is None:
            self._parent_rows = {pid: i for i, pid in enumerate(self.parents.column("parent_id").to_pylist())}
        return self._parent_rows

    @property
    def heap_bytes(self) -> int:
        """An estimate of the bytes this shard holds on the heap: the decoded arrow tables,
        the filter columns, the BM25 vocabulary dict and whatever per-row lists were built
        (memory-mapped files are :attr:`mapped_bytes`, apart)."""
        vocab = len(self.bm25.vocab_dict) * _DICT_ENTRY_BYTES
        lists = sum(len(v) for v in self._lists.values()) * _LIST_ITEM_BYTES
        parents = len(self._parent_rows) * _DICT_ENTRY_BYTES if self._parent_rows is not None else 0
        facts = len(self._facts) * _FACTS_ROW_BYTES + sum(
            f.vectors.nbytes for f in self._facts if f.vectors is not None) if self._facts is not None else 0
        return (int(self.passages.nbytes) + int(self.parents.nbytes) + self.filters.nbytes + vocab + lists
                + parents + facts + len(self._words) * _DICT_ENTRY_BYTES * 4)

    def __len__(self) -> int:
        return int(self.passages.num_rows)

    def facts(self) -> list:
        """Per row: the passage's stored evidence facts (``core.evidence_graph``) with their
        statement vectors when the shard stores them (``evidence_vectors.npy``); a shard
        built before facts were stored gets them from its text, once (without vectors)."""
        if self._facts is None:
            path = self.dir / "evidence.jsonl"
            if path.exists():
                facts = [PassageFacts.from_json(line) for line in path.read_text().splitlines() if line]
                vec_path = self.dir / VECTORS_FILE
                self._facts = attach(facts, np.load(vec_path) if vec_path.exists() else None)
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
    state: TenantState
    shard: Shard | None  # upserted passages, or None when only deletes/ACL changes were applied


def load_delta(root: str, tenant: str, generation: int, watermark: str | None,
               cache_dir: str | None = None, cache_bytes: int | None = None) -> Delta | None:
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
        shard = Shard(layout.fetch_dir(shard_uri, cache_dir or tempfile.gettempdir(), cache_bytes))
    return Delta(seq=seq, watermark=str(watermark), state=state, shard=shard)


class TenantIndex:
    """One tenant's live generation: its shards, the change overlay (delta shard and
    tombstone/ACL masks) and the principal-scoped lookups.

    ``shards`` holds the base generation's shards, then the delta's shard when there is
    one; the legs search them all alike. Every lookup goes through :meth:`masks`, which
    folds the overlay in, so a deleted or revoked row is never scored, fetched or expanded.
    """

    def __init__(self, root: str, tenant: str, generation: int, manifest: IndexManifest, shards: list[Shard],
                 delta: Delta | None = None):
        self.root, self.tenant, self.generation, self.manifest = root, tenant, generation, manifest
        self.base_shards = list(shards)
        self.delta = delta
        self.shards = self.base_shards + ([delta.shard] if delta is not None and delta.shard is not None else [])
        self._ids: tuple[dict[str, tuple[int, int]], dict[str, list[tuple[int, int]]]] | None = None
        self._docs_state = dict(delta.state.docs) if delta is not None else {}
        self.overlays = self._overlays()
        self._masks: LRU[tuple, list[np.ndarray]] = LRU(256)

    def _id_maps(self):
        """passage id -> (shard, row) and doc id -> its rows, built on the first lookup by id
        (a search reads by row; only fetch, expansion by id and the overlay need these)."""
        if self._ids is None:
            pid: dict[str, tuple[int, int]] = {}
            doc_rows: dict[str, list[tuple[int, int]]] = {}
            for si, sh in enumerate(self.shards):  # delta rows come last: a replaced passage id maps to its new copy
                for r, (p, did) in enumerate(zip(sh.passage_ids, sh.doc_ids)):
                    pid[p] = (si, r)
                    doc_rows.setdefault(did, []).append((si, r))
            self._ids = (pid, doc_rows)
        return self._ids

    @property
    def _pid(self) -> dict[str, tuple[int, int]]:
        return self._id_maps()[0]

    @property
    def _doc_rows(self) -> dict[str, list[tuple[int, int]]]:
        return self._id_maps()[1]

    @property
    def heap_bytes(self) -> int:
        """Estimated heap bytes of this index: its shards' (base and delta), the id maps once
        built, and the cached row masks."""
        rows = len(self)
        ids = 0 if self._ids is None else rows * 2 * _DICT_ENTRY_BYTES
        return sum(sh.heap_bytes for sh in self.shards) + ids + len(self._masks) * rows

    @property
    def mapped_bytes(self) -> int:
        """Bytes of memory-mapped index files under this index (BM25 arrays, FAISS)."""
        return sum(sh.mapped_bytes for sh in self.shards)

    @property
    def resident_bytes(self) -> int:
        """What a replica's tenant budget charges for this index: heap estimate plus the
        mapped files' bytes (an upper bound: mapped pages count as if all were touched)."""
        return self.heap_bytes + self.mapped_bytes

    @classmethod
    def load(cls, root: str, tenant: str, generation: int | None = None, cache_dir: str | None = None,
             with_changes: bool = True, cache_bytes: int | None = None) -> "TenantIndex":
        """``cache_dir``/``cache_bytes``: where remote shards are copied, and the byte bound
        of that copy cache (``quarry.core.index.disk_cache``; None: unbounded)."""
        gen = generation if generation is not None else layout.current_generation(root, tenant)
        if gen is None:
            raise FileNotFoundError(f"no published index for tenant {tenant!r} under {root}")
        manifest = read_manifest(root, tenant, gen)
        cache = cache_dir or tempfile.gettempdir()
        shards = [Shard(layout.fetch_dir(layout.shard_dir(root, tenant, gen, s.shard), cache, cache_bytes))
                  for s in manifest.shards]
        delta = load_delta(root, tenant, gen, layout.read_watermark(root, tenant), cache, cache_bytes) \
            if with_changes else None
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

    def passage_vector(self, passage_id: str) -> np.ndarray | None:
        """The passage's stored dense vector (read back from its shard's FAISS index), or
        None for an unknown id. Callers pass only ids the principal may read."""
        loc = self._pid.get(passage_id)
        if loc is None:
            return None
        si, r = loc
        return np.asarray(self.shards[si].dense.reconstruct(int(r)), dtype=np.float32)

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
