"""The Retriever deployment: the tenant indexes (loaded lazily, hot-swapped on a new
``CURRENT``, following the change watermark), the query encoder with its vector cache and
batching, and the stages that read an index: the first stage, the expansion and the
evidence for resolution, fetch and the citable texts. The stages are ``quarry.core.search``;
query vectors and masks stay inside the replica."""

from __future__ import annotations

import asyncio
import logging
import os
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ray import serve

from quarry.core.agent.fetch import FetchResult, citable_texts, fetch
from quarry.core.changes.log import lag_summary
from quarry.core.embed.embedders import embedder_id, encode_many
from quarry.core.embed.factory import EmbedderSpec, embedder_for_index
from quarry.core.evidence.graph import EvidenceSet
from quarry.core.index import layout
from quarry.core.index.dense_gpu import choose_backend
from quarry.core.index.shards import TenantIndex
from quarry.core.index.tiers import TIERS, cache_usage, disk_tiers
from quarry.core.lru import LRU
from quarry.core.records import Passage, Principal, SearchRequest
from quarry.core.search.expansion import expansion, nothing_expanded, pool_ids, pool_passages, survivor_passages
from quarry.core.search.query_cache import QueryVectorCache, normalize_query
from quarry.core.search.records import Delivery, ExpandRequest, Expansion, FirstStage, Retrieval
from quarry.core.search.resolution import gather_evidence
from quarry.core.search.retrieval import first_stage, no_first_stage
from quarry.core.search.settings import with_candidate_width
from quarry.core.search.survivors import apply_second_stage

from quarry.serve.deployments.generations import GenerationIndexes
from quarry.serve.deployments.purges import PurgeWatch, clear_text_caches, drop_unpublished_copies
from quarry.serve.deployments.tenant_status import Freshness, TenantStatus
from quarry.serve.settings import ServeSettings
from quarry.serve.tenant_labels import OTHER, TenantLabels

log = logging.getLogger("quarry.serve")


class CachedIndex:
    """A tenant's live index, when its ``CURRENT`` was last read, and the purge epoch it was loaded under."""

    __slots__ = ("index", "checked_at", "epoch")

    def __init__(self, index: TenantIndex, checked_at: float, epoch: str | None = None):
        self.index, self.checked_at, self.epoch = index, checked_at, epoch


