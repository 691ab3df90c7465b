"""Base + delta + masks against the oracle: a full rebuild from the same final sources.

In-process (``quarry.core.changes.delta.apply_local``, HashingEmbedder): what every principal can
see (passages, documents, parents, each leg's hits) over the base with changes applied
equals what a rebuild from the final sources shows, for fixed and for random sequences of
upserts, deletes and ACL changes (hypothesis).
"""

from __future__ import annotations

import datetime as dt
import itertools
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers.freshness import (BASE, EMB, GROUPS, PRINCIPALS, QUERIES, WORDS, assert_same_view, ch, doc,
                               final_sources, rebuild)
from quarry.core.changes.log import Change
from quarry.core.changes.delta import apply_local
from quarry.core.index.shards import TenantIndex
from quarry.core.ingest.pipeline import build_corpus
from quarry.core.records import Principal, SearchRequest, SourceDocument
from quarry.core.search.in_process import search
from quarry.core.search.retrieval import lexical_leg
from quarry.core.search.settings import SearchSettings

pytestmark = pytest.mark.unit


@pytest.fixture()
def base_root(tmp_path):
    root = str(tmp_path / "idx")
    build_corpus(BASE, root, EMB)
    return root


def test_revocation_delete_and_upsert_match_a_rebuild(base_root):
    new = doc("d9", "1", ["quota", "ledger", "fresh", "marker"], ("a",))
    changes = [
        ch("acl", "d0", 1, acl=["b"]),  # revoke a, grant b
        ch("delete", "d1", 2),
        ch("upsert", "d3", 3, document=doc("d3", "1", ["refund", "changed", "text"], ("a", "c"), 2).model_dump()),
        ch("upsert", "d9", 4, document=new.model_dump()),
        ch("upsert", "d2", 5, document=doc("d2", "2", ["cutover", "v2"], ("*",)).model_dump()),  # a second version
    ]
    seq, res = apply_local(base_root, "t", changes, EMB)
    assert seq == 1 and set(res.outcomes.values()) == {"applied"}
    idx = TenantIndex.load(base_root, "t")
    assert idx.delta_seq == 1 and len(idx.shards) == 2
    assert_same_view(idx, rebuild(final_sources(BASE, changes)))
    a = Principal(tenant="t", subject="u", groups=frozenset({"a"}))
    assert idx.passage(idx.shards[0].passage_ids[0], a) is None or not idx.shards[0].passage_ids[0].startswith("d0")
    assert not idx.document("d0", a) and idx.document("d9", a)
    r = search(idx, a, SearchRequest(query="fresh marker", top_k=3), EMB, SearchSettings(dense_floor=-1))
    assert r.excerpts and r.excerpts[0].doc_id == "d9"
    # re-applying the same log changes nothing and publishes nothing
    seq2, res2 = apply_local(base_root, "t", changes, EMB)
    assert seq2 is None and set(res2.outcomes.values()) == {"stale"}


def test_a_second_delta_reuses_and_masks_the_first(base_root):
    c1 = [ch("upsert", "d9", 1, document=doc("d9", "1", ["quota", "marker"], ("a",)).model_dump()),
          ch("upsert", "d8", 2, document=doc("d8", "1", ["ledger", "marker"], ("b",)).model_dump())]
    apply_local(base_root, "t", c1, EMB)
    c2 = [ch("delete", "d9", 3), ch("acl", "d8", 4, acl=["c"]), ch("acl", "d4", 5, acl=["*"])]
    seq, _ = apply_local(base_root, "t", c2, EMB)
    idx = TenantIndex.load(base_root, "t")
    assert seq == 2 and idx.delta.shard is not None and idx.delta.shard.dir.parent.name == "delta-1"  # reused
    assert_same_view(idx, rebuild(final_sources(BASE, c1 + c2)))


def test_delta_bm25_uses_the_rebuilds_statistics(base_root):
    changes = [ch("delete", "d1", 1), ch("upsert", "d9", 2, document=doc("d9", "1", ["quota", "zz"], ("a",)).model_dump())]
    apply_local(base_root, "t", changes, EMB)
    idx, want = TenantIndex.load(base_root, "t"), rebuild(final_sources(BASE, changes))
    p = PRINCIPALS[-1]
    for q in QUERIES:
        got = lexical_leg(idx, idx.masks(p), q, 1000, 0.0)
        exp = lexical_leg(want, want.masks(p), q, 1000, 0.0)
        pid = lambda ix, g: ix.shards[g >> 32].passage_ids[g & 0xFFFFFFFF]  # noqa: E731
        g_s = {pid(idx, r): s for r, s in zip(got.rows, got.scores) if (r >> 32) == 1}  # delta rows
        e_s = {pid(want, r): s for r, s in zip(exp.rows, exp.scores)}
        for k, v in g_s.items():
            assert v == pytest.approx(e_s[k], rel=1e-5)


