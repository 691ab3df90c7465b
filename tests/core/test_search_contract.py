"""Contract suite: no leg (lexical, dense) and no fused search ever returns a passage that
violates tenant, ACL group, doc_type or valid_at — over random corpora, principals and
filters. Denied passages never reach any leg's scored output."""

from __future__ import annotations

import datetime as dt
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quarry.core.embed.embedders import HashingEmbedder, passage_text_for_embedding
from quarry.core.index.filters import epoch_day
from quarry.core.index.build import build_tenant_index
from quarry.core.index.shards import TenantIndex
from quarry.core.ingest.pipeline import prepare
from quarry.core.records import Principal, SearchRequest, SourceDocument
from quarry.core.search.in_process import search
from quarry.core.search.retrieval import dense_leg, lexical_leg
from quarry.core.search.settings import SearchSettings

pytestmark = pytest.mark.unit

WORDS = ["settlement", "cutoff", "refund", "acme", "E-4471", "payout", "policy", "sso", "invoice", "batch"]
GROUPS = ["g1", "g2", "g3", "*"]
TYPES = ["policy", "runbook", "ticket"]
EMB = HashingEmbedder(dim=32)
DAY0 = dt.date(2025, 1, 1)

dates = st.one_of(st.none(), st.integers(0, 700).map(lambda d: DAY0 + dt.timedelta(days=d)))


@st.composite
def documents(draw, tenant: str, n: int):
    docs = []
    for i in range(n):
        a, b = draw(dates), draw(dates)
        if a and b and b < a:
            a, b = b, a
        docs.append(SourceDocument(
            doc_id=f"{tenant}-d{i}", tenant=tenant, title=f"doc {i}", format="text",
            text=" ".join(draw(st.lists(st.sampled_from(WORDS), min_size=3, max_size=12))) + ".",
            acl=tuple(draw(st.lists(st.sampled_from(GROUPS), min_size=1, max_size=2, unique=True))),
            doc_type=draw(st.sampled_from(TYPES)), effective_from=a, effective_to=b,
        ))
    return docs


def allowed(p, principal: Principal, req: SearchRequest) -> bool:
    e = p.envelope
    if not principal.can_read(e.tenant, e.acl):
        return False
    if req.doc_type is not None and e.doc_type not in req.doc_type:
        return False
    if req.valid_at is not None:
        d = epoch_day(req.valid_at)
        if e.effective_from and epoch_day(e.effective_from) > d:
            return False
        if e.effective_to and epoch_day(e.effective_to) < d:
            return False
    return True


def build(root: str, docs, n_shards: int = 1) -> TenantIndex:
    passages, parents = prepare(docs)
    emb = EMB.encode([passage_text_for_embedding(p) for p in passages])
    tenant = docs[0].tenant
    build_tenant_index(root, tenant, passages, parents, emb, n_shards=n_shards, embedder_name=EMB.name)
    return TenantIndex.load(root, tenant)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(
    data=st.data(),
    n_shards=st.sampled_from([1, 2, 3]),
    groups=st.lists(st.sampled_from(["g1", "g2", "g3", "g4"]), max_size=3, unique=True),
    doc_type=st.one_of(st.none(), st.lists(st.sampled_from(TYPES), min_size=1, max_size=2, unique=True)),
    valid_at=dates,
    query=st.lists(st.sampled_from(WORDS), min_size=1, max_size=4).map(" ".join),
    wrong_tenant=st.booleans(),
)
def test_no_leg_returns_a_forbidden_passage(data, n_shards, groups, doc_type, valid_at, query, wrong_tenant):
    docs_a = data.draw(documents("ta", 12))
    docs_b = data.draw(documents("tb", 6))
    with tempfile.TemporaryDirectory() as root:
        idx = build(root, docs_a, n_shards)
        build(root, docs_b)
        principal = Principal(tenant="tb" if wrong_tenant else "ta", subject="u", groups=frozenset(groups))
        req = SearchRequest(query=query, top_k=5, doc_type=tuple(doc_type) if doc_type else None, valid_at=valid_at)
        masks = idx.masks(principal, req.doc_type, req.valid_at)
        lex = lexical_leg(idx, masks, query, 50, 0.0)
        den = dense_leg(idx, masks, EMB.encode([query])[0], 50, -1.0)
        for row in (*lex.rows, *den.rows):
            p = idx.passage_at(row)
            assert allowed(p, principal, req), (p.passage_id, principal, req)
        assert all(s > 0 for s in lex.scores)  # masked or zero-score hits are never candidates
        # The legs see every visible row they should: the dense leg (floor -1) returns them all.
        visible = {idx.passage_at(r).passage_id for r in den.rows}
        expect = {p.passage_id for s in idx.shards for p in (s.passage(r) for r in range(len(s)))
                  if allowed(p, principal, req)}
        assert visible == set(list(expect)) or len(expect) > 50
        if wrong_tenant:
            assert not lex.rows and not den.rows
            with pytest.raises(PermissionError):
                search(idx, principal, req, EMB)
        else:
            res = search(idx, principal, req, EMB, SearchSettings(dense_floor=-1.0))
            for c in res.candidates:
                assert allowed(idx.passage_at(c.row), principal, req)
            for e in res.excerpts:
                assert allowed(idx.passage(e.passage_id, Principal(tenant="ta", subject="x", groups=frozenset(["g1", "g2", "g3", "g4"]))), principal, req)
            # direct lookups obey the same rule
            for p in (s.passage(r) for s in idx.shards for r in range(len(s))):
                got = idx.passage(p.passage_id, principal)
                if not principal.can_read(p.envelope.tenant, p.envelope.acl):
                    assert got is None