@serve.deployment(name="Retriever")
class Retriever:
    """Loads tenant indexes lazily (LRU over tenants), hot-swaps on a new ``CURRENT``, and
    runs the first stage and the expansion with the verified principal's filter."""

    def __init__(self, settings: ServeSettings):
        self.settings = settings
        self.search_settings = settings.search
        # Tenants by bytes and count (ServeSettings tenant caches); the size is measured at each
        # put (a load, a hot swap, a new delta), so it follows the index actually held.
        self._cache: LRU[str, CachedIndex] = LRU(settings.lru_tenants, settings.tenant_cache_bytes,
                                                 size_of=lambda e: e.index.resident_bytes)
        # Tenant-aware routing: the tenant is the request's multiplexed model id. Serve's
        # wrapper only records which tenants this replica holds (it reports them to the
        # routers, which prefer such replicas); the index itself lives in self._cache.
        async def hold_tenant(tenant: str) -> str:  # a plain function: Serve keeps its wrapper on it
            return await self._hold_tenant(tenant)

        self._tenant_model = serve.multiplexed(max_num_models_per_replica=settings.lru_tenants)(hold_tenant)
        # swapped-out generations, kept for requests that started on them
        self._retired = GenerationIndexes(settings.index_root, min(settings.lru_tenants, 8), settings.tenant_cache_bytes)
        self._lock = threading.Lock()
        self._loading: dict[str, threading.Lock] = {}
        self._loads = 0  # tenant generations read from the index root (cold and warm loads, not hot hits)
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
        self._cache_lookups = _cache_lookups_counter()
        self.dense_choice = choose_backend(settings.dense_device)  # proven once per replica, fail closed
        # the lag gauge's tenant tag: the top tenants by traffic on this replica, else "other"
        self._tenant_labels = TenantLabels(settings.tenant_limits.metrics_top_tenants)
        self._other_lags: LRU[str, dict[str, float]] = LRU(1024)  # unnamed tenants' last lags
        # A purge moves the tenant's epoch: within generation_check_ms every copy here goes.
        self._purges = PurgeWatch(settings.index_root, settings.generation_check_ms / 1000,
                                  self._held_epochs, self._drop_tenant)
        try:  # Prometheus (through Ray's metrics agent): change-to-visible lag per tenant label
            from ray.util.metrics import Gauge

            self._staleness_gauge = Gauge("quarry_change_lag_seconds", "source change to visible, per tenant",
                                          tag_keys=("tenant", "stat"))
            self._cache_gauge = Gauge("quarry_tenant_cache_bytes", "bytes of tenant indexes held by this replica")
            self._tier_gauge = Gauge("quarry_tenants_by_tier", "published tenants per tier on this replica "
                                     "(hot: loaded, warm: on local disk, cold: object storage only)",
                                     tag_keys=("tier",))
            self._disk_gauge = Gauge("quarry_disk_cache_bytes", "bytes of remote copies in this replica's disk cache")
        except Exception:  # noqa: BLE001 - metrics are optional outside a Ray worker
            self._staleness_gauge = self._cache_gauge = self._tier_gauge = self._disk_gauge = None

    # -- index cache -------------------------------------------------------------------
    async def _hold_tenant(self, tenant: str) -> str:
        """Serve's multiplexed loader: load the tenant's live index into this replica."""
        await asyncio.to_thread(self.index_for, tenant)
        return tenant

    async def _routed(self, tenant: str) -> None:
        """Mark ``tenant`` held by this replica when the request was routed by it. The
        principal's tenant decides which index is read; the model id only steers routing,
        so a request with another (or no) model id is served the same way."""
        try:
            model_id = serve.get_multiplexed_model_id()
        except Exception:  # noqa: BLE001 - called outside a Serve request (tools, tests)
            model_id = ""
        if model_id and model_id == tenant:
            await self._tenant_model(tenant)

    def check_health(self) -> None:
        """Serve's health check: a replica that cannot see a local index root is restarted
        (a URI root is checked when a tenant loads)."""
        if "://" not in self.settings.index_root and not os.path.isdir(self.settings.index_root):
            raise RuntimeError("index root not reachable")

    def _load(self, tenant: str, generation: int) -> TenantIndex:
        index = TenantIndex.load(self.settings.index_root, tenant, generation, cache_dir=self.settings.disk_cache_dir,
                                 cache_bytes=self.settings.disk_cache_bytes)
        if self.dense_choice.device == "gpu":
            for sh in index.shards:
                sh.attach_gpu()
        return index

    def index_for(self, tenant: str) -> TenantIndex | None:
        """The tenant's live index. A request that already holds the old index object
        finishes on it; the swap only changes what the *next* request gets."""
        now = time.monotonic()
        self._tenant_labels.observe(tenant)  # traffic, for the lag gauge's bounded tenant tag
        entry = self._cache.get(tenant)
        with self._lock:
            tenant_lock = self._loading.setdefault(tenant, threading.Lock())
        if entry is not None and (now - entry.checked_at) * 1000 < self.settings.generation_check_ms:
            fresh_index = self._with_changes(tenant, entry)  # every request: deletes and revocations now
            if fresh_index is not None:
                return fresh_index
        # One loader per tenant; other requests keep using the current entry meanwhile, but
        # never without this request's own watermark read: an index another request checked
        # before a change was applied must not answer a request that started after it.
        if entry is None:
            tenant_lock.acquire()
        elif not tenant_lock.acquire(blocking=False):
            current = self._with_changes(tenant, entry)
            if current is not None:
                return current
            tenant_lock.acquire()  # a delta over a newer generation: wait for the loader
        try:
            fresh = self._cache.peek(tenant)
            if fresh is not None and fresh is not entry and (now - fresh.checked_at) * 1000 < self.settings.generation_check_ms:
                current = self._with_changes(tenant, fresh)
                if current is not None:
                    return current
                entry = fresh
            try:
                epoch = layout.read_purge_epoch(self.settings.index_root, tenant)  # before CURRENT: see purges.py
                gen = layout.current_generation(self.settings.index_root, tenant)
            except Exception:  # storage hiccup: keep serving what we have
                log.exception("reading CURRENT for %s failed", tenant)
                gen, epoch = (entry.index.generation, entry.epoch) if entry else (None, None)
            if entry is not None and entry.epoch != epoch:  # purged since it was loaded: nothing of it is kept
                self._drop_tenant(tenant, epoch)
                entry = None
            if gen is None:
                return entry.index if entry else None
            if entry is not None and entry.index.generation == gen:
                index = self._with_changes(tenant, entry) or entry.index
            else:
                try:
                    index = self._load(tenant, gen)
                    with self._lock:
                        self._loads += 1
                except Exception:
                    if entry is None:
                        raise
                    log.exception("loading %s gen %s failed; still serving gen %s", tenant, gen, entry.index.generation)
                    index = entry.index
            if entry is not None and entry.index is not index:
                self._retired.put(entry.index, entry.epoch)  # requests that started on it finish on it
            self._cache.put(tenant, CachedIndex(index, time.monotonic(), epoch))
            self._record_cache_bytes()
            return index
        finally:
            tenant_lock.release()

    def _held_epochs(self) -> dict[str, set[str | None]]:
        held = self._retired.epochs()
        for t, e in self._cache.items():
            held.setdefault(t, set()).add(e.epoch)
        return held

    def _drop_tenant(self, tenant: str, epoch: str | None) -> None:
        """The tenant's purge epoch moved: drop every copy of it this replica holds (cached and
        retired indexes, unpublished local shard copies, query vectors, text caches)."""
        with self._lock:
            entry = self._cache.peek(tenant)
            if entry is not None and entry.epoch != epoch:
                self._cache.pop(tenant)
        self._retired.drop_tenant(tenant)
        self.query_cache = QueryVectorCache(self.settings.query_cache_size)  # whole: a purge is rare
        clear_text_caches()
        drop_unpublished_copies(self.settings.index_root, tenant, self._disk_cache_root)
        log.info("purge epoch of %s moved: its copies were dropped", tenant)

    def _with_changes(self, tenant: str, entry: CachedIndex) -> TenantIndex | None:
        """The per-request freshness check: read the tenant's change watermark (a few
        bytes) and, when it moved, reload only the delta and masks over the same base.
        None when the watermark names another generation (CURRENT must be re-read)."""
        index = entry.index
        try:
            wm = layout.read_watermark(self.settings.index_root, tenant)
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
        lags = {k.removesuffix("_s"): float(v) for k, v in lag_summary(index.delta.state).items()
                if k.endswith("_s") and v is not None}
        label = self._tenant_labels.label(tenant)
        if label == OTHER:  # one series for all unnamed tenants: the worst lag among them
            self._other_lags.put(tenant, lags)
            seen = [v for _, v in self._other_lags.items()]
            lags = {stat: max(x.get(stat, 0.0) for x in seen) for stat in lags}
        for stat, v in lags.items():
            self._staleness_gauge.set(v, tags={"tenant": label, "stat": stat})

    def _embedder(self, index: TenantIndex):
        """The index's query embedder, built once per (model, dim) by the core factory,
        which refuses a configured model that is not the one the index was built with."""
        built = EmbedderSpec.from_manifest(index.manifest)
        key = (built.name, built.dim)
        with self._embedder_lock:  # one build (and one ONNX agreement check) per model
            emb = self._embedders.get(key)
            if emb is None:
                if self.settings.embedder == "hashing":
                    spec = f"hashing:{built.dim or self.settings.hashing_dim}"
                elif self.settings.embedder == "sentence-transformers":
                    spec = self.settings.embedder_path or "default"
                else:
                    spec = self.settings.embedder_path if self.settings.embedder_path and not built.hashing else None
                emb = embedder_for_index(index.manifest, spec,
                                         encoder=None if self.settings.query_encoder == "index" else self.settings.query_encoder)
                getattr(emb, "load", lambda: None)()
                self._embedders[key] = emb
        return emb

    def _query_vectors(self, index: TenantIndex, principal: Principal, queries: list[str]) -> list[Any]:
        """(index, queries) -> one vector per query: from the cache (vectors only, keyed by
        tenant, groups, model and normalised text), else encoded in one batch with concurrent requests'
        queries. Runs in a worker thread; each request's legs then run under its own
        principal's mask."""
        emb = self._embedder(index)
        mid = embedder_id(emb)
        vecs = [self.query_cache.get(principal, mid, q) for q in queries]
        for v in vecs:
            self._cache_lookups.inc(tags={"result": "miss" if v is None else "hit"})
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
                self.query_cache.put(principal, mid, queries[i], v)
        return vecs

    @serve.batch(max_batch_size=16, batch_wait_timeout_s=0.002)
    async def encode_batch(self, items: list[tuple[Any, str]]) -> list[Any]:
        self.encode_batch_sizes.append(len(items))
        del self.encode_batch_sizes[:-256]
        return await asyncio.get_running_loop().run_in_executor(self._encode_pool, encode_many, items)

    async def encoder_stats(self) -> dict[str, Any]:
        """Query-vector cache counters and hit rate, and recent encode batch sizes."""
        stats = self.query_cache.stats()
        return {**stats.model_dump(), "hit_rate": stats.hit_rate, "encode_batch_sizes": list(self.encode_batch_sizes),
                "encoders": {f"{k[0]}/{k[1]}": getattr(e, "encoder", "torch") for k, e in self._embedders.items()}}


    def _index_at(self, tenant: str, generation: int) -> TenantIndex | None:
        """The generation a search's first stage ran on, for its expansion: the live one,
        else one just swapped out (a request finishes on the generation it started on)."""
        live = self.index_for(tenant)
        if live is not None and live.generation == generation:
            return live
        return self._retired.get(tenant, generation)

    # -- stages ------------------------------------------------------------------------
    def _first_stages(self, principal: Principal, requests: tuple[SearchRequest, ...], width: int | None,
                      dense: bool = True) -> tuple[TenantIndex | None, tuple[FirstStage, ...]]:
        index = self.index_for(principal.tenant)
        if index is None:  # no index for this tenant: same shape as finding nothing
            return None, tuple(no_first_stage(principal.tenant) for _ in requests)
        vecs = self._query_vectors(index, principal, [r.query for r in requests]) if dense else [None] * len(requests)
        return index, tuple(first_stage(index, principal, r, None, with_candidate_width(self.search_settings, width, r.top_k), v, dense=dense)
                            for r, v in zip(requests, vecs))

    def _first_stage(self, principal: Principal, request: SearchRequest, width: int | None) -> FirstStage:
        return self._first_stages(principal, (request,), width)[1][0]

    async def _in_pool(self, fn, *args):
        self._loop = loop = asyncio.get_running_loop()  # _query_vectors joins encode batches on it
        return await loop.run_in_executor(self._search_pool, fn, *args)

    async def first_stage(self, principal: Principal, request: SearchRequest,
                          candidate_width: int | None = None) -> FirstStage:
        """Filter -> legs -> fuse under the verified principal (``quarry.core.search.retrieval.first_stage``)."""
        await self._routed(principal.tenant)
        return await self._in_pool(self._first_stage, principal, request, candidate_width)

    async def first_stages(self, principal: Principal, requests: tuple[SearchRequest, ...],
                           candidate_width: int | None = None, dense: bool = True) -> tuple[FirstStage, ...]:
        """The first stage of several queries under one principal in one call (the Resolver's
        follow-ups): their encodings join one batch; ``dense=False``: the lexical leg only."""
        return (await self._in_pool(self._first_stages, principal, requests, candidate_width, dense))[1]

    def _evidence(self, index: TenantIndex, principal: Principal, request: SearchRequest,
                  passages: list[Passage], expanded: Expansion, pool: list[Passage]) -> EvidenceSet:
        shown = {e.passage_id for e in expanded.excerpts}
        return gather_evidence(index, principal, request, [p for p in passages if p.passage_id in shown],
                               self.search_settings, lambda qs: self._query_vectors(index, principal, qs), pool)

    def _retrieve(self, principal: Principal, request: SearchRequest, width: int | None) -> Retrieval:
        index, (first,) = self._first_stages(principal, (request,), width)
        survivors = apply_second_stage(first, None, request.top_k).survivors
        if index is None or not survivors:
            return Retrieval(first=first, expansion=nothing_expanded())
        passages = survivor_passages(index, first, survivors)
        expanded = expansion(index, principal, passages, self.search_settings, request.valid_at)
        pool = pool_passages(index, first, survivors, self.search_settings.resolution_pool)
        return Retrieval(first=first, expansion=expanded,
                         evidence=self._evidence(index, principal, request, passages, expanded, pool))

    async def retrieve(self, principal: Principal, request: SearchRequest,
                       candidate_width: int | None = None) -> Retrieval:
        """The first stage and the expansion of its fused top-k on the same index, in one
        call: the search path when no second stage is served for the tenant."""
        await self._routed(principal.tenant)
        return await self._in_pool(self._retrieve, principal, request, candidate_width)

    def _expand(self, req: ExpandRequest) -> Delivery:
        index = self._index_at(req.principal.tenant, req.generation)
        if index is None or not req.passage_ids:
            return Delivery(expansion=nothing_expanded())
        passages = [p for p in (index.passage(pid, req.principal) for pid in req.passage_ids) if p is not None]
        expanded = expansion(index, req.principal, passages, self.search_settings, req.request.valid_at)
        rest = pool_ids(req.ranked, req.passage_ids, self.search_settings.resolution_pool)
        pool = [p for p in (index.passage(pid, req.principal) for pid in rest) if p is not None]
        return Delivery(expansion=expanded, evidence=self._evidence(index, req.principal, req.request, passages,
                                                                     expanded, pool))

    async def expand(self, req: ExpandRequest) -> Delivery:
        """Survivors (ids, delivered order) expanded to parent sections under the token
        ceiling, with the evidence for resolving them."""
        await self._routed(req.principal.tenant)
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

    def _status(self, tenants: list[str] | None) -> dict[str, TenantStatus]:
        """Named tenants (an operator's own) are loaded if published, so the answer does not
        depend on which replica took the call; the platform view lists every published
        tenant, with full detail where this replica has it loaded and, elsewhere, its tier on
        this replica's disk (``quarry.core.index.tiers``: warm or cold)."""
        for t in tenants or ():
            self.index_for(t)  # None (nothing loaded) when the tenant has no published index
        out = {}
        for t, e in self._cache.items():
            if tenants is None or t in tenants:
                out[t] = TenantStatus(generation=e.index.generation, loaded=True, tier="hot",
                                      resident_bytes=e.index.resident_bytes, mapped_bytes=e.index.mapped_bytes,
                                      dense=self.dense_choice.to_json(), freshness=Freshness.of(e.index))
        self._record_cache_bytes()
        if tenants is None:
            root = self.settings.index_root
            gens = {t: g for t in layout.list_tenants(root) if t not in out
                    and (g := layout.current_generation(root, t)) is not None}
            for t, tier in disk_tiers(root, gens, self._disk_cache_root).items():
                out[t] = TenantStatus(generation=gens[t], loaded=False, tier=tier)
            self._record_tiers(out)
        return out

    @property
    def _disk_cache_root(self) -> str:
        return self.settings.disk_cache_dir or tempfile.gettempdir()

    def tenant_cache(self) -> dict[str, Any]:
        """This replica's tenant budget and what it holds (bytes as charged at each put), how
        many tenant loads it has made, and what its disk cache of remote copies holds."""
        disk = cache_usage(self._disk_cache_root) if not layout.is_local(self.settings.index_root) else \
            {"copies": 0, "bytes": 0}
        return {"tenants": len(self._cache), "bytes": self._cache.total_bytes, "loads": self._loads,
                "budget_bytes": self.settings.tenant_cache_bytes, "max_tenants": self.settings.lru_tenants,
                "disk_copies": disk["copies"], "disk_bytes": disk["bytes"],
                "disk_budget_bytes": self.settings.disk_cache_bytes or 0, "replica": _replica_id()}

    def _record_cache_bytes(self) -> None:
        if self._cache_gauge is not None:
            self._cache_gauge.set(float(self._cache.total_bytes))

    def _record_tiers(self, status: dict[str, TenantStatus]) -> None:
        """The platform view's tier counts, and the disk cache's bytes, as gauges."""
        if self._tier_gauge is None:
            return
        counts = Counter(s.tier for s in status.values())
        for tier in TIERS:
            self._tier_gauge.set(float(counts.get(tier, 0)), tags={"tier": tier})
        self._disk_gauge.set(float(self.tenant_cache()["disk_bytes"]))

    def _loaded_index(self, tenant: str) -> TenantIndex | None:
        cached = self._cache.peek(tenant)
        return cached.index if cached is not None else None

    async def status(self, tenants: list[str] | None = None) -> dict[str, TenantStatus]:
        """Loaded tenants of this replica: live generation, the dense leg's device and the
        tenant's freshness (the Gateway adds the second stage it composes); ``tenants``
        limits what is reported."""
        return await asyncio.to_thread(self._status, tenants)


def _replica_id() -> str:
    """This Serve replica's id ("" outside a replica), so per-replica counters can be told apart."""
    try:
        return serve.get_replica_context().replica_id.unique_id
    except Exception:  # noqa: BLE001 - not in a replica (tools, tests)
        return ""


def _cache_lookups_counter():
    from ray.util.metrics import Counter

    return Counter("quarry_query_vector_cache", "Query-vector cache lookups (hit rate = hit / all)",
                   tag_keys=("result",))
