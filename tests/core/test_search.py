"""Hybrid search on the sample corpus with the packaged MiniLM: identifiers, dates,
groups, expansion under a token ceiling, honest empty results."""

from __future__ import annotations

import datetime as dt

import pytest

from quarry.core.text.units import count_tokens
from quarry.core.index.shards import TenantIndex
from quarry.core.records import Principal, SearchRequest
from quarry.core.search.in_process import search
from quarry.core.search.retrieval import lexical_leg
from quarry.core.search.settings import SearchSettings

pytestmark = [pytest.mark.unit, pytest.mark.slow]

STAFF = frozenset({"all-staff", "support", "engineering"})
IDENTIFIERS = ["E-4471", "acme-9", "reconcile_settlement", "ord_4821", "v2.3.1", "INC-2291", "payout_batch_v2",
               "INC-3107", "INC-1877"]


@pytest.fixture(scope="module")
def indexes(sample_index_root):
    return {t: TenantIndex.load(sample_index_root, t) for t in ("acme", "globex", "initech")}


def docs_containing(index, literal, principal):
    out = set()
    for sh in index.shards:
        for r in range(len(sh)):
            p = sh.passage(r)
            hay = " ".join((p.envelope.title, *p.heading_path, p.text))
            if literal in hay and principal.can_read(p.envelope.tenant, p.envelope.acl):
                out.add(p.doc_id)
    return out


@pytest.mark.parametrize("ident", IDENTIFIERS)
def test_identifier_query_ranks_the_literal_document_first(indexes, minilm, ident):
    hits = 0
    for tenant, idx in indexes.items():
        principal = Principal(tenant=tenant, subject="t", groups=STAFF)
        want = docs_containing(idx, ident, principal)
        if not want:
            continue
        hits += 1
        lex = lexical_leg(idx, idx.masks(principal), ident, 10, 0.0)
        assert idx.passage_at(lex.rows[0]).doc_id in want, (tenant, ident)
        res = search(idx, principal, SearchRequest(query=ident), minilm)
        assert res.candidates[0].doc_id in want, (tenant, ident, res.candidates[:3])
        assert res.excerpts[0].doc_id in want
    assert hits >= 1


def test_valid_at_returns_only_passages_in_force_and_flags_unknown(indexes, minilm):
    idx = indexes["acme"]
    principal = Principal(tenant="acme", subject="t", groups=STAFF)
    for day, version in ((dt.date(2025, 6, 1), "1"), (dt.date(2026, 3, 1), "2")):
        res = search(idx, principal, SearchRequest(query="refund policy window days", top_k=10,
                                                          valid_at=day), minilm)
        versions = {e.version for e in res.excerpts if e.doc_id == "refund-policy"}
        assert versions == {version}, (day, versions)
        for e in res.excerpts:
            if e.effective_from is None and e.effective_to is None:
                assert e.validity == "unknown"
            else:
                assert e.validity == "in_force"
                assert (e.effective_from or day) <= day <= (e.effective_to or day)
    res = search(idx, principal, SearchRequest(query="refund policy window days"), minilm)
    assert all(e.validity is None for e in res.excerpts)


def test_group_restricted_document(indexes, minilm):
    idx = indexes["acme"]
    q = SearchRequest(query="Acme treasury account details IBAN", top_k=5)
    staff = search(idx, Principal(tenant="acme", subject="t", groups=STAFF), q, minilm)
    fin = search(idx, Principal(tenant="acme", subject="t", groups=frozenset({"finance-admins"})), q, minilm)
    assert "treasury-accounts" not in {c.doc_id for c in staff.candidates}
    assert fin.excerpts[0].doc_id == "treasury-accounts"


@pytest.mark.parametrize("ceiling", [16, 40, 120, 400])
def test_expansion_never_exceeds_the_token_ceiling(indexes, minilm, ceiling):
    idx = indexes["acme"]
    principal = Principal(tenant="acme", subject="t", groups=STAFF)
    res = search(idx, principal, SearchRequest(query="settlement cutoff EUR", top_k=6), minilm,
                        SearchSettings(delivered_token_ceiling=ceiling))
    total = sum(count_tokens(e.text) for e in res.excerpts)
    assert total == res.delivered_tokens <= ceiling
    if ceiling == 16:
        assert res.truncated  # six survivors cannot fit in 16 tokens, and the response says so
        assert any(s.name == "expand" and s.note == "truncated" for s in res.stages)
    full = search(idx, principal, SearchRequest(query="settlement cutoff EUR", top_k=6), minilm,
                         SearchSettings(delivered_token_ceiling=100_000))
    assert not full.truncated


def test_survivors_expand_to_their_parent_section(tmp_path):
    from quarry.core.embed.embedders import HashingEmbedder
    from quarry.core.ingest.pipeline import build_corpus
    from quarry.core.records import SourceDocument

    paras = [" ".join(f"{w}{i}" for i in range(120)) for w in ("alpha", "beta", "gamma")]
    doc = SourceDocument(doc_id="long", tenant="t", title="Long", acl=("*",),
                         text="# Long\n\n## Section\n\n" + "\n\n".join(paras))
    emb = HashingEmbedder()
    build_corpus([doc], str(tmp_path), emb)
    idx = TenantIndex.load(str(tmp_path), "t")
    principal = Principal(tenant="t", subject="u")
    res = search(idx, principal, SearchRequest(query="beta7 beta8", top_k=1), emb,
                        SearchSettings(delivered_token_ceiling=100_000))
    top = res.excerpts[0]
    passage = idx.passage(top.passage_id, principal)
    assert top.expanded_to == passage.parent_id and passage.text in top.text and len(top.text) > len(passage.text)
    small = search(idx, principal, SearchRequest(query="beta7 beta8", top_k=1), emb,
                          SearchSettings(delivered_token_ceiling=200))
    assert small.excerpts[0].expanded_to is None and small.excerpts[0].text == passage.text  # parent does not fit


def test_context_is_indexed_but_never_evidence(indexes, minilm):
    idx = indexes["acme"]
    principal = Principal(tenant="acme", subject="t", groups=STAFF)
    res = search(idx, principal, SearchRequest(query="settlement cutoff", top_k=5), minilm,
                        SearchSettings(expand=False))
    for e in res.excerpts:
        p = idx.passage(e.passage_id, principal)
        assert p.context, "extractive preamble missing"
        assert e.text == p.text and p.context not in e.text


def test_empty_result_says_what_was_tried(indexes, minilm):
    idx = indexes["acme"]
    principal = Principal(tenant="acme", subject="t", groups=STAFF)
    res = search(idx, principal, SearchRequest(query="zzqx", doc_type=("contract",),
                                                      valid_at=dt.date(2020, 1, 1)), minilm)
    assert not res.excerpts
    assert "lexical" in res.message and "semantic" in res.message and "doc_type" in res.message
    assert "valid_at=2020-01-01" in res.message


def test_top_k_ceiling_enforced(indexes, minilm):
    idx = indexes["acme"]
    with pytest.raises(ValueError, match="ceiling"):
        search(idx, Principal(tenant="acme", subject="t"), SearchRequest(query="x", top_k=30), minilm,
                      SearchSettings(top_k_ceiling=10))
