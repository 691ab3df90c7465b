"""What the Retriever reports to /healthz, outside a replica (no Ray cluster needed): a
named tenant is loaded on the call, so the answer does not depend on which replica took
it; the platform view lists every published tenant, loaded or not."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.serve]


def test_status_names_published_tenants_whichever_replica_answers(tmp_path, sample_docs):
    from quarry.core.embed.embedders import HashingEmbedder
    from quarry.core.ingest.pipeline import build_corpus
    from quarry.serve.deployments.retriever import Retriever
    from quarry.serve.settings import AuthSettings, ServeSettings

    root = str(tmp_path)
    build_corpus([d for d in sample_docs if d.tenant in ("acme", "globex")], root, HashingEmbedder(64))
    settings = ServeSettings(index_root=root, auth=AuthSettings(hs256_secret="x" * 40), reranker_enabled=False)
    r = Retriever.func_or_class(settings)  # a fresh replica: nothing loaded yet
    assert r.loaded() == {}
    own = r._status(["acme"])  # an operator's view loads its own tenant
    assert set(own) == {"acme"} and own["acme"].loaded and own["acme"].generation == 1
    assert set(own["acme"].model_dump(mode="json")) == {"generation", "loaded", "tier", "resident_bytes",
                                                        "mapped_bytes", "dense", "freshness"}
    acme = own["acme"]
    assert acme.tier == "hot" and 0 < acme.mapped_bytes < acme.resident_bytes
    assert r.tenant_cache()["bytes"] == acme.resident_bytes and r.tenant_cache()["tenants"] == 1
    assert r._status(["initech"]) == {}  # not published here: nothing, and nothing loaded
    platform = r._status(None)
    assert set(platform) == {"acme", "globex"}
    # listed, not loaded; a local root is read in place, so on local disk: warm
    assert platform["globex"].model_dump(mode="json") == {"generation": 1, "loaded": False, "tier": "warm"}
    assert set(r.loaded()) == {"acme"}


def test_byte_budget_evicts_least_recently_used_tenants(tmp_path, sample_docs):
    """A budget that holds about one tenant: loading a second evicts the first, and the
    evicted tenant is served again (cold) on its next request."""
    from quarry.core.embed.embedders import HashingEmbedder
    from quarry.core.index.shards import TenantIndex
    from quarry.core.ingest.pipeline import build_corpus
    from quarry.serve.deployments.retriever import Retriever
    from quarry.serve.settings import AuthSettings, ServeSettings

    root = str(tmp_path)
    build_corpus([d for d in sample_docs if d.tenant in ("acme", "globex")], root, HashingEmbedder(64))
    sizes = [TenantIndex.load(root, t).resident_bytes for t in ("acme", "globex")]
    settings = ServeSettings(index_root=root, auth=AuthSettings(hs256_secret="x" * 40), reranker_enabled=False,
                             tenant_cache_bytes=max(sizes) + min(sizes) // 2)  # either fits, not both
    r = Retriever.func_or_class(settings)
    assert r.index_for("acme") is not None
    assert r.index_for("globex") is not None
    assert set(r.loaded()) == {"globex"} and r.tenant_cache()["bytes"] <= settings.tenant_cache_bytes
    assert r.index_for("acme").tenant == "acme" and set(r.loaded()) == {"acme"}
    assert r.tenant_cache()["loads"] == 3  # acme, globex, acme again: each read from the root
    r.index_for("acme")
    assert r.tenant_cache()["loads"] == 3  # held: no load


def test_tenant_routing_setting_drops_the_model_id():
    """tenant_routing false (the benchmark's baseline): the Gateway's Retriever calls carry
    no multiplexed model id, so Serve routes them without regard to tenant."""
    from quarry.serve.deployments.handles import DeploymentStages
    from quarry.serve.settings import AuthSettings, ServeSettings

    auth = AuthSettings(hs256_secret="x" * 40)
    assert DeploymentStages(ServeSettings(index_root="/i", auth=auth), None)._route("acme") == "acme"
    assert DeploymentStages(ServeSettings(index_root="/i", auth=auth, tenant_routing=False), None)._route("acme") is None


def test_routing_model_id_only_marks_the_principals_own_tenant(tmp_path, sample_docs, monkeypatch):
    """The multiplexed model id steers routing only: a request whose id names another
    tenant loads nothing of that tenant; one naming its own tenant goes through the
    multiplexed loader (inside a replica: Serve's wrapper, which reports it to the routers;
    the session app's HTTP tests run that path)."""
    import asyncio

    from ray import serve

    from quarry.core.embed.embedders import HashingEmbedder
    from quarry.core.ingest.pipeline import build_corpus
    from quarry.serve.deployments.retriever import Retriever
    from quarry.serve.settings import AuthSettings, ServeSettings

    root = str(tmp_path)
    build_corpus([d for d in sample_docs if d.tenant in ("acme", "globex")], root, HashingEmbedder(64))
    r = Retriever.func_or_class(ServeSettings(index_root=root, auth=AuthSettings(hs256_secret="x" * 40),
                                              reranker_enabled=False))
    held = []

    async def record(tenant):  # Serve's wrapper needs a replica context; here, record the call
        held.append(tenant)
        return await r._hold_tenant(tenant)

    r._tenant_model = record
    monkeypatch.setattr(serve, "get_multiplexed_model_id", lambda: "globex")
    asyncio.run(r._routed("acme"))  # a model id that is not the principal's tenant
    assert r.loaded() == {} and held == []
    monkeypatch.setattr(serve, "get_multiplexed_model_id", lambda: "acme")
    asyncio.run(r._routed("acme"))
    assert held == ["acme"] and set(r.loaded()) == {"acme"}


def test_tiers_on_an_s3_root_follow_the_disk_cache(s3_server, tmp_path, sample_docs):
    """On an s3:// root (the session's moto server): a tenant loaded here is hot; evicted from
    memory while its shard copies stay in the bounded disk cache it is warm; once the disk
    cache evicts those copies (another tenant's load needs the room) it is cold, and a search
    of it downloads it again. The gauges' source (tenant_cache) follows the same cache."""
    import gc

    from quarry.core.embed.embedders import HashingEmbedder
    from quarry.core.index import disk_cache
    from quarry.core.index.shards import TenantIndex
    from quarry.core.ingest.pipeline import build_corpus
    from quarry.serve.deployments.retriever import Retriever
    from quarry.serve.settings import AuthSettings, ServeSettings

    root = s3_server.uri("tiers", "idx")
    build_corpus([d for d in sample_docs if d.tenant in ("acme", "globex")], root, HashingEmbedder(64))
    probe = tmp_path / "probe"
    sizes = {t: TenantIndex.load(root, t, cache_dir=str(probe)).resident_bytes for t in ("acme", "globex")}
    disk = {t: sum(disk_cache.dir_bytes(d) for u, d in disk_cache.copies(probe).items() if f"/{t}/gen-" in u)
            for t in ("acme", "globex")}
    cache = tmp_path / "disk-cache"

    def replica(disk_bytes):
        return Retriever.func_or_class(ServeSettings(
            index_root=root, auth=AuthSettings(hs256_secret="x" * 40), reranker_enabled=False,
            state_dir=str(tmp_path / "runs"), disk_cache_dir=str(cache), disk_cache_bytes=disk_bytes,
            tenant_cache_bytes=max(sizes.values()) + min(sizes.values()) // 2))  # one tenant in memory

    r = replica(sum(disk.values()) * 2)  # both tenants fit on disk
    assert {t: s.tier for t, s in r._status(None).items()} == {"acme": "cold", "globex": "cold"}
    assert r.index_for("acme") is not None
    assert {t: s.tier for t, s in r._status(None).items()} == {"acme": "hot", "globex": "cold"}
    assert r.index_for("globex") is not None  # evicts acme from memory, not from disk
    status = r._status(None)
    assert {t: (s.tier, s.loaded) for t, s in status.items()} == {"acme": ("warm", False), "globex": ("hot", True)}
    usage = r.tenant_cache()
    assert usage["disk_copies"] == len(disk_cache.copies(cache)) >= 2 and usage["disk_bytes"] >= sum(disk.values())

    # a disk cache that holds only one tenant's copies: once acme is out of memory (its
    # copies unpinned), globex's new copies evict acme's from disk: acme is cold
    cache = tmp_path / "small-disk-cache"
    r2 = replica(max(disk.values()) + min(disk.values()) // 2)
    assert r2.index_for("acme") is not None
    r2._cache.pop("acme")
    gc.collect()  # the dropped index's shards unpin their copies
    assert r2.index_for("globex") is not None  # a new copy: the least recently used (acme's) goes
    tiers = {t: s.tier for t, s in r2._status(None).items()}
    assert tiers == {"acme": "cold", "globex": "hot"}, tiers
    assert r2.index_for("acme").tenant == "acme"  # cold is served: downloaded again