# --------------------------------------------------------------------------- property

def _change_strategy():
    doc_ids = st.sampled_from([f"d{i}" for i in range(7)])
    versions = st.sampled_from(["1", "2"])
    acls = st.lists(st.sampled_from(GROUPS + ["*"]), min_size=1, max_size=2, unique=True)
    words = st.lists(st.sampled_from(WORDS + ["novel", "marker"]), min_size=2, max_size=6)
    upsert = st.builds(lambda d, v, w, a, n: ("upsert", d, dict(document=doc(d, v, w, tuple(a), n).model_dump())),
                       doc_ids, versions, words, acls, st.integers(1, 2))
    delete = st.builds(lambda d, v: ("delete", d, {} if v is None else {"version": v}), doc_ids, st.none() | versions)
    acl = st.builds(lambda d, v, a: ("acl", d, {"acl": a, **({} if v is None else {"version": v})}),
                    doc_ids, st.none() | versions, acls)
    return st.one_of(upsert, delete, acl)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(batches=st.lists(st.lists(st.tuples(_change_strategy(), st.integers(0, 50)), min_size=1, max_size=6),
                        min_size=1, max_size=3))
def test_property_what_a_principal_sees_equals_a_rebuild(batches):
    root = tempfile.mkdtemp(prefix="quarry-prop-")
    build_corpus(BASE, root, EMB)
    applied: list[Change] = []
    counter = itertools.count()
    for batch in batches:
        cs = [ch(op, d, minute, change_id=f"c{next(counter)}", **kw) for (op, d, kw), minute in batch]
        apply_local(root, "t", cs, EMB)
        applied.extend(cs)
    # the oracle applies in (at, id) order, except that a change older than one already
    # applied to the same document (in an earlier batch) is skipped as stale by design
    kept = _not_stale(batches, applied)
    assert_same_view(TenantIndex.load(root, "t"), rebuild(final_sources(BASE, kept)))


def _not_stale(batches, applied: list[Change]) -> list[Change]:
    """Changes the fold applies: in each batch, those after the document's last applied change."""
    last: dict[str, tuple] = {}
    out, i = [], 0
    for batch in batches:
        cs = applied[i:i + len(batch)]
        i += len(batch)
        for c in sorted(cs, key=lambda c: (c.at, c.change_id)):
            if (c.at, c.change_id) > last.get(c.doc_id, (dt.datetime.min.replace(tzinfo=dt.timezone.utc), "")):
                out.append(c)
                last[c.doc_id] = (c.at, c.change_id)
    return out


def test_as_of_superseded_versions_stay_queryable_and_a_delete_removes_every_version(tmp_path):
    import datetime as dt

    from helpers.freshness import EMB as emb

    root = str(tmp_path / "asof")
    v1 = SourceDocument(doc_id="rate", version="1", tenant="t", acl=("*",), title="Refund rate",
                        text="Refunds above 2.5% need approval.", effective_to=dt.date(2026, 2, 28))
    other = SourceDocument(doc_id="misc", version="1", tenant="t", acl=("*",), text="Unrelated quota note.")
    build_corpus([v1, other], root, emb)
    v2 = v1.model_copy(update={"version": "2", "text": "Refunds above 3% need approval.", "effective_to": None,
                               "effective_from": dt.date(2026, 3, 1), "supersedes": ("rate@1",)})
    apply_local(root, "t", [ch("upsert", "rate", 1, document=v2.model_dump())], emb)
    idx = TenantIndex.load(root, "t")
    p = Principal(tenant="t", subject="u", groups=frozenset())
    s = SearchSettings(dense_floor=-1)

    def versions(day):
        r = search(idx, p, SearchRequest(query="refunds approval", top_k=5, valid_at=day), emb, s)
        return sorted({e.version for e in r.excerpts if e.doc_id == "rate"})

    assert versions(dt.date(2026, 2, 15)) == ["1"] and versions(dt.date(2026, 3, 15)) == ["2"]
    apply_local(root, "t", [ch("delete", "rate", 2)], emb)
    idx = TenantIndex.load(root, "t")
    assert versions(dt.date(2026, 2, 15)) == [] and versions(dt.date(2026, 3, 15)) == []
    assert not idx.document("rate", p)
