"""The filter contract over the HNSW dense path (shards above ``APPROX_THRESHOLD`` rows use
``IndexHNSWFlat`` with ``SearchParametersHNSW(sel=...)``): built here with the threshold at 0
so every shard is HNSW, then the same checks as the flat suite."""

from __future__ import annotations

import tempfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pytest

from quarry.core.embed.embedders import passage_text_for_embedding
from quarry.core.index.build import build_tenant_index
from quarry.core.index.shards import TenantIndex
from quarry.core.ingest.pipeline import prepare
from quarry.core.records import Principal, SearchRequest
from quarry.core.search.in_process import search
from quarry.core.search.retrieval import dense_leg
from quarry.core.search.settings import SearchSettings

from test_search_contract import EMB, TYPES, WORDS, allowed, dates, documents  # the flat suite's generators

pytestmark = pytest.mark.unit


def build_hnsw(root: str, docs, n_shards: int) -> TenantIndex:
    passages, parents = prepare(docs)
    emb = EMB.encode([passage_text_for_embedding(p) for p in passages])
    build_tenant_index(root, docs[0].tenant, passages, parents, emb, n_shards=n_shards,
                       embedder_name=EMB.name, approx_threshold=0)
    return TenantIndex.load(root, docs[0].tenant)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(
    data=st.data(),
    n_shards=st.sampled_from([1, 2]),
    groups=st.lists(st.sampled_from(["g1", "g2", "g3", "g4"]), max_size=3, unique=True),
    doc_type=st.one_of(st.none(), st.lists(st.sampled_from(TYPES), min_size=1, max_size=2, unique=True)),
    valid_at=dates,
    query=st.lists(st.sampled_from(WORDS), min_size=1, max_size=4).map(" ".join),
)
def test_hnsw_leg_never_returns_a_forbidden_passage(data, n_shards, groups, doc_type, valid_at, query):
    docs = data.draw(documents("ta", 14))
    with tempfile.TemporaryDirectory() as root:
        idx = build_hnsw(root, docs, n_shards)
        assert all(sh.dense_kind.startswith("hnsw") for sh in idx.shards if len(sh))
        principal = Principal(tenant="ta", subject="u", groups=frozenset(groups))
        req = SearchRequest(query=query, top_k=5, doc_type=tuple(doc_type) if doc_type else None, valid_at=valid_at)
        masks = idx.masks(principal, req.doc_type, req.valid_at)
        den = dense_leg(idx, masks, EMB.encode([query])[0], 50, -1.0)
        got = {idx.passage_at(r).passage_id for r in den.rows}
        expect = {p.passage_id for s in idx.shards for p in (s.passage(r) for r in range(len(s)))
                  if allowed(p, principal, req)}
        assert got <= expect  # never a forbidden row
        assert got == expect  # and on a corpus this small, HNSW (efSearch >= 128) finds every visible row
        res = search(idx, principal, req, EMB, SearchSettings(dense_floor=-1.0))
        for c in res.candidates:
            assert allowed(idx.passage_at(c.row), principal, req)
