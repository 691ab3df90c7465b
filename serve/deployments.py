"""Retriever and Reranker Serve deployments. Thin: the work is ``quarry.core``.

Payloads between deployments are ids and small records (principal, request, passage ids,
short texts), never arrays: query vectors and masks stay inside the Retriever replica.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import threading
import time
from collections import OrderedDict
from typing import Any

from ray import serve

from quarry.core import layout
from quarry.core.embedding import HashingEmbedder, SentenceTransformerEmbedder
from quarry.core.index import TenantIndex
from quarry.core.records import Candidate, Passage, Principal, SearchRequest
from quarry.core.rerank import RerankInput, apply_rerank
from quarry.core.search import SearchSettings, hybrid_search

from .settings import ServeSettings

log = logging.getLogger("quarry.serve")


def load_factory(path: str):
    mod, _, attr = path.partition(":")
    if not mod or not attr:
        raise ValueError(f"factory must be 'module:callable', got {path!r}")
    return getattr(importlib.import_module(mod), attr)


@serve.deployment(name="Reranker")
class Reranker:
    """Second stage behind a handle, batched across concurrent searches.

    The model comes from ``reranker_factory`` (``module:callable`` returning an object with
    ``score(query, candidates) -> list[float]``, the ``quarry.core.rerank.Reranker``
    protocol), so the real cross-encoder plugs in without changing this code.
    """

    def __init__(self, settings: ServeSettings):
        self.model = load_factory(settings.reranker_factory)(**settings.reranker_options)
        self.score_batch.set_max_batch_size(settings.reranker_batch_size)

    @serve.batch(max_batch_size=16, batch_wait_timeout_s=0.005)
    async def score_batch(self, items: list[tuple[str, list[RerankInput]]]) -> list[list[float]]:
        # One request = one query's candidates; the batch spans concurrent searches.
        return await asyncio.to_thread(lambda: [list(map(float, self.model.score(q, c))) for q, c in items])

    async def score(self, query: str, candidates: list[RerankInput]) -> list[float]:
        return await self.score_batch((query, candidates))


class _Entry:
    __slots__ = ("index", "checked_at")

    def __init__(self, index: TenantIndex, checked_at: float):
        self.index, self.checked_at = index, checked_at


@serve.deployment(name="Retriever")
class Retriever:
    """Loads tenant indexes lazily (LRU over tenants), hot-swaps on a new ``CURRENT``,
    and runs the core hybrid search with the verified principal's filter."""

    def __init__(self, settings: ServeSettings, reranker=None):
        self.s = settings
        self.search_settings = SearchSettings(**{"top_k_ceiling": settings.top_k_ceiling, **settings.search})
        self.reranker = reranker
        self._cache: OrderedDict[str, _Entry] = OrderedDict()
        self._lock = threading.Lock()
        self._loading: dict[str, threading.Lock] = {}
        self._embedders: dict[str, Any] = {}

    # -- index cache -------------------------------------------------------------------
    def _load(self, tenant: str, generation: int) -> TenantIndex:
        return TenantIndex.load(self.s.index_root, tenant, generation)

    def index_for(self, tenant: str) -> TenantIndex | None:
        """The tenant's live index. A request that already holds the old index object
        finishes on it; the swap only changes what the *next* request gets."""
        now = time.monotonic()
        with self._lock:
            entry = self._cache.get(tenant)
            if entry is not None:
                self._cache.move_to_end(tenant)
                if (now - entry.checked_at) * 1000 < self.s.generation_check_ms:
                    return entry.index
            tenant_lock = self._loading.setdefault(tenant, threading.Lock())
        # One loader per tenant; other requests keep using the current entry meanwhile.
        if entry is not None and not tenant_lock.acquire(blocking=False):
            return entry.index
        if entry is None:
            tenant_lock.acquire()
        try:
            with self._lock:
                fresh = self._cache.get(tenant)
                if fresh is not None and fresh is not entry and (now - fresh.checked_at) * 1000 < self.s.generation_check_ms:
                    return fresh.index
            try:
                gen = layout.current_generation(self.s.index_root, tenant)
            except Exception:  # storage hiccup: keep serving what we have
                log.exception("reading CURRENT for %s failed", tenant)
                gen = entry.index.generation if entry else None
            if gen is None:
                return entry.index if entry else None
            if entry is not None and entry.index.generation == gen:
                index = entry.index
            else:
                try:
                    index = self._load(tenant, gen)
                except Exception:
                    if entry is None:
                        raise
                    log.exception("loading %s gen %s failed; still serving gen %s", tenant, gen, entry.index.generation)
                    index = entry.index
            with self._lock:
                self._cache[tenant] = _Entry(index, time.monotonic())
                self._cache.move_to_end(tenant)
                while len(self._cache) > self.s.lru_tenants:
                    self._cache.popitem(last=False)
            return index
        finally:
            tenant_lock.release()

    def _embedder(self, index: TenantIndex):
        spec = index.manifest.get("embedder", {}) or {}
        kind = self.s.embedder
        name = str(spec.get("name", ""))
        if kind == "auto":
            kind = "hashing" if name.startswith("hashing") else "sentence-transformers"
        key = f"{kind}:{spec.get('dim')}"
        emb = self._embedders.get(key)
        if emb is None:
            if kind == "hashing":
                emb = HashingEmbedder(dim=int(spec.get("dim") or self.s.hashing_dim))
            else:
                emb = SentenceTransformerEmbedder(path=self.s.embedder_path)
            self._embedders[key] = emb
        return emb

    # -- second stage through the Reranker handle -------------------------------------
    def _second_stage(self, query: str, cands: list[Candidate], passages: list[Passage], top_k: int) -> list[Candidate]:
        inputs = [RerankInput(p.passage_id, p.envelope.title, tuple(p.heading_path), p.text) for p in passages]
        # Called from a worker thread (see search), so blocking on the handle is safe.
        scores = self.reranker.score.remote(query, inputs).result()
        by_id = {c.passage_id: c for c in cands}
        return [
            by_id[pid].model_copy(update={"rerank_score": sc, "rerank_rank": r})
            for pid, sc, r in apply_rerank(scores, [c.passage_id for c in cands], top_k)
        ]

    def _search(self, principal: Principal, request: SearchRequest) -> dict[str, Any]:
        t0 = time.perf_counter()
        index = self.index_for(principal.tenant)
        t1 = time.perf_counter()
        if index is None:  # no index for this tenant: same shape as finding nothing
            from quarry.core.search import empty_message

            return {"excerpts": [], "candidates": [], "generation": 0, "delivered_tokens": 0, "truncated": False,
                    "stages": [{"name": "filter", "kept": 0, "dropped": 0, "note": ""}],
                    "message": empty_message(request), "timings_ms": {"index": (t1 - t0) * 1000}}
        result = hybrid_search(
            index, principal, request, self._embedder(index), self.search_settings,
            second_stage=self._second_stage if self.reranker is not None else None,
        )
        out = result.model_dump(mode="json")
        out["timings_ms"] = {"index": (t1 - t0) * 1000, "search": (time.perf_counter() - t1) * 1000}
        return out

    async def search(self, principal: Principal, request: SearchRequest) -> dict[str, Any]:
        return await asyncio.to_thread(self._search, principal, request)

    def _fetch(self, principal: Principal, id_: str) -> dict[str, Any] | None:
        index = self.index_for(principal.tenant)
        if index is None:
            return None
        p = index.passage(id_, principal)
        if p is not None:
            return {"kind": "passage", "generation": index.generation, "passages": [_passage_view(p)]}
        sec = index.parent(id_, principal)
        if sec is not None:
            return {"kind": "section", "generation": index.generation, "section": {
                "parent_id": sec.parent_id, "anchor": sec.anchor, "heading_path": list(sec.heading_path),
                "text": sec.text, "token_count": sec.token_count, "title": sec.envelope.title,
                "doc_id": sec.envelope.doc_id, "version": sec.envelope.version, "trust": "untrusted"}}
        doc = index.document(id_, principal)
        if doc:
            return {"kind": "document", "generation": index.generation, "passages": [_passage_view(x) for x in doc]}
        return None

    async def fetch(self, principal: Principal, id_: str) -> dict[str, Any] | None:
        return await asyncio.to_thread(self._fetch, principal, id_)

    def _texts(self, principal: Principal, ids: list[str]) -> dict[str, str]:
        """Citable text per id, under the principal's permissions: a passage's own text plus
        its parent section (what an expanded excerpt showed), or a section's text."""
        index = self.index_for(principal.tenant)
        out: dict[str, str] = {}
        if index is None:
            return out
        for pid in ids:
            p = index.passage(pid, principal)
            if p is not None:
                sec = index.parent(p.parent_id, principal)
                out[pid] = p.text + ("\n" + sec.text if sec is not None else "")
                continue
            sec = index.parent(pid, principal)
            if sec is not None:
                out[pid] = sec.text
        return out

    async def texts(self, principal: Principal, ids: list[str]) -> dict[str, str]:
        return await asyncio.to_thread(self._texts, principal, ids)

    def loaded(self) -> dict[str, int]:
        with self._lock:
            return {t: e.index.generation for t, e in self._cache.items()}


def _passage_view(p: Passage) -> dict[str, Any]:
    e = p.envelope
    return {
        "passage_id": p.passage_id, "doc_id": e.doc_id, "version": e.version, "anchor": p.anchor,
        "heading_path": list(p.heading_path), "parent_id": p.parent_id, "title": e.title, "doc_type": e.doc_type,
        "text": p.text, "effective_from": e.effective_from and e.effective_from.isoformat(),
        "effective_to": e.effective_to and e.effective_to.isoformat(), "authority": e.authority,
        "authority_rank": e.authority_rank, "source_url": e.source_url, "token_count": p.token_count,
        "trust": p.trust,
    }
