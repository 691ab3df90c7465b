"""The GPU dense leg fails closed: a FAISS build whose GPU index ignores ``IDSelector``
never serves filtered search. Exercised on CPU with an index that ignores its selector;
the real-GPU contract tests at the bottom run only where FAISS sees a GPU."""

from __future__ import annotations

import datetime as dt
import types

import faiss
import numpy as np
import pytest

from quarry.core.index.dense_gpu import GpuDense, choose_backend, gpu_count, selector_self_test
from quarry.core.embed.embedders import HashingEmbedder, passage_text_for_embedding
from quarry.core.index.build import build_tenant_index
from quarry.core.index.shards import TenantIndex
from quarry.core.ingest.pipeline import prepare
from quarry.core.records import Principal, SourceDocument
from quarry.core.search.retrieval import dense_leg

EMB = HashingEmbedder(dim=32)


class IgnoresSelector:
    """What a classic GPU FAISS index does: accepts ``params`` and searches everything."""

    def __init__(self, vecs: np.ndarray):
        self.inner = faiss.IndexFlatIP(vecs.shape[1])
        self.inner.add(vecs)

    def search(self, x, k, params=None):  # noqa: ARG002 - ignoring params is the point
        return self.inner.search(x, k)


def cpu_flat(vecs: np.ndarray):
    index = faiss.IndexFlatIP(vecs.shape[1])
    index.add(vecs)
    return index


def fake_gpu_faiss(index_cls=None):
    """A faiss namespace whose 'GPU' index is a CPU one: runs GpuDense's code on CPU."""
    def gpu_flat(_res, dim, _cfg):
        return index_cls(dim) if index_cls else faiss.IndexFlatIP(dim)

    ns = types.SimpleNamespace(**{k: getattr(faiss, k) for k in
                                  ("SearchParameters", "IDSelectorBitmap", "swig_ptr", "METRIC_INNER_PRODUCT")})
    ns.StandardGpuResources = object
    ns.GpuIndexFlatConfig = types.SimpleNamespace
    ns.GpuIndexFlatIP = gpu_flat
    ns.get_num_gpus = lambda: 1
    return ns


@pytest.mark.unit
def test_self_test_accepts_an_index_that_honours_the_selector():
    ok, why = selector_self_test(cpu_flat)
    assert ok, why


@pytest.mark.unit
def test_self_test_refuses_an_index_that_ignores_the_selector():
    ok, why = selector_self_test(IgnoresSelector)
    assert not ok
    assert "ignores IDSelector" in why


@pytest.mark.unit
def test_choose_backend_falls_back_to_cpu_and_says_why():
    choice = choose_backend("auto", make_gpu_index=IgnoresSelector)
    assert choice.device == "cpu" and choice.self_test is False
    assert "GPU refused for filtered search" in choice.reason
    assert choose_backend("gpu", make_gpu_index=cpu_flat).device == "gpu"


@pytest.mark.unit
def test_choose_backend_fails_closed_when_the_self_test_raises():
    def broken(_vecs):
        raise RuntimeError("no device memory")

    choice = choose_backend("gpu", make_gpu_index=broken)
    assert choice.device == "cpu" and "RuntimeError" in choice.reason


@pytest.mark.unit
def test_choose_backend_without_a_gpu():
    assert choose_backend("cpu").device == "cpu"
    if gpu_count() == 0:
        c = choose_backend("auto")
        assert c.device == "cpu" and c.self_test is None and "no GPU" in c.reason


def _index(tmp_path) -> TenantIndex:
    docs = [SourceDocument(doc_id=f"d{i}", tenant="t", title=f"doc {i}", format="text",
                           text=f"settlement cutoff refund batch number {i} " * 3,
                           acl=("g1",) if i % 2 else ("g2",), doc_type="policy" if i % 3 else "runbook",
                           effective_from=dt.date(2026, 1, 1) if i % 4 == 0 else None)
            for i in range(24)]
    passages, parents = prepare(docs)
    emb = EMB.encode([passage_text_for_embedding(p) for p in passages])
    build_tenant_index(str(tmp_path), "t", passages, parents, emb, n_shards=2, embedder_name=EMB.name)
    return TenantIndex.load(str(tmp_path), "t")


