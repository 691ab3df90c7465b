"""The Retriever batches query encodings across concurrent requests (@serve.batch), and each
request still runs its legs under its own principal's mask: concurrent requests from
different tenants and groups each get exactly their in-process answer."""

from __future__ import annotations

import asyncio

import pytest

pytestmark = [pytest.mark.serve, pytest.mark.slow]

PRINCIPALS = [("acme", ("all-staff",)), ("acme", ("hr",)), ("acme", ("finance-admins",)),
              ("globex", ("all-staff",)), ("globex", ()), ("initech", ("all-staff",))]
QUERIES = ["quokkaband pay bands ranges", "refund approval threshold", "settlement batch cutoff",
           "treasury account details IBAN"]


def _answer(res) -> list[tuple[str, float]]:
    """A first stage's candidates with their fused and dense scores (the dense one is the
    query vector's): what the Retriever's batched encode feeds."""
    dense = lambda c: None if c.dense_score is None else round(float(c.dense_score), 6)  # noqa: E731
    return [(c.passage_id, round(float(c.fused_score), 9), dense(c)) for c in res.candidates]


def _docs(res) -> set[str]:
    return {c.doc_id for c in res.candidates}


def test_concurrent_principals_get_their_in_process_answers(quarry_app):
    from ray import serve

    from quarry.core.embed.factory import embedder_for_index
    from quarry.core.index.shards import TenantIndex
    from quarry.core.records import Principal, SearchRequest
    from quarry.core.search.retrieval import first_stage
    from quarry.core.search.settings import SearchSettings
    from quarry.serve.deployments.retriever import Retriever
    from quarry.serve.settings import AuthSettings, ServeSettings

    settings = ServeSettings(index_root=quarry_app.root, auth=AuthSettings(hs256_secret="x" * 40),
                             reranker_enabled=False, encode_batch_size=8, encode_batch_wait_ms=100,
                             query_cache_size=0)  # every request encodes: batching is what is tested
    handle = serve.run(Retriever.options(name="EncodeProbe", max_ongoing_requests=32,
                                         ray_actor_options={"num_cpus": 0}).bind(settings),
                       name="encode-probe", route_prefix=None)
    work = [(Principal(tenant=t, subject=f"u{i}", groups=frozenset(g)), SearchRequest(query=q, top_k=4))
            for i, (t, g) in enumerate(PRINCIPALS) for q in QUERIES]
    try:
        async def fire():
            return await asyncio.gather(*(handle.first_stage.remote(p, r) for p, r in work))

        served = asyncio.run(fire())
        stats = handle.encoder_stats.remote().result()
    finally:
        serve.delete("encode-probe")
    assert max(stats["encode_batch_sizes"]) > 1, stats  # concurrent queries shared encode batches
    assert sum(stats["encode_batch_sizes"]) == len(work)
    search = SearchSettings(top_k_ceiling=settings.top_k_ceiling)
    indexes = {t: TenantIndex.load(quarry_app.root, t) for t, _ in PRINCIPALS}
    for (p, r), got in zip(work, served):
        idx = indexes[p.tenant]
        want = first_stage(idx, p, r, embedder_for_index(idx.manifest), search)
        assert _answer(got) == _answer(want), (p, r.query)
    # the test can fail: principals' answers differ (ACL masks are applied per request)
    by_group = {tuple(sorted(p.groups)): _answer(got) for (p, r), got in zip(work, served)
                if p.tenant == "acme" and r.query == QUERIES[0]}
    assert by_group[("all-staff",)] != by_group[("hr",)]


def test_cached_vectors_answer_like_fresh_ones(quarry_app):
    from ray import serve

    from quarry.core.records import Principal, SearchRequest
    from quarry.serve.deployments.retriever import Retriever
    from quarry.serve.settings import AuthSettings, ServeSettings

    settings = ServeSettings(index_root=quarry_app.root, auth=AuthSettings(hs256_secret="x" * 40),
                             reranker_enabled=False, query_cache_size=16)
    handle = serve.run(Retriever.options(name="CacheProbe", ray_actor_options={"num_cpus": 0}).bind(settings),
                       name="cache-probe", route_prefix=None)
    p_staff = Principal(tenant="acme", subject="a", groups=frozenset({"all-staff"}))
    p_hr = Principal(tenant="acme", subject="b", groups=frozenset({"hr"}))
    try:
        first = handle.first_stage.remote(p_staff, SearchRequest(query="quokkaband pay bands", top_k=4)).result()
        again = handle.first_stage.remote(p_staff, SearchRequest(query=" quokkaband  pay bands", top_k=4)).result()
        other = handle.first_stage.remote(p_hr, SearchRequest(query="quokkaband pay bands", top_k=4)).result()
        stats = handle.encoder_stats.remote().result()
    finally:
        serve.delete("cache-probe")
    # the vector cache is keyed by tenant and groups: staff's repeat hits, hr's same text misses
    assert (stats["hits"], stats["misses"]) == (1, 2) and stats["hit_rate"] == pytest.approx(1 / 3)
    assert _answer(again) == _answer(first)
    # each principal's legs run under its own mask: hr sees pay bands
    assert "pay-bands" in _docs(other)
    assert "pay-bands" not in _docs(first)


