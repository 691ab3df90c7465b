"""The embedder factory (one place, refuses a model the index was not built with), the ONNX
and int8 query encoders with their agreement check, and the query-vector cache."""

from __future__ import annotations

import numpy as np
import pytest

from quarry.cli import main
from quarry.core.embed.factory import (EmbedderMismatch, EmbedderSpec, build_embedder, check_embedder,
                                          embedder_for_index)
from quarry.core.embed.embedders import HashingEmbedder, SentenceTransformerEmbedder, embedder_id, encode_many
from quarry.core.index.manifest import Counts, EmbedderRecord, IndexManifest, read_manifest
from quarry.core.embed.onnx_encoders import PROBES, EncoderDisagreement, OnnxEmbedder, check_agreement
from quarry.core.records import Principal
from quarry.core.search.query_cache import QueryVectorCache

pytestmark = pytest.mark.unit


def manifest(embedder: dict, tenant: str = "?") -> IndexManifest:
    """A manifest that records only its tenant and embedder (what the factory reads)."""
    return IndexManifest(tenant=tenant, generation=1, shards=(), counts=Counts(passages=0, parents=0, documents=0),
                         embedder=EmbedderRecord(**embedder))


MINILM = manifest({"name": "st:all-MiniLM-L6-v2", "dim": 384, "encoder": "torch"}, "acme")
OTHER_TEXTS = ["settlement batch cutoff for EUR payouts", "who approves refunds above 2.5%?",
               "Section 4.2 of the master services agreement"]


# --------------------------------------------------------------------------- factory