FILTERS = [({"g1"}, None, None), ({"g2"}, ("policy",), None), ({"g1", "g2"}, ("runbook",), dt.date(2025, 6, 1)),
           ({"g3"}, None, None)]


@pytest.mark.unit
@pytest.mark.parametrize("groups,doc_type,valid_at", FILTERS)
def test_gpu_code_path_returns_exactly_the_cpu_filtered_hits(tmp_path, groups, doc_type, valid_at):
    """GpuDense's search path (selector built per query, ids back) on a CPU stand-in
    gives the same rows and scores as the CPU leg, under every filter."""
    cpu = _index(tmp_path)
    gpu = TenantIndex.load(str(tmp_path), "t")
    for sh in gpu.shards:
        sh.attach_gpu(fake_gpu_faiss())
        assert isinstance(sh.gpu, GpuDense) and sh.gpu.kind == "gpu-flat"
    p = Principal(tenant="t", subject="u", groups=frozenset(groups))
    q = EMB.encode(["settlement cutoff batch"])[0]
    a = dense_leg(cpu, cpu.masks(p, doc_type, valid_at), q, 50, -1.0)
    b = dense_leg(gpu, gpu.masks(p, doc_type, valid_at), q, 50, -1.0)
    assert a.rows == b.rows
    assert np.allclose(a.scores, b.scores)
    if groups == {"g3"}:
        assert not b.rows


@pytest.mark.unit
def test_a_leaky_gpu_index_still_cannot_return_a_masked_row(tmp_path):
    """Defence in depth: even if an unproven index were attached, the shard's post-filter
    drops every row outside the mask (it may cost recall, never a leak)."""

    class Leaky(IgnoresSelector):
        def __init__(self, dim):
            self.inner = faiss.IndexFlatIP(dim)

        def add(self, vecs):
            self.inner.add(vecs)

    idx = _index(tmp_path)
    for sh in idx.shards:
        sh.attach_gpu(fake_gpu_faiss(Leaky))
    p = Principal(tenant="t", subject="u", groups=frozenset({"g1"}))
    masks = idx.masks(p, None, None)
    hits = dense_leg(idx, masks, EMB.encode(["refund"])[0], 50, -1.0)
    assert hits.rows
    for r in hits.rows:
        assert "g1" in idx.passage_at(r).envelope.acl


# -- real GPU: run only where FAISS sees a device (the H200 check script runs these) ----------

gpu = pytest.mark.skipif(gpu_count() == 0, reason="needs a GPU FAISS build and a visible GPU")


@pytest.mark.gpu
@gpu
def test_real_gpu_build_passes_the_self_test():
    choice = choose_backend("gpu")
    assert choice.device == "gpu" and choice.self_test, choice.reason


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("groups,doc_type,valid_at", FILTERS)
def test_real_gpu_filtered_search_matches_cpu(tmp_path, groups, doc_type, valid_at):
    cpu = _index(tmp_path)
    dev = TenantIndex.load(str(tmp_path), "t")
    for sh in dev.shards:
        sh.attach_gpu()
    p = Principal(tenant="t", subject="u", groups=frozenset(groups))
    q = EMB.encode(["settlement cutoff batch"])[0]
    a = dense_leg(cpu, cpu.masks(p, doc_type, valid_at), q, 50, -1.0)
    b = dense_leg(dev, dev.masks(p, doc_type, valid_at), q, 50, -1.0)
    assert set(b.rows) <= set(a.rows) | set()  # never a row outside the CPU-filtered set
    assert a.rows == b.rows
