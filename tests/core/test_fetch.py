"""core.fetch: the fetch tool's view is the search excerpt's envelope, under the
principal's permissions; citable text is the passage plus its section."""

from __future__ import annotations

import pytest

from quarry.core.embed.embedders import HashingEmbedder
from quarry.core.agent.fetch import citable_texts, fetch
from quarry.core.index.shards import TenantIndex
from quarry.core.ingest.pipeline import build_corpus
from quarry.core.records import PUBLIC_GROUP, Principal, SearchRequest
from quarry.core.search.in_process import search

pytestmark = pytest.mark.unit

EMB = HashingEmbedder(64)
STAFF = frozenset({"all-staff", "support", "engineering", "finance", "hr"})
# Fields a fetched passage shows as search delivered it unexpanded (search adds the
# verdict, and validity when asked for a date).
SAME = ("passage_id", "doc_id", "version", "anchor", "heading_path", "parent_id", "title", "doc_type", "text",
        "effective_from", "effective_to", "authority", "authority_rank", "entities", "supersedes", "superseded_by",
        "condition", "events", "source_url", "token_count", "trust")


@pytest.fixture(scope="module")
def acme(tmp_path_factory, sample_docs) -> TenantIndex:
    root = str(tmp_path_factory.mktemp("fetch-index"))
    build_corpus([d for d in sample_docs if d.tenant == "acme"], root, EMB)
    return TenantIndex.load(root, "acme")


def _passages(index: TenantIndex):
    return [sh.passage(r) for sh in index.shards for r in range(len(sh))]


def test_a_fetched_passage_carries_the_whole_envelope(acme):
    p = Principal(tenant="acme", subject="t", groups=STAFF)
    rich = [x for x in _passages(acme) if x.envelope.supersedes or x.envelope.condition or x.envelope.events]
    assert rich, "the sample corpus has supersession, conditions and events"
    for x in rich:
        got = fetch(acme, p, x.passage_id)
        assert got is not None and got.kind == "passage" and got.ids == [x.passage_id]
        view = got.passages[0]
        e = x.envelope
        assert (view.supersedes, view.superseded_by, view.condition, view.events, view.entities) == (
            e.supersedes, e.superseded_by, e.condition, e.events, e.entities)
        assert view.parent_id == x.parent_id and view.text == x.text


def test_fetch_and_search_show_one_view(acme):
    p = Principal(tenant="acme", subject="t", groups=STAFF)
    res = search(acme, p, SearchRequest(query="refund policy threshold", top_k=4), EMB)
    plain = [e for e in res.excerpts if e.expanded_to is None and not e.truncated]
    assert plain, res.excerpts
    for e in plain:
        view = fetch(acme, p, e.passage_id).passages[0]
        assert {f: getattr(view, f) for f in SAME} == {f: getattr(e, f) for f in SAME}
        assert set(fetch(acme, p, e.passage_id).to_json()["passages"][0]) == set(e.model_dump(mode="json"))


def test_sections_and_documents(acme):
    p = Principal(tenant="acme", subject="t", groups=STAFF)
    x = _passages(acme)[0]
    sec = fetch(acme, p, x.parent_id)
    assert sec is not None and sec.kind == "section" and sec.ids == [x.parent_id]
    assert sec.section.doc_id == x.doc_id and x.text.split()[0] in sec.section.text
    assert set(sec.to_json()) == {"kind", "generation", "section"}
    doc = fetch(acme, p, x.doc_id)
    assert doc is not None and doc.kind == "document" and x.passage_id in doc.ids
    assert {v.doc_id for v in doc.passages} == {x.doc_id} and len(doc.ids) == len(set(doc.ids))


def test_denied_and_unknown_ids_look_the_same(acme):
    outsider = Principal(tenant="acme", subject="t", groups=frozenset({"nobody"}))
    guarded = [x for x in _passages(acme) if PUBLIC_GROUP not in x.envelope.acl]
    assert guarded
    x = guarded[0]
    assert fetch(acme, outsider, x.passage_id) is None
    assert fetch(acme, outsider, "no-such-id") is None
    assert citable_texts(acme, outsider, [x.passage_id]) == {}
    other_tenant = Principal(tenant="globex", subject="t", groups=STAFF)
    assert fetch(acme, other_tenant, x.passage_id) is None


def test_citable_text_is_the_passage_and_its_section(acme):
    p = Principal(tenant="acme", subject="t", groups=STAFF)
    x = _passages(acme)[0]
    sec = acme.parent(x.parent_id, p)
    texts = citable_texts(acme, p, [x.passage_id, x.parent_id, "missing"])
    assert texts[x.passage_id] == x.text + "\n" + sec.text
    assert texts[x.parent_id] == sec.text and "missing" not in texts
