"""Statement vectors (core.evidence.vectors): written at build time beside evidence.jsonl,
loaded with the shard's facts, compared by a dot product in resolution and in the
evidence graph's lookup, masked like every read; a shard without them resolves as before."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pytest

from quarry.core.changes.delta import apply_local
from quarry.core.changes.log import Change
from quarry.core.embed.embedders import HashingEmbedder
from quarry.core.evidence.graph import EvidenceGraph, PassageFacts, graph_of, neighbours
from quarry.core.evidence.resolve import resolve
from quarry.core.evidence.statements import statements_batch
from quarry.core.evidence.vectors import VECTORS_FILE, clause_similarity, encode_facts
from quarry.core.index.shards import TenantIndex
from quarry.core.ingest.pipeline import build_corpus, prepare
from quarry.core.records import Principal, SourceDocument

pytestmark = pytest.mark.unit

D = dt.date
EMB = HashingEmbedder(dim=64)
STAFF = Principal(tenant="t", subject="u", groups=frozenset({"all-staff"}))
CREW = Principal(tenant="t", subject="u", groups=frozenset({"all-staff", "crew"}))
KAYAK = "Kayak rentals cost EUR 20 per hour."
CANOE = "Taking a kayak out on the lake is EUR 25 an hour."  # the lemma rule sees no one subject


def doc(doc_id: str, text: str, **kw) -> SourceDocument:
    base = dict(doc_id=doc_id, tenant="t", acl=("all-staff",), doc_type="page", text=text)
    base.update(kw)
    return SourceDocument(**base)


def test_vectors_are_written_loaded_and_absent_without_an_encoder(tmp_path):
    docs = [doc("boats", "# Boats\n\n" + KAYAK), doc("lake", "# Lake\n\n" + CANOE)]
    with_vec, without = str(tmp_path / "a"), str(tmp_path / "b")
    build_corpus(docs, with_vec, EMB)
    index = TenantIndex.load(with_vec, "t")
    sh = index.base_shards[0]
    m = np.load(sh.dir / VECTORS_FILE)
    assert m.dtype == np.float16 and m.shape == (sum(len(f.statements) for f in sh.facts()), 64)
    for f in sh.facts():
        assert f.vectors is not None and f.vectors.shape == (len(f.statements), 64)
        assert "vectors" not in f.to_json()
    # a shard built without an encoder has no file, and its facts carry no vectors
    from quarry.core.index.build import build_tenant_index

    ps, pa = prepare(docs)
    build_tenant_index(without, "t", ps, pa, EMB.encode([p.text for p in ps]), embedder_name=EMB.name)
    plain = TenantIndex.load(without, "t").base_shards[0]
    assert not (plain.dir / VECTORS_FILE).exists()
    assert all(f.vectors is None for f in plain.facts())
    assert clause_similarity(plain.facts()) is None
    # the same input gives the same bytes (the build's checksum equivalence)
    again = str(tmp_path / "c")
    build_corpus(docs, again, EMB)
    assert (TenantIndex.load(again, "t").base_shards[0].dir / VECTORS_FILE).read_bytes() == \
        (sh.dir / VECTORS_FILE).read_bytes()


def _facts_with(ps, vec_of):
    """PassageFacts of ``ps`` with hand-made vectors: ``vec_of(statement)`` per statement."""
    stated = statements_batch([p.text for p in ps], [p.envelope.entities for p in ps], tenant="t")
    out = {}
    for p, ss in zip(ps, stated):
        vs = np.array([vec_of(s) for s in ss], np.float32).reshape(len(ss), -1)
        out[p.passage_id] = PassageFacts(p.passage_id, tuple(ss), False, vs)
    return out


def test_a_paraphrased_conflict_is_found_only_through_vectors():
    ps, _ = prepare([doc("boats", "# Boats\n\n" + KAYAK, doc_type="policy"),
                     doc("lake", "# Lake\n\n" + CANOE, doc_type="policy")])
    principal = Principal(tenant="t", subject="u", groups=frozenset({"all-staff"}))
    plain = resolve(ps, principal, D(2026, 1, 1), query="kayak canoe hire cost per hour")
    assert not plain.unresolved  # the lemma rule alone sees two subjects
    near = _facts_with(ps, lambda s: [1.0, 0.0, 0.0])  # both clauses on one direction: one subject
    found = resolve(ps, principal, D(2026, 1, 1), query="kayak canoe hire cost per hour", facts=near)
    assert [set(u.passage_ids) for u in found.unresolved] == [{p.passage_id for p in ps}]
    far = {pid: f.with_vectors(np.eye(3, dtype=np.float32)[[i]]) for i, (pid, f) in enumerate(sorted(near.items()))}
    apart = resolve(ps, principal, D(2026, 1, 1), query="kayak canoe hire cost per hour", facts=far)
    assert not apart.unresolved  # orthogonal clauses: not one subject


def _graph(ps, facts):
    rows = {p.passage_id: k for k, p in enumerate(ps)}
    envelopes = {f"{p.doc_id}@{p.envelope.version}": p.envelope for p in ps}
    rows_of = {f"{p.doc_id}@{p.envelope.version}": [rows[p.passage_id]] for p in ps}
    return EvidenceGraph(envelopes, rows_of, {rows[pid]: f for pid, f in facts.items()},
                         lambda r: frozenset(), lambda r: ps[r])


def test_graph_looks_statements_up_by_vector():
    ps, _ = prepare([doc("boats", "# Boats\n\n" + KAYAK), doc("lake", "# Lake\n\n" + CANOE),
                     doc("cafe", "# Cafe\n\nA pot of tea is EUR 4 at the kiosk.")])
    cafe = next(p.passage_id for p in ps if p.doc_id == "cafe")
    facts = _facts_with(ps, lambda s: [0.0, 1.0, 0.0] if "tea" in s.clause.lower() else [1.0, 0.0, 0.0])
    g = _graph(ps, facts)
    boats = next(k for k, p in enumerate(ps) if p.doc_id == "boats")
    lake = next(k for k, p in enumerate(ps) if p.doc_id == "lake")
    assert [r for r, _ in g.nearest(boats, 0)] == [lake]  # the tea clause is orthogonal: not near
    assert (lake, "statement") in g.linked_rows(boats)
    assert cafe not in {ps[r].passage_id for r in g.neighbours_of(boats)}
    # without vectors the lemma rule finds no link between the two paraphrases
    bare = _graph(ps, {pid: PassageFacts(f.passage_id, f.statements) for pid, f in facts.items()})
    assert bare.nearest(boats, 0) == [] and (lake, "statement") not in bare.linked_rows(boats)


def test_a_neighbour_by_vector_the_principal_cannot_read_never_comes_back(tmp_path):
    r = str(tmp_path)
    build_corpus([doc("boats", "# Boats\n\n" + KAYAK), doc("lake", "# Lake\n\n" + CANOE, acl=("crew",))], r, EMB)
    index = TenantIndex.load(r, "t")
    g = graph_of(index)
    for f in g.facts.values():  # hand-made vectors: the two clauses are one direction
        assert f.vectors is not None
    one = np.zeros_like(g.matrix)
    one[:, 0] = 1.0
    g.matrix = one
    rows = sorted(g.facts)
    for row in rows:
        g.facts[row] = g.facts[row].with_vectors(one[: len(g.facts[row].statements)])
    g.similarity = clause_similarity(g.facts.values())
    boats = next(pid for pid in index._pid if pid.startswith("boats@"))
    lake = next(pid for pid in index._pid if pid.startswith("lake@"))
    assert lake in neighbours(index, CREW, D(2026, 1, 1), [boats])
    assert lake not in neighbours(index, STAFF, D(2026, 1, 1), [boats])


def test_a_delta_writes_vectors_and_reuses_the_previous_rows(tmp_path):
    r = str(tmp_path)
    build_corpus([doc("boats", "# Boats\n\n" + KAYAK)], r, EMB)
    at = dt.datetime(2026, 2, 1, 12)
    apply_local(r, "t", [Change(op="upsert", tenant="t", doc_id="lake", document=doc("lake", "# Lake\n\n" + CANOE),
                                at=at)], EMB)
    index = TenantIndex.load(r, "t")
    sh = index.delta.shard
    assert (sh.dir / VECTORS_FILE).exists()
    (f,) = [f for f in sh.facts() if f.statements]
    assert f.vectors is not None and f.vectors.shape == (len(f.statements), 64)
    expect = encode_facts([f], EMB.encode).astype(np.float32)
    assert np.allclose(f.vectors, expect)
    # a second delta carries the first delta's rows over with their stored vectors
    apply_local(r, "t", [Change(op="upsert", tenant="t", doc_id="cafe",
                                document=doc("cafe", "# Cafe\n\nA pot of tea is EUR 4 at the kiosk."),
                                at=at + dt.timedelta(hours=1))], EMB)
    sh2 = TenantIndex.load(r, "t").delta.shard
    by_id = {x.passage_id: x for x in sh2.facts()}
    assert np.allclose(by_id[f.passage_id].vectors, f.vectors)


def test_compaction_keeps_the_stored_vectors(tmp_path):
    from quarry.core.changes.compact import compact

    r = str(tmp_path)
    build_corpus([doc("boats", "# Boats\n\n" + KAYAK)], r, EMB)
    apply_local(r, "t", [Change(op="upsert", tenant="t", doc_id="lake", document=doc("lake", "# Lake\n\n" + CANOE),
                                at=dt.datetime(2026, 2, 1, 12))], EMB)
    before = {f.passage_id: f.vectors for sh in TenantIndex.load(r, "t").shards for f in sh.facts() if f.statements}
    assert compact(r, "t") is not None
    after = {f.passage_id: f.vectors for sh in TenantIndex.load(r, "t").shards for f in sh.facts() if f.statements}
    assert set(after) == set(before) and all(np.allclose(after[p], before[p]) for p in before)
