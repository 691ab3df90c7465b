"""Shard index: sharding invariance, layout and publish, approximate dense recall."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from quarry.core.index import layout
from quarry.core.embed.embedders import HashingEmbedder, passage_text_for_embedding
from quarry.core.index.build import build_tenant_index
from quarry.core.index.manifest import publish
from quarry.core.index.shards import TenantIndex
from quarry.core.ingest.pipeline import prepare
from quarry.core.records import Principal
from quarry.core.search.retrieval import dense_leg, lexical_leg

pytestmark = pytest.mark.unit
EMB = HashingEmbedder(dim=64)
QUERIES = ["settlement cutoff EUR", "E-4471", "refund policy days", "SSO security add-on",
           "reconcile_settlement failed", "payout batch migration", "cutover completed"]


@pytest.fixture(scope="module")
def acme(sample_docs):
    docs = [d for d in sample_docs if d.tenant == "acme"]
    passages, parents = prepare(docs)
    emb = EMB.encode([passage_text_for_embedding(p) for p in passages])
    return passages, parents, emb


def legs(idx, principal, q):
    masks = idx.masks(principal)
    lex = lexical_leg(idx, masks, q, 20, 0.0)
    den = dense_leg(idx, masks, EMB.encode([q])[0], 20, -1.0)
    pid = lambda r: idx.passage_at(r).passage_id  # noqa: E731
    return ([pid(r) for r in lex.rows], np.array(lex.scores)), ([pid(r) for r in den.rows], np.array(den.scores))


def test_sharding_invariance(tmp_path, acme):
    passages, parents, emb = acme
    principal = Principal(tenant="acme", subject="u", groups=frozenset({"all-staff", "support", "finance-admins"}))
    results = {}
    for n in (1, 2, 4):
        root = str(tmp_path / f"s{n}")
        build_tenant_index(root, "acme", passages, parents, emb, n_shards=n)
        idx = TenantIndex.load(root, "acme")
        assert len(idx.shards) == n and len(idx) == len(passages)
        results[n] = {q: legs(idx, principal, q) for q in QUERIES}
    for n in (2, 4):
        for q in QUERIES:
            (l1, ls1), (d1, ds1) = results[1][q]
            (ln, lsn), (dn, dsn) = results[n][q]
            assert l1 == ln, (n, q)
            np.testing.assert_allclose(ls1, lsn, atol=1e-5)
            assert d1 == dn, (n, q)
            np.testing.assert_allclose(ds1, dsn, atol=1e-5)


def test_layout_publish_and_crashed_generation(tmp_path, acme):
    passages, parents, emb = acme
    root = str(tmp_path)
    g1 = build_tenant_index(root, "acme", passages, parents, emb)
    assert layout.current_generation(root, "acme") == g1
    # A build that never wrote its manifest cannot be published and does not change CURRENT.
    g2 = build_tenant_index(root, "acme", passages, parents, emb, publish=False)
    (tmp_path / "acme" / f"gen-{g2}" / "manifest.json").unlink()
    with pytest.raises(FileNotFoundError):
        publish(root, "acme", g2)
    assert layout.current_generation(root, "acme") == g1
    # A shard file truncated after the build fails publish's presence-and-size check (the
    # content was verified by the task that wrote it; publish reads no shard byte).
    g3 = build_tenant_index(root, "acme", passages, parents, emb, publish=False)
    bad = tmp_path / "acme" / f"gen-{g3}" / "shard-0" / "passages.parquet"
    bad.write_bytes(bad.read_bytes()[:-10])
    with pytest.raises(RuntimeError, match="bytes, the shard task wrote"):
        publish(root, "acme", g3)
    assert layout.current_generation(root, "acme") == g1
    assert layout.next_generation(root, "acme") == g3 + 1  # crashed folders are never reused
    m = json.loads((tmp_path / "acme" / "manifest.json").read_text())
    assert m["generation"] == g1 and m["counts"]["passages"] == len(passages)
    assert TenantIndex.load(root, "acme").generation == g1


def test_a_shard_task_verifies_its_own_upload(acme, monkeypatch):
    """On an object-store root the writer re-reads what it uploaded and compares checksums: a
    copy corrupted on the way fails the shard task (Spark retries it), before any manifest
    names it. (A local root's shard is built beside its folder and renamed into place: the
    bytes hashed are the bytes in place.)"""
    import uuid

    passages, parents, emb = acme
    root = f"memory://verify-{uuid.uuid4().hex}"
    real = layout.upload_dir

    def corrupting(local_dir, uri):
        real(local_dir, uri)
        fs, path = layout.fs_and_path(uri)
        f = sorted(fs.find(path))[0]
        data = bytearray(fs.cat_file(f))
        data[0] ^= 1  # same size, different bytes
        fs.pipe_file(f, bytes(data))

    monkeypatch.setattr(layout, "upload_dir", corrupting)
    with pytest.raises(RuntimeError, match="checksum mismatch"):
        build_tenant_index(root, "acme", passages, parents, emb)
    assert layout.current_generation(root, "acme") is None


def test_a_local_shard_is_renamed_into_place_without_leftovers(tmp_path, acme):
    """A local shard is built in a hidden folder beside its destination and renamed: nothing
    is left beside the shards, the folder is readable by others (not mkdtemp's 0700), and
    the manifest's checksums are those of the files in place."""
    import os

    passages, parents, emb = acme
    build_tenant_index(str(tmp_path), "acme", passages, parents, emb)
    gen = Path(layout.generation_dir(str(tmp_path), "acme", 1))
    assert not [p.name for p in gen.iterdir() if p.name.startswith(".")]
    shard = gen / "shard-0"
    assert os.stat(shard).st_mode & 0o777 == 0o755
    from quarry.core.index.manifest import read_manifest

    m = read_manifest(str(tmp_path), "acme", 1)
    assert m.shards[0].checksums == layout.file_checksums(shard)


def test_approximate_dense_index_recall_is_measured(tmp_path):
    """HNSW above the size threshold: recall@10 against exact search, filters on."""
    from quarry.core.index.filters import FilterColumns  # noqa: F401  (mask path shared with flat)
    from quarry.core.records import Envelope, Passage

    rng = np.random.default_rng(0)
    n, dim = 3000, 32
    vecs = rng.standard_normal((n, dim)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    passages = [Passage(passage_id=f"d{i}@1#top.1", anchor="top.1", parent_id=f"d{i}@1#top", text=f"doc {i}",
                        chunker_version="t", token_count=2,
                        envelope=Envelope(doc_id=f"d{i}", version="1", tenant="t",
                                          acl=("g1",) if i % 2 else ("g2",)))
                for i in range(n)]
    for name, thr in (("flat", 10**9), ("hnsw", 1000)):
        build_tenant_index(str(tmp_path / name), "t", passages, [], vecs, approx_threshold=thr)
    flat, hnsw = TenantIndex.load(str(tmp_path / "flat"), "t"), TenantIndex.load(str(tmp_path / "hnsw"), "t")
    assert hnsw.shards[0].dense_kind.startswith("hnsw") and flat.shards[0].dense_kind == "flat"
    principal = Principal(tenant="t", subject="u", groups=frozenset({"g1"}))
    recalls = []
    for q in rng.standard_normal((50, dim)).astype(np.float32):
        q /= np.linalg.norm(q)
        exact = set(dense_leg(flat, flat.masks(principal), q, 10, -1.0).rows)
        approx = dense_leg(hnsw, hnsw.masks(principal), q, 10, -1.0)
        assert all(hnsw.passage_at(r).envelope.acl == ("g1",) for r in approx.rows)
        recalls.append(len(exact & set(approx.rows)) / 10)
    assert np.mean(recalls) >= 0.9, np.mean(recalls)