def test_the_new_core_modules_import_light():
    import subprocess
    import sys

    code = ("import sys, quarry.core.embed.factory, quarry.core.embed.onnx_encoders, quarry.core.search.query_cache\n"
            "print(','.join(m for m in ('ray', 'pyspark', 'torch', 'transformers', 'onnxruntime') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_build_embedder_specs_without_loading_a_model():
    assert isinstance(build_embedder("hashing"), HashingEmbedder) and build_embedder("hashing").dim == 256
    assert build_embedder("hashing:64").dim == 64
    st = build_embedder("default")
    assert isinstance(st, SentenceTransformerEmbedder) and st._model is None  # cheap: nothing loaded
    assert (st.name, st.dim, st.encoder) == ("st:all-MiniLM-L6-v2", 384, "torch")
    onnx = build_embedder(None, encoder="onnx-int8")
    assert isinstance(onnx, OnnxEmbedder) and (onnx.name, onnx.dim, onnx.encoder) == (st.name, 384, "onnx-int8")
    with pytest.raises(ValueError, match="positive integer"):
        build_embedder("hashing:wide")
    with pytest.raises(ValueError, match="unknown encoder 'tensorrt'; choose one of torch, onnx, onnx-int8"):
        build_embedder("default", encoder="tensorrt")
    with pytest.raises(ValueError, match="never downloads"):
        build_embedder("sentence-transformers/all-mpnet-base-v2")


def test_embedder_for_index_follows_the_manifest():
    h = embedder_for_index(manifest({"name": "hashing-64", "dim": 64}))
    assert isinstance(h, HashingEmbedder) and h.dim == 64
    st = embedder_for_index(MINILM)
    assert isinstance(st, SentenceTransformerEmbedder) and st.name == "st:all-MiniLM-L6-v2"
    assert isinstance(embedder_for_index(MINILM, encoder="onnx"), OnnxEmbedder)
    legacy = manifest({"name": "st:all-MiniLM-L6-v2", "dim": 384})  # written before "encoder" existed
    assert EmbedderSpec.from_manifest(legacy).encoder == "torch"
    assert EmbedderSpec.from_manifest(manifest({"name": "hashing-64", "dim": 64})).encoder == "hashing"


def test_a_mismatched_model_is_refused_with_a_clear_message():
    with pytest.raises(EmbedderMismatch) as e:
        embedder_for_index(MINILM, "hashing")
    msg = str(e.value)
    assert "'acme' was built with st:all-MiniLM-L6-v2 (dim 384)" in msg and "hashing-256 (dim 256)" in msg
    assert "\n" not in msg and "rebuild the index" in msg
    with pytest.raises(EmbedderMismatch, match="hashing-64 \\(dim 64\\)"):
        embedder_for_index(manifest({"name": "hashing-64", "dim": 64}, "t"), "hashing:32")
    with pytest.raises(EmbedderMismatch, match="built with st:all-MiniLM-L6-v2 \\(dim 768\\)"):
        embedder_for_index(manifest({"name": "st:all-MiniLM-L6-v2", "dim": 768}))
    with pytest.raises(EmbedderMismatch, match="does not record its embedder"):
        embedder_for_index(manifest({"name": "unknown", "dim": 64}, "t"))
    assert check_embedder(MINILM, build_embedder("default")).dim == 384


def test_manifest_records_the_encoder_and_search_refuses_another_model(tmp_path, sample_docs, capsys):
    from quarry.core.ingest.pipeline import build_corpus

    root = str(tmp_path)
    gen = build_corpus([d for d in sample_docs if d.tenant == "acme"], root, HashingEmbedder(64))["acme"]
    assert read_manifest(root, "acme", gen).to_json()["embedder"] == {"name": "hashing-64", "dim": 64,
                                                                    "encoder": "hashing"}
    args = ["search", "--index-root", root, "--tenant", "acme", "--groups", "all-staff", "E-4471"]
    assert main(args) == 0 and "ticket-517@" in capsys.readouterr().out  # the index's own model
    assert main(args + ["--embedder", "hashing:256"]) == 2  # was silently ignored before
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "built with hashing-64 (dim 64)" in err[0] and "hashing-256" in err[0]


# --------------------------------------------------------------------------- ONNX encoders

@pytest.fixture(scope="module")
def onnx_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("onnx-cache")


@pytest.mark.parametrize("quantized", [False, True], ids=["onnx", "onnx-int8"])
def test_onnx_encoders_agree_with_torch(minilm, onnx_cache, quantized):
    enc = OnnxEmbedder(quantized=quantized, cache_dir=onnx_cache).load()
    assert enc.onnx_path is not None and enc.onnx_path.is_file() and str(onnx_cache) in str(enc.onnx_path)
    assert enc.agreement is not None and enc.agreement >= 0.99
    got, ref = enc.encode(OTHER_TEXTS), minilm.encode(OTHER_TEXTS)  # texts outside the probe set
    assert got.shape == ref.shape == (3, 384) and got.dtype == np.float32
    cos = np.sum(got * ref, axis=1)
    assert cos.min() >= (0.9999 if not quantized else 0.99)
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    # batch-mates do not change a vector (padding is masked out; int8 runs texts one by one)
    assert np.allclose(enc.encode([OTHER_TEXTS[0]])[0], got[0], atol=1e-5)


def test_a_disagreeing_encoder_is_refused(minilm, onnx_cache, tmp_path):
    with pytest.raises(EncoderDisagreement, match=f"minimum cosine .* < 0.99 on {len(PROBES)} fixed probes"):
        check_agreement(HashingEmbedder(384), minilm)
    # A stale export (here: another model's weights in the cache slot) is refused at load.
    from quarry.core.embed.onnx_export import export_onnx, onnx_cache_path
    from quarry.eval.bench_crossencoder import build_random_cross_encoder

    other = build_random_cross_encoder(tmp_path / "other", layers=1, hidden=384, heads=6, intermediate=64)
    cache = tmp_path / "cache"
    slot = onnx_cache_path(minilm.path, cache, "encoder.onnx", beside=False)
    export_onnx(other, slot, head="token_embeddings")
    enc = OnnxEmbedder(cache_dir=cache)
    with pytest.raises(EncoderDisagreement, match="disagrees with torch of st:all-MiniLM-L6-v2"):
        enc.load()
    with pytest.raises(EncoderDisagreement):  # still refused: a failed check never serves
        enc.encode(["refund window"])


# --------------------------------------------------------------------------- batching helper and cache

def test_encode_many_equals_one_encode_per_text():
    a, b = HashingEmbedder(32), HashingEmbedder(64)
    items = [(a, "refund window"), (b, "E-4471"), (a, "settlement cutoff"), (b, "refund window")]
    out = encode_many(items)
    for (emb, text), vec in zip(items, out):
        assert np.array_equal(vec, emb.encode([text])[0])


_P = Principal(tenant="acme", subject="a", groups=frozenset({"all-staff"}))


def test_query_cache_never_returns_across_models():
    cache = QueryVectorCache(capacity=8)
    small, big = HashingEmbedder(32), HashingEmbedder(64)
    v = small.encode(["refund window"])[0]
    cache.put(_P, embedder_id(small), "refund window", v)
    assert cache.get(_P, embedder_id(big), "refund window") is None
    # the same model under another encoder backend is another key as well
    assert embedder_id(build_embedder("default")) != embedder_id(build_embedder("default", encoder="onnx"))
    assert cache.get(_P, embedder_id(build_embedder("default", encoder="onnx")), "refund window") is None
    hit = cache.get(_P, embedder_id(small), "  refund\twindow ")  # normalised text: same key
    assert hit is not None and np.array_equal(hit, v) and not hit.flags.writeable
    assert cache.get(_P, embedder_id(small), "Refund window") is None  # case is kept
    st = cache.stats()
    assert (st.hits, st.misses, st.size) == (1, 3, 1) and st.hit_rate == pytest.approx(0.25)


def test_query_cache_is_a_bounded_lru():
    cache = QueryVectorCache(capacity=2)
    for q in ("a", "b"):
        cache.put(_P, "m", q, np.ones(4, np.float32))
    assert cache.get(_P, "m", "a") is not None  # "a" is now the most recent
    cache.put(_P, "m", "c", np.ones(4, np.float32))
    assert cache.get(_P, "m", "b") is None and cache.get(_P, "m", "a") is not None and cache.stats().size == 2
    off = QueryVectorCache(capacity=0)
    off.put(_P, "m", "a", np.ones(4, np.float32))
    assert off.get(_P, "m", "a") is None and off.stats().size == 0
    with pytest.raises(ValueError, match="capacity"):
        QueryVectorCache(capacity=-1)