def test_query_vectors_outside_a_replica_use_the_cache_and_each_principals_mask(tmp_path, sample_docs):
    """The same method without Serve's event loop (no Ray cluster needed): one encode per
    distinct (tenant, groups, normalised query), never shared across groups; answers differ."""
    from quarry.core.embed.embedders import HashingEmbedder
    from quarry.core.index.shards import TenantIndex
    from quarry.core.ingest.pipeline import build_corpus
    from quarry.core.records import Principal, SearchRequest
    from quarry.core.search.retrieval import first_stage
    from quarry.core.search.settings import SearchSettings
    from quarry.serve.deployments.retriever import Retriever
    from quarry.serve.settings import AuthSettings, ServeSettings

    root = str(tmp_path)
    build_corpus([d for d in sample_docs if d.tenant == "acme"], root, HashingEmbedder(64))
    settings = ServeSettings(index_root=root, auth=AuthSettings(hs256_secret="x" * 40), reranker_enabled=False)
    r = Retriever.func_or_class(settings)  # the class itself, outside a replica
    index = TenantIndex.load(root, "acme")
    staff = Principal(tenant="acme", subject="a", groups=frozenset({"all-staff"}))
    fin = Principal(tenant="acme", subject="b", groups=frozenset({"finance-admins"}))
    got = {p.subject: r._first_stage(p, SearchRequest(query=q, top_k=4), None)
           for p, q in ((staff, "treasury account details IBAN"), (fin, " treasury account  details IBAN"))}
    st = r.query_cache.stats()
    assert (st.hits, st.misses, st.size) == (0, 2, 2)  # other groups: another key
    staff2 = Principal(tenant="acme", subject="c", groups=frozenset({"all-staff"}))
    r._first_stage(staff2, SearchRequest(query="treasury account details IBAN", top_k=4), None)
    assert r.query_cache.stats().hits == 1  # same tenant and groups: shared
    for p in (staff, fin):
        want = first_stage(index, p, SearchRequest(query="treasury account details IBAN", top_k=4), HashingEmbedder(64),
                           SearchSettings(top_k_ceiling=settings.top_k_ceiling))
        assert _answer(got[p.subject]) == _answer(want)
    assert _answer(got["a"]) != _answer(got["b"])  # finance-admins alone see the treasury accounts
    assert got["b"].candidates[0].doc_id == "treasury-accounts"
    assert "treasury-accounts" not in _docs(got["a"])


def test_one_call_retrieval_equals_the_in_process_stages(tmp_path, sample_docs):
    """``retrieve`` (first stage + expansion of the fused top-k, one call) and
    ``first_stages`` (several queries, one call) answer exactly as the in-process stages,
    under each principal's mask."""
    from quarry.core.embed.embedders import HashingEmbedder
    from quarry.core.index.shards import TenantIndex
    from quarry.core.ingest.pipeline import build_corpus
    from quarry.core.records import Principal, SearchRequest
    from quarry.core.search.in_process import search
    from quarry.core.search.retrieval import first_stage
    from quarry.core.search.settings import SearchSettings
    from quarry.serve.deployments.retriever import Retriever
    from quarry.serve.settings import AuthSettings, ServeSettings

    root = str(tmp_path)
    build_corpus([d for d in sample_docs if d.tenant == "acme"], root, HashingEmbedder(64))
    settings = ServeSettings(index_root=root, auth=AuthSettings(hs256_secret="x" * 40), reranker_enabled=False)
    r = Retriever.func_or_class(settings)
    index = TenantIndex.load(root, "acme")
    s = SearchSettings(top_k_ceiling=settings.top_k_ceiling)
    staff = Principal(tenant="acme", subject="a", groups=frozenset({"all-staff"}))
    fin = Principal(tenant="acme", subject="b", groups=frozenset({"finance-admins"}))
    for p in (staff, fin):
        req = SearchRequest(query="treasury account details IBAN", top_k=3)
        got = r._retrieve(p, req, None)
        want = search(index, p, req, HashingEmbedder(64), s, resolve=False)
        assert _answer(got.first) == [(c.passage_id, round(float(c.fused_score), 9),
                                       None if c.dense_score is None else round(float(c.dense_score), 6))
                                      for c in want.candidates]
        assert [(e.passage_id, e.text, e.expanded_to) for e in got.expansion.excerpts] == \
            [(e.passage_id, e.text, e.expanded_to) for e in want.excerpts]
    assert "treasury-accounts" not in {e.doc_id for e in r._retrieve(staff, req, None).expansion.excerpts}
    reqs = tuple(SearchRequest(query=q, top_k=3) for q in QUERIES)
    many = r._first_stages(fin, reqs, 3)[1]
    narrow = s.model_copy(update={"candidate_width": 3})
    assert [_answer(f) for f in many] == [_answer(first_stage(index, fin, q, HashingEmbedder(64), narrow))
                                         for q in reqs]
    other = Principal(tenant="globex", subject="c", groups=frozenset({"all-staff"}))
    assert [f.candidates for f in r._first_stages(other, reqs, 3)[1]] == [()] * len(reqs)  # no globex index here
