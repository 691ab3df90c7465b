"""Retriever, Reranker and Resolver Serve deployments. Thin: the work is ``quarry.core``.

The Gateway composes them in the order of ``quarry.core.search.stages.search``: Retriever
(first stage) -> Reranker (second stage) -> Retriever (expansion and the evidence for
resolution: the delivered passages' evidence-graph neighbours; it holds the index) ->
Resolver (resolution, a pure function of that evidence; it calls nothing back). Without a
second stage one Retriever call does the first stage, the expansion and the evidence
(``Retriever.retrieve``).
Payloads are the frozen records of ``quarry.core.search.records`` (ids, ranks, codes, small
records), never arrays: query vectors and masks stay inside the Retriever replica.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ray import serve

from quarry.core.index import layout
from quarry.core.changes.log import lag_summary
from quarry.core.index.dense_gpu import choose_backend
from quarry.core.embed.factory import EmbedderSpec, embedder_for_index
from quarry.core.embed.embedders import embedder_id, encode_many
from quarry.core.index.shards import TenantIndex
from quarry.core.agent.fetch import FetchResult, citable_texts, fetch
from quarry.core.lru import LRU
from quarry.core.search.query_cache import QueryVectorCache, normalize_query
from quarry.core.records import Candidate, Passage, Principal, SearchRequest
from quarry.core.rank.rerank import RerankInput, apply_rerank
from quarry.core.rank.second_stage import (
    SecondStageChoice,
    candidate_passages,
    choose_second_stage,
    decision_changed,
    rerank_inputs,
)
from quarry.core.search.stages import (
    SearchSettings,
    apply_second_stage,
    candidate_width,
    expansion,
    first_stage,
    gather_evidence,
    no_first_stage,
    nothing_expanded,
    resolve_stage,
    survivor_passages,
)
from quarry.core.evidence.graph import EvidenceSet
from quarry.core.search.records import (
    Delivery,
    ExpandRequest,
    Expansion,
    FirstStage,
    RankedCandidate,
    RerankOutcome,
    RerankRequest,
    Resolution,
    ResolveRequest,
    Retrieval,
    StageInfo,
)

from quarry.serve.settings import ServeSettings

log = logging.getLogger("quarry.serve")


def load_factory(path: str):
    mod, _, attr = path.partition(":")
    if not mod or not attr:
        raise ValueError(f"factory must be 'module:callable', got {path!r}")
    return getattr(importlib.import_module(mod), attr)


def search_settings(s: ServeSettings) -> SearchSettings:
    return SearchSettings(**{"top_k_ceiling": s.top_k_ceiling, **s.search})


async def call_retrying(handle, method: str, *args: Any) -> Any:
    """A deployment call retried once when the replica died under it. Only for read-only
    calls; Serve routes the retry to a live replica (issue 10: a killed replica must not
    turn into a 5xx)."""
    from ray.exceptions import ActorDiedError, ActorUnavailableError, RayActorError

    try:
        return await getattr(handle, method).remote(*args)
    except (ActorDiedError, ActorUnavailableError, RayActorError):
        await asyncio.sleep(0.1)
        return await getattr(handle, method).remote(*args)


class GenerationIndexes:
    """Memory-mapped indexes by (tenant, generation), LRU-bounded: what the Reranker and
    the Resolver read passages from (pages are shared with the Retriever's copy)."""

    def __init__(self, root: str, capacity: int):
        self.root = root
        self._lru: LRU[tuple[str, int], TenantIndex] = LRU(capacity)

    def put(self, index: TenantIndex) -> None:
        self._lru.put((index.tenant, index.generation), index)

    def get(self, tenant: str, gen: int) -> TenantIndex:
        idx = self._lru.get((tenant, gen))
        if idx is not None:  # the delta's rows are candidates too: follow the change watermark
            fresh = idx.with_watermark(layout.read_watermark(self.root, tenant))
            if fresh is not idx:
                self.put(fresh)
            return fresh
        idx = TenantIndex.load(self.root, tenant, gen)
        self.put(idx)
        return idx


class _Stage:
    """What the Reranker serves for one (tenant, generation), and when it was last checked."""

    __slots__ = ("kind", "fn", "info", "checked_at", "lock")

    def __init__(self, choice: SecondStageChoice):
        self.kind, self.fn, self.info = choice.kind, choice.ranker, choice.info
        self.checked_at = time.monotonic()
        self.lock = threading.Lock()  # one LightGBM predict at a time per model


@serve.deployment(name="Reranker")
class Reranker:
    """The second stage behind a handle, chosen per tenant and generation by
    ``quarry.core.rank.second_stage.choose_second_stage`` (the gate-promoted learned ranker, else
    the cross-encoder built by ``reranker_factory``, ``module:callable`` returning a
    ``quarry.core.rank.rerank.Reranker``, else none). The cross-encoder is batched across
    concurrent searches with ``@serve.batch``.

    Requests carry ids and small records only (tenant, generation, query, candidate ranks
    and scores); passages are read here from the same memory-mapped index generation.
    """

    def __init__(self, settings: ServeSettings):
        self.s = settings
        self.cross = load_factory(settings.reranker_factory)(**settings.reranker_options) \
            if settings.reranker_factory else None
        self.cross_name = getattr(self.cross, "name", settings.reranker_factory) if self.cross else None
        self._stages: LRU[tuple[str, int], _Stage] = LRU(2 * settings.lru_tenants)
        self._indexes = GenerationIndexes(settings.index_root, 2 * settings.lru_tenants)
        self._lock = threading.Lock()
        self._key_locks: dict[tuple[str, int], threading.Lock] = {}
        self.score_batch.set_max_batch_size(settings.reranker_batch_size)
        self.batch_sizes: list[int] = []  # queries per @serve.batch call (recent), for tests and operators

    # -- choosing the stage ------------------------------------------------------------
    def _choose(self, tenant: str, gen: int) -> _Stage:
        return _Stage(choose_second_stage(self.s.index_root, tenant, gen, cross_encoder=self.cross_name,
                                          learned_enabled=self.s.learned_ranker))

    def _stage(self, tenant: str, gen: int) -> _Stage:
        """Cached per (tenant, generation); the recorded decision is re-read every
        ``stage_check_s`` so a ranker promoted (or demoted) for the live generation is
        picked up without a restart."""
        key = (tenant, gen)
        st = self._stages.get(key)
        if st is not None and time.monotonic() - st.checked_at < self.s.stage_check_s:
            return st
        with self._lock:
            klock = self._key_locks.setdefault(key, threading.Lock())
        with klock:
            cur = self._stages.peek(key)
            if cur is not None and cur is not st and time.monotonic() - cur.checked_at < self.s.stage_check_s:
                return cur
            if cur is not None and not decision_changed(self.s.index_root, tenant, gen, cur.info):
                cur.checked_at = time.monotonic()
                return cur
            fresh = self._choose(tenant, gen)
            evicted = self._stages.put(key, fresh)
            with self._lock:
                for old, _ in evicted:
                    self._key_locks.pop(old, None)
            return fresh

    # -- serving -----------------------------------------------------------------------
    async def recent_batch_sizes(self) -> list[int]:
        return list(self.batch_sizes)

    async def describe(self, tenant: str, generation: int) -> StageInfo:
        """The stage served for this tenant's generation and the gate decision behind it."""
        return (await asyncio.to_thread(self._stage, tenant, generation)).info

    @serve.batch(max_batch_size=16, batch_wait_timeout_s=0.005)
    async def score_batch(self, items: list[tuple[str, list[RerankInput]]]) -> list[list[float]]:
        # One item = one query's candidates; the batch spans concurrent searches.
        self.batch_sizes.append(len(items))  # observed batch sizes, for tests and /healthz
        del self.batch_sizes[:-256]
        many = getattr(self.cross, "score_many", None)  # one model pass over every query's pairs
        if many is not None:
            return await asyncio.to_thread(lambda: [list(map(float, s)) for s in many(items)])
        return await asyncio.to_thread(lambda: [list(map(float, self.cross.score(q, c))) for q, c in items])

    def _learned(self, st: _Stage, query: str, cands: list[Candidate], passages: list[Passage], top_k: int):
        with st.lock:
            return st.fn(query, cands, passages, top_k)

    async def rerank(self, req: RerankRequest) -> RerankOutcome:
        """The kept top-k of ``req.candidates`` (already filtered for the principal by the
        Retriever) with scores and ranks, or ``skipped`` with the stage info saying why."""
        st = await asyncio.to_thread(self._stage, req.tenant, req.generation)
        if not st.info.enabled:
            return RerankOutcome(status="skipped", info=st.info)
        cands = list(req.candidates)
        index = await asyncio.to_thread(self._indexes.get, req.tenant, req.generation)
        passages = candidate_passages(index, cands)
        if st.kind == "learned":
            ranked = await asyncio.to_thread(self._learned, st, req.query, cands, passages, req.top_k)
            out = [(c.passage_id, float(c.rerank_score), int(c.rerank_rank)) for c in ranked]
        else:
            scores = await self.score_batch((req.query, rerank_inputs(passages)))
            out = apply_rerank(scores, [c.passage_id for c in cands], req.top_k)
        return RerankOutcome(status="applied", info=st.info, ranked=tuple(
            RankedCandidate(passage_id=pid, rerank_score=sc, rerank_rank=r) for pid, sc, r in out))


@serve.deployment(name="Resolver")
class Resolver:
    """Evidence resolution (``quarry.core.evidence.resolve``): a pure function of the question and
    the evidence the Retriever gathered (delivered passages, their evidence-graph
    neighbours and facts). It reads no index and calls no other deployment."""

    def __init__(self, settings: ServeSettings):
        self.s = settings

    async def resolve(self, req: ResolveRequest) -> Resolution:
        return await asyncio.to_thread(resolve_stage, req.request, req.evidence, req.principal)


class _Entry:
    __slots__ = ("index", "checked_at")

    def __init__(self, index: TenantIndex, checked_at: float):
        self.index, self.checked_at = index, checked_at


@serve.deployment(name="Retriever")
class Retriever:
    """Loads tenant indexes lazily (LRU over tenants), hot-swaps on a new ``CURRENT``, and
    runs the first stage and the expansion with the verified principal's filter."""

    def __init__(self, settings: ServeSettings):
        self.s = settings
        self.search_settings = search_settings(settings)
        self._cache: LRU[str, _Entry] = LRU(settings.lru_tenants)
        self._retired = GenerationIndexes(settings.index_root, settings.lru_tenants)  # swapped-out generations
        self._lock = threading.Lock()
        self._loading: dict[str, threading.Lock] = {}
        self._embedders: dict[tuple[str, int], Any] = {}
        self._embedder_lock = threading.Lock()
        self.query_cache = QueryVectorCache(settings.query_cache_size)
        self._encode_pool = ThreadPoolExecutor(1, thread_name_prefix="quarry-encode")  # one model pass at a time
        # Searches wait in threads for their batched encode: enough threads to fill a batch
        # (asyncio's default pool has cpu_count + 4, six on two cores).
        self._search_pool = ThreadPoolExecutor(max(settings.max_ongoing_requests, settings.encode_batch_size),
                                               thread_name_prefix="quarry-search")
        self._loop: asyncio.AbstractEventLoop | None = None  # the replica's loop, where encode batches form
        self.encode_batch.set_max_batch_size(settings.encode_batch_size)
        self.encode_batch.set_batch_wait_timeout_s(settings.encode_batch_wait_ms / 1000)
        self.encode_batch_sizes: list[int] = []  # queries per encode batch (recent), for tests and operators
        self._m_cache = _cache_metrics()
        self.dense_choice = choose_backend(settings.dense_device)  # proven once per replica, fail closed
        try:  # Prometheus (through Ray's metrics agent): change-to-visible lag per tenant
            from ray.util.metrics import Gauge

            self._staleness_gauge = Gauge("quarry_change_lag_seconds", "source change to visible, per tenant",
                                          tag_keys=("tenant", "stat"))
        except Exception:  # noqa: BLE001 - metrics are optional outside a Ray worker
            self._staleness_gauge = None

    # -- index cache -------------------------------------------------------------------
    def check_health(self) -> None:
        """Serve's health check: a replica that cannot see a local index root is restarted
        (a URI root is checked when a tenant loads)."""
        if "://" not in self.s.index_root and not os.path.isdir(self.s.index_root):
            raise RuntimeError("index root not reachable")

    def _load(self, tenant: str, generation: int) -> TenantIndex:
        index = TenantIndex.load(self.s.index_root, tenant, generation)
        if self.dense_choice.device == "gpu":
            for sh in index.shards:
                sh.attach_gpu()
        return index

    def index_for(self, tenant: str) -> TenantIndex | None:
        """The tenant's live index. A request that already holds the old index object
        finishes on it; the swap only changes what the *next* request gets."""
        now = time.monotonic()
        entry = self._cache.get(tenant)
        with self._lock:
            tenant_lock = self._loading.setdefault(tenant, threading.Lock())
        if entry is not None and (now - entry.checked_at) * 1000 < self.s.generation_check_ms:
            fresh_index = self._with_changes(tenant, entry)  # every request: deletes and revocations now
            if fresh_index is not None:
                return fresh_index
        # One loader per tenant; other requests keep using the current entry meanwhile.
        if entry is not None and not tenant_lock.acquire(blocking=False):
            return entry.index
        if entry is None:
            tenant_lock.acquire()
        try:
            fresh = self._cache.peek(tenant)
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
                index = self._with_changes(tenant, entry) or entry.index
            else:
                try:
                    index = self._load(tenant, gen)
                except Exception:
                    if entry is None:
                        raise
                    log.exception("loading %s gen %s failed; still serving gen %s", tenant, gen, entry.index.generation)
                    index = entry.index
            if entry is not None and entry.index is not index:
                self._retired.put(entry.index)  # requests that started on it finish on it
            self._cache.put(tenant, _Entry(index, time.monotonic()))
            return index
        finally:
            tenant_lock.release()

    def _with_changes(self, tenant: str, entry: _Entry) -> TenantIndex | None:
        """The per-request freshness check: read the tenant's change watermark (a few
        bytes) and, when it moved, reload only the delta and masks over the same base.
        None when the watermark names another generation (CURRENT must be re-read)."""
        index = entry.index
        try:
            wm = layout.read_watermark(self.s.index_root, tenant)
            if wm == index.watermark:
                return index
            parsed = layout.parse_watermark(wm)
            if parsed is not None and parsed[1] > index.generation:
                return None
            fresh = index.with_watermark(wm)  # a watermark over an older generation: no delta
            if fresh is index:
                return index
        except Exception:  # storage hiccup: keep serving what we have, loudly
            log.exception("reading the change watermark of %s failed", tenant)
            return index
        with self._lock:
            entry.index = fresh
        self._record_staleness(tenant, fresh)
        return fresh

    def _record_staleness(self, tenant: str, index: TenantIndex) -> None:
        if index.delta is None or self._staleness_gauge is None:
            return
        for k, v in lag_summary(index.delta.state).items():
            if k.endswith("_s") and v is not None:
                self._staleness_gauge.set(float(v), tags={"tenant": tenant, "stat": k.removesuffix("_s")})

    def _embedder(self, index: TenantIndex):
        """The index's query embedder, built once per (model, dim) by the core factory,
        which refuses a configured model that is not the one the index was built with."""
        built = EmbedderSpec.from_manifest(index.manifest)
        key = (built.name, built.dim)
        with self._embedder_lock:  # one build (and one ONNX agreement check) per model
            emb = self._embedders.get(key)
            if emb is None:
                if self.s.embedder == "hashing":
                    spec = f"hashing:{built.dim or self.s.hashing_dim}"
                elif self.s.embedder == "sentence-transformers":
                    spec = self.s.embedder_path or "default"
                else:
                    spec = self.s.embedder_path if self.s.embedder_path and not built.hashing else None
                emb = embedder_for_index(index.manifest, spec,
                                         encoder=None if self.s.query_encoder == "index" else self.s.query_encoder)
                getattr(emb, "load", lambda: None)()
                self._embedders[key] = emb
        return emb

    def _query_vectors(self, index: TenantIndex, queries: list[str]) -> list[Any]:
        """(index, queries) -> one vector per query: from the cache (vectors only, keyed by
        model and normalised text), else encoded in one batch with concurrent requests'
        queries. Runs in a worker thread; each request's legs then run under its own
        principal's mask."""
        emb = self._embedder(index)
        mid = embedder_id(emb)
        vecs = [self.query_cache.get(mid, q) for q in queries]
        for v in vecs:
            self._m_cache["lookups"].inc(tags={"result": "miss" if v is None else "hit"})
        miss = [i for i, v in enumerate(vecs) if v is None]
        if miss:
            texts = [normalize_query(queries[i]) for i in miss]  # what the cache key says, so hits equal fresh encodes
            loop = self._loop
            if loop is not None and loop.is_running():  # each joins the replica's next encode batch
                futs = [asyncio.run_coroutine_threadsafe(self.encode_batch((emb, t)), loop) for t in texts]
                fresh = [f.result() for f in futs]
            else:  # called outside the replica's event loop (tools, direct calls)
                fresh = list(emb.encode(texts))
            for i, v in zip(miss, fresh):
                vecs[i] = v
                self.query_cache.put(mid, queries[i], v)
        return vecs

    @serve.batch(max_batch_size=16, batch_wait_timeout_s=0.002)
    async def encode_batch(self, items: list[tuple[Any, str]]) -> list[Any]:
        self.encode_batch_sizes.append(len(items))
        del self.encode_batch_sizes[:-256]
        return await asyncio.get_running_loop().run_in_executor(self._encode_pool, encode_many, items)

    async def encoder_stats(self) -> dict[str, Any]:
        """Query-vector cache counters and hit rate, and recent encode batch sizes."""
        st = self.query_cache.stats()
        return {**st.model_dump(), "hit_rate": st.hit_rate, "encode_batch_sizes": list(self.encode_batch_sizes),
                "encoders": {f"{k[0]}/{k[1]}": getattr(e, "encoder", "torch") for k, e in self._embedders.items()}}


    def _index_at(self, tenant: str, generation: int) -> TenantIndex | None:
        """The generation a search's first stage ran on, for its expansion: the live one,
        else one just swapped out (a request finishes on the generation it started on)."""
        live = self.index_for(tenant)
        if live is not None and live.generation == generation:
            return live
        return self._retired.get(tenant, generation)

    # -- stages ------------------------------------------------------------------------
    def _settings(self, width: int | None, top_k: int) -> SearchSettings:
        settings = self.search_settings
        w = candidate_width(settings, width, top_k)
        return settings if w == settings.candidate_width else settings.model_copy(update={"candidate_width": w})

    def _first_stages(self, principal: Principal, requests: tuple[SearchRequest, ...], width: int | None,
                      dense: bool = True) -> tuple[TenantIndex | None, tuple[FirstStage, ...]]:
        index = self.index_for(principal.tenant)
        if index is None:  # no index for this tenant: same shape as finding nothing
            return None, tuple(no_first_stage(principal.tenant) for _ in requests)
        vecs = self._query_vectors(index, [r.query for r in requests]) if dense else [None] * len(requests)
        return index, tuple(first_stage(index, principal, r, None, self._settings(width, r.top_k), v, dense=dense)
                            for r, v in zip(requests, vecs))

    def _first_stage(self, principal: Principal, request: SearchRequest, width: int | None) -> FirstStage:
        return self._first_stages(principal, (request,), width)[1][0]

    async def _in_pool(self, fn, *args):
        self._loop = loop = asyncio.get_running_loop()  # _query_vectors joins encode batches on it
        return await loop.run_in_executor(self._search_pool, fn, *args)

    async def first_stage(self, principal: Principal, request: SearchRequest,
                          candidate_width: int | None = None) -> FirstStage:
        """Filter -> legs -> fuse under the verified principal (``quarry.core.search.stages.first_stage``)."""
        return await self._in_pool(self._first_stage, principal, request, candidate_width)

    async def first_stages(self, principal: Principal, requests: tuple[SearchRequest, ...],
                           candidate_width: int | None = None, dense: bool = True) -> tuple[FirstStage, ...]:
        """The first stage of several queries under one principal in one call (the Resolver's
        follow-ups): their encodings join one batch; ``dense=False``: the lexical leg only."""
        return (await self._in_pool(self._first_stages, principal, requests, candidate_width, dense))[1]

    def _evidence(self, index: TenantIndex, principal: Principal, request: SearchRequest,
                  passages: list[Passage], expanded: Expansion) -> EvidenceSet:
        shown = {e.passage_id for e in expanded.excerpts}
        return gather_evidence(index, principal, request, [p for p in passages if p.passage_id in shown],
                               self.search_settings, lambda qs: self._query_vectors(index, qs))

    def _retrieve(self, principal: Principal, request: SearchRequest, width: int | None) -> Retrieval:
        index, (first,) = self._first_stages(principal, (request,), width)
        survivors = apply_second_stage(first, None, request.top_k).survivors
        if index is None or not survivors:
            return Retrieval(first=first, expansion=nothing_expanded())
        passages = survivor_passages(index, first, survivors)
        expanded = expansion(index, principal, passages, self.search_settings, request.valid_at)
        return Retrieval(first=first, expansion=expanded,
                         evidence=self._evidence(index, principal, request, passages, expanded))

    async def retrieve(self, principal: Principal, request: SearchRequest,
                       candidate_width: int | None = None) -> Retrieval:
        """The first stage and the expansion of its fused top-k on the same index, in one
        call: the search path when no second stage is served for the tenant."""
        return await self._in_pool(self._retrieve, principal, request, candidate_width)

    def _expand(self, req: ExpandRequest) -> Delivery:
        index = self._index_at(req.principal.tenant, req.generation)
        if index is None or not req.passage_ids:
            return Delivery(expansion=nothing_expanded())
        passages = [p for p in (index.passage(pid, req.principal) for pid in req.passage_ids) if p is not None]
        expanded = expansion(index, req.principal, passages, self.search_settings, req.request.valid_at)
        return Delivery(expansion=expanded, evidence=self._evidence(index, req.principal, req.request, passages,
                                                                     expanded))

    async def expand(self, req: ExpandRequest) -> Delivery:
        """Survivors (ids, delivered order) expanded to parent sections under the token
        ceiling, with the evidence for resolving them."""
        return await asyncio.to_thread(self._expand, req)

    def _fetch(self, principal: Principal, id_: str) -> FetchResult | None:
        index = self.index_for(principal.tenant)
        return fetch(index, principal, id_) if index is not None else None

    async def fetch(self, principal: Principal, id_: str) -> FetchResult | None:
        """A passage, section or document id under the principal's permissions (``quarry.core.agent.fetch``)."""
        return await asyncio.to_thread(self._fetch, principal, id_)

    def _texts(self, principal: Principal, ids: list[str]) -> dict[str, str]:
        index = self.index_for(principal.tenant)
        return citable_texts(index, principal, ids) if index is not None else {}

    async def texts(self, principal: Principal, ids: list[str]) -> dict[str, str]:
        """Citable text per id, for the answer checks (``quarry.core.agent.fetch.citable_texts``)."""
        return await asyncio.to_thread(self._texts, principal, ids)

    def loaded(self) -> dict[str, int]:
        return {t: e.index.generation for t, e in self._cache.items()}

    def _status(self, tenants: list[str] | None) -> dict[str, dict[str, Any]]:
        """Named tenants (an operator's own) are loaded if published, so the answer does not
        depend on which replica took the call; the platform view lists every published
        tenant, with full detail where this replica has it loaded."""
        for t in tenants or ():
            self.index_for(t)  # None (nothing loaded) when the tenant has no published index
        loaded = self.loaded()
        out = {t: {"generation": g, "loaded": True, "dense": self.dense_choice.to_json(),
                   "freshness": self._freshness(t)}
               for t, g in loaded.items() if tenants is None or t in tenants}
        if tenants is None:
            for t in layout.list_tenants(self.s.index_root):
                gen = layout.current_generation(self.s.index_root, t)
                if t not in out and gen is not None:
                    out[t] = {"generation": gen, "loaded": False}
        return out

    def _freshness(self, tenant: str) -> dict[str, Any]:
        entry = self._cache.peek(tenant)
        index = entry.index if entry is not None else None
        if index is None or index.delta is None:
            return {"delta": 0, "changes_applied": 0}
        st = index.delta.state
        return {"delta": st.seq, "changes_applied": st.applied, "lag": lag_summary(st),
                "last_published_age_s": round(time.time() - st.published_at, 3) if st.published_at else None}

    async def status(self, tenants: list[str] | None = None) -> dict[str, dict[str, Any]]:
        """Loaded tenants of this replica: live generation, the dense leg's device and the
        tenant's freshness (the Gateway adds the second stage it composes); ``tenants``
        limits what is reported."""
        return await asyncio.to_thread(self._status, tenants)


def _cache_metrics():
    from ray.util.metrics import Counter

    return {"lookups": Counter("quarry_query_vector_cache", "Query-vector cache lookups (hit rate = hit / all)",
                               tag_keys=("result",))}
