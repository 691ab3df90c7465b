"""Reranker interface (pure) and CrossEncoderReranker on a tiny random-weight model.

The tiny model has random weights: these tests check plumbing (loading, batching,
truncation, ordering, backend agreement), never ranking quality.
"""

from __future__ import annotations

import dataclasses
import math
import os
import shutil
import stat

import pytest

from quarry.core.rank.cross_encoder import CrossEncoderReranker, resolve_model_dir
from quarry.core.rank.rerank import Reranker, RerankInput, apply_rerank, rerank_text, token_units

# Pure tests are marked `unit`; tests that build or load a model are marked `slow`.


def cand(pid: str, text: str, title: str = "Doc", heading: tuple[str, ...] = ("Sec",)) -> RerankInput:
    return RerankInput(pid, title, heading, text)


# ----------------------------------------------------------------------------- pure


@pytest.mark.unit
def test_rerank_text_is_heading_trail_then_text():
    c = RerankInput("d@1#a", "Refund policy", ("Policy", "Exceptions"), "Refunds above $500 need approval.")
    assert rerank_text(c) == "Refund policy > Policy > Exceptions\nRefunds above $500 need approval."
    # A top heading restating the title is not repeated (the same trail the legs index).
    h1 = RerankInput("d@1#b", "Refund policy", ("Refund Policy", "Exceptions"), "Text.")
    assert rerank_text(h1) == "Refund policy > Exceptions\nText."
    assert rerank_text(RerankInput("x", "", (), "only text")) == "only text"


@pytest.mark.unit
def test_rerank_input_is_frozen():
    c = cand("a", "t")
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.text = "changed"  # type: ignore[misc]


@pytest.mark.unit
def test_apply_rerank_sorts_desc_and_ranks_from_one():
    out = apply_rerank([0.1, 0.9, 0.5], ["a", "b", "c"], top_k=3)
    assert out == [("b", 0.9, 1), ("c", 0.5, 2), ("a", 0.1, 3)]


@pytest.mark.unit
def test_apply_rerank_ties_keep_fused_order():
    ids = ["f1", "f2", "f3", "f4", "f5"]  # incoming = fused order
    out = apply_rerank([1.0, 2.0, 1.0, 2.0, 1.0], ids, top_k=5)
    assert [i for i, _, _ in out] == ["f2", "f4", "f1", "f3", "f5"]
    # all equal: the fused order stands
    assert [i for i, _, _ in apply_rerank([0.0] * 5, ids, top_k=5)] == ids


@pytest.mark.unit
def test_apply_rerank_top_k_truncates_and_tolerates_large_k():
    ids = ["a", "b", "c"]
    assert [r for _, _, r in apply_rerank([3, 2, 1], ids, top_k=2)] == [1, 2]
    assert len(apply_rerank([3, 2, 1], ids, top_k=10)) == 3
    assert apply_rerank([3, 2, 1], ids, top_k=0) == []
    assert apply_rerank([], [], top_k=4) == []


@pytest.mark.unit
def test_apply_rerank_handles_infinities():
    out = apply_rerank([-math.inf, 0.0, math.inf], ["a", "b", "c"], top_k=3)
    assert [i for i, _, _ in out] == ["c", "b", "a"]


@pytest.mark.parametrize(
    "scores,ids,k",
    [
        ([0.1, float("nan")], ["a", "b"], 2),  # NaN
        ([0.1], ["a", "b"], 1),  # length mismatch
        ([0.1, 0.2], ["a", "a"], 1),  # duplicate ids
        ([0.1], ["a"], -1),  # negative top_k
    ],
)
@pytest.mark.unit
def test_apply_rerank_rejects_bad_input(scores, ids, k):
    with pytest.raises(ValueError):
        apply_rerank(scores, ids, k)


@pytest.mark.unit
def test_nan_error_names_the_candidate():
    with pytest.raises(ValueError, match="NaN.*'b'"):
        apply_rerank([1.0, float("nan")], ["a", "b"], 1)


@pytest.mark.unit
def test_token_units_caps_each_candidate():
    short = cand("s", "one two three", title="", heading=())  # 3 units
    long = cand("l", " ".join(["w"] * 100), title="", heading=())  # 100 units
    assert token_units([short, long], max_length=10) == 3 + 10
    assert token_units([short, long], max_length=1000) == 103
    # punctuation counts; the heading trail "T > H" counts (3) as does the text (5)
    assert token_units([cand("p", "E-4471 failed.", title="T", heading=("H",))], 100) == 3 + 5
    assert token_units([], 256) == 0
    assert token_units(["a b c"], 2) == 2
    with pytest.raises(ValueError):
        token_units([short], 0)


@pytest.mark.unit
def test_constructor_is_cheap_and_validates():
    r = CrossEncoderReranker("/nonexistent/model", max_length=128, batch_size=4)  # no file is touched
    assert not r.loaded and r.name == "cross-encoder:model"
    assert isinstance(r, Reranker)
    for bad in ({"backend": "tf"}, {"max_length": 1}, {"batch_size": 0}):
        with pytest.raises(ValueError):
            CrossEncoderReranker("/m", **bad)


@pytest.mark.unit
@pytest.mark.timeout(60)  # a hang guard, not a timing assertion: a hub lookup would block
def test_hub_name_fails_fast_without_network():
    r = CrossEncoderReranker("cross-encoder/ms-marco-MiniLM-L-6-v2")
    with pytest.raises(ValueError, match="local path|no model-hub access"):
        r.load()
    with pytest.raises(ValueError, match="no model-hub access"):
        r.score("q", [cand("a", "x")])
    assert not r.loaded


@pytest.mark.unit
def test_local_dir_without_config_is_rejected(tmp_path):
    with pytest.raises(ValueError, match="config.json"):
        resolve_model_dir(str(tmp_path))


@pytest.mark.unit
def test_empty_candidates_do_not_load():
    r = CrossEncoderReranker("cross-encoder/not-a-path")
    assert r.score("q", []) == []
    assert not r.loaded


# ----------------------------------------------------------------------------- model


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    from quarry.eval.bench_crossencoder import build_random_cross_encoder

    # initializer_range 0.2 spreads the random logits, so ordering checks are not all ties.
    return build_random_cross_encoder(
        tmp_path_factory.mktemp("tiny-ce"), layers=2, hidden=64, heads=2, intermediate=128, seed=0, initializer_range=0.2
    )


@pytest.fixture(scope="session")
def torch_ranker(tiny_model_dir):
    return CrossEncoderReranker(str(tiny_model_dir), max_length=64, batch_size=32, backend="torch", device="cpu").load()


@pytest.fixture(scope="session")
def onnx_ranker(tiny_model_dir, tmp_path_factory):
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    # A copy, so the ONNX export (written beside the model) stays out of the torch fixture's dir.
    d = tmp_path_factory.mktemp("tiny-ce-onnx") / "model"
    shutil.copytree(tiny_model_dir, d)
    return CrossEncoderReranker(str(d), max_length=64, batch_size=32, backend="onnx", device="cpu").load()


QUERY = "refund approval threshold for enterprise customers"
CANDS = [
    cand("p1", "Refunds above 500 dollars need approval from finance.", title="Refund policy", heading=("Policy", "Refunds")),
    cand("p2", "The on-call engineer restarts the settlement worker.", title="Runbook", heading=("Ops",)),
    cand("p3", "Enterprise customers may request an exception in writing.", title="Refund policy"),
    cand("p4", "E-4471: reconcile_settlement failed after the acme-9 cutover.", title="Ticket"),
    cand("p5", "Latency budget is 200 ms at p95 for search calls.", title="SLO", heading=()),
]


@pytest.mark.slow
def test_loads_from_local_dir_and_scores(torch_ranker):
    s = torch_ranker.score(QUERY, CANDS)
    assert len(s) == len(CANDS) and all(isinstance(x, float) and math.isfinite(x) for x in s)
    assert torch_ranker.resolved_device == "cpu"
    assert len(set(round(x, 6) for x in s)) > 1  # not degenerate
    # deterministic
    assert torch_ranker.score(QUERY, CANDS) == pytest.approx(s, abs=1e-6)


@pytest.mark.slow
def test_loads_from_object_store_uri_via_fsspec(tiny_model_dir, torch_ranker, tmp_path):
    """A remote URI (fsspec's in-memory store stands in for s3://) is copied once into the
    cache by layout.fetch_dir; a file:// URI is a local directory, used in place."""
    import fsspec

    fs = fsspec.filesystem("memory")
    for f in tiny_model_dir.rglob("*"):
        if f.is_file():
            fs.pipe(f"/models/tiny/{f.relative_to(tiny_model_dir).as_posix()}", f.read_bytes())
    uri = "memory://models/tiny"
    cache = tmp_path / "cache"
    r = CrossEncoderReranker(uri, max_length=64, backend="torch", device="cpu", cache_dir=cache).load()
    assert r.model_dir is not None and r.model_dir.parent == cache.resolve()
    assert (r.model_dir / "config.json").is_file()
    assert r.score(QUERY, CANDS) == pytest.approx(torch_ranker.score(QUERY, CANDS), abs=1e-5)
    # a second resolve reuses the completed copy; no temporary copy is left behind
    assert resolve_model_dir(uri, cache) == r.model_dir
    assert [p.name for p in cache.iterdir()] == [r.model_dir.name]
    assert resolve_model_dir(tiny_model_dir.as_uri(), cache) == tiny_model_dir.resolve()
    fs.rm("/models/tiny", recursive=True)


@pytest.mark.unit
def test_missing_uri_directory_is_a_value_error(tmp_path):
    with pytest.raises(ValueError, match="not a directory"):
        resolve_model_dir((tmp_path / "absent").as_uri(), tmp_path / "cache")


@pytest.mark.slow
def test_batching_does_not_change_scores(tiny_model_dir, torch_ranker):
    small = CrossEncoderReranker(str(tiny_model_dir), max_length=64, batch_size=2, device="cpu")
    assert small.score(QUERY, CANDS) == pytest.approx(torch_ranker.score(QUERY, CANDS), abs=1e-5)


@pytest.mark.slow
def test_truncation(tiny_model_dir, torch_ranker):
    r = CrossEncoderReranker(str(tiny_model_dir), max_length=8, batch_size=2, device="cpu")
    long_text = "alpha beta gamma delta " * 2000  # far beyond 512 positions
    cands = CANDS + [cand("long", long_text)]
    s = r.score(QUERY, cands)
    assert len(s) == len(cands) and all(math.isfinite(x) for x in s)
    # max_length above the model's positions is clamped, not a crash
    r_big = CrossEncoderReranker(str(tiny_model_dir), max_length=4096, device="cpu")
    assert len(r_big.score(QUERY, [cand("long", long_text)])) == 1
    # two passages identical in their first tokens, differing only past the cut, score equal
    shared = "the refund threshold is set by finance and reviewed every quarter"
    a = RerankInput("a", "", (), shared + " apples apples apples")
    b = RerankInput("b", "", (), shared + " zebra quantum harbour")
    sa, sb = r.score("refund", [a, b])
    assert sa == pytest.approx(sb, abs=1e-6)
    # without truncation they differ (the test is not vacuous)
    fa, fb = torch_ranker.score("refund", [a, b])
    assert fa != pytest.approx(fb, abs=1e-6)


@pytest.mark.slow
def test_apply_rerank_orders_by_model_score(torch_ranker):
    s = torch_ranker.score(QUERY, CANDS)
    out = apply_rerank(s, [c.passage_id for c in CANDS], top_k=3)
    expected = sorted(range(len(CANDS)), key=lambda i: -s[i])[:3]
    assert [pid for pid, _, _ in out] == [CANDS[i].passage_id for i in expected]
    assert [sc for _, sc, _ in out] == sorted(s, reverse=True)[:3]


@pytest.mark.slow
def test_onnx_matches_torch(onnx_ranker, torch_ranker):
    assert onnx_ranker.onnx_path is not None and onnx_ranker.onnx_path.is_file()
    assert onnx_ranker.onnx_path == onnx_ranker.model_dir / "onnx" / "model.onnx"
    cands = CANDS + [cand("long", "alpha beta gamma " * 200)]  # exercises truncation + padding
    st = torch_ranker.score(QUERY, cands)
    so = onnx_ranker.score(QUERY, cands)
    assert so == pytest.approx(st, abs=1e-3)
    ids = [c.passage_id for c in cands]
    assert [i for i, _, _ in apply_rerank(so, ids, 6)] == [i for i, _, _ in apply_rerank(st, ids, 6)]
    # batch size does not matter for ONNX either
    onnx_ranker.batch_size = 2
    try:
        assert onnx_ranker.score(QUERY, cands) == pytest.approx(so, abs=1e-5)
    finally:
        onnx_ranker.batch_size = 32


@pytest.mark.slow
def test_onnx_export_is_cached_and_reused(onnx_ranker):
    path = onnx_ranker.onnx_path
    mtime = path.stat().st_mtime_ns
    again = CrossEncoderReranker(str(onnx_ranker.model_dir), max_length=64, backend="onnx", device="cpu").load()
    assert again.onnx_path == path and path.stat().st_mtime_ns == mtime


@pytest.mark.slow
def test_onnx_export_falls_back_to_cache_dir_when_model_dir_is_read_only(tiny_model_dir, tmp_path, monkeypatch):
    pytest.importorskip("onnxruntime")
    import quarry.core.embed.onnx_export as rr

    ro = tmp_path / "ro"
    shutil.copytree(tiny_model_dir, ro)
    real = rr._writable_dir
    # Simulate a read-only model directory (chmod is ignored when tests run as root).
    monkeypatch.setattr(rr, "_writable_dir", lambda d: False if ro in (d, *d.parents) else real(d))
    if os.geteuid() != 0:
        ro.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        r = CrossEncoderReranker(str(ro), max_length=32, backend="onnx", device="cpu", cache_dir=tmp_path / "c").load()
        assert r.onnx_path is not None and tmp_path / "c" in r.onnx_path.parents
        assert not (ro / "onnx").exists()
        assert len(r.score(QUERY, CANDS)) == len(CANDS)
    finally:
        ro.chmod(stat.S_IRWXU)


@pytest.mark.unit
def test_import_core_rerank_does_not_import_torch():
    import subprocess
    import sys

    code = "import sys, quarry.core.rank.rerank; bad=[m for m in ('torch','sentence_transformers','onnxruntime','transformers','ray','pyspark') if m in sys.modules]; print(bad); sys.exit(1 if bad else 0)"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr


@pytest.mark.slow
def test_loading_models_leaves_the_environment_alone(tiny_model_dir):
    """Core never sets the Hugging Face offline variables: the cross-encoder and the
    bi-encoder load offline by passing local_files_only to the libraries (run without the
    variables; libraries' own settings such as KMP_DUPLICATE_LIB_OK are not ours)."""
    import subprocess
    import sys

    code = (
        "import os, sys\n"
        "from quarry.core.rank.cross_encoder import CrossEncoderReranker\n"
        "from quarry.core.embed.embedders import SentenceTransformerEmbedder\n"
        "from quarry.core.rank.rerank import RerankInput\n"
        "before = dict(os.environ)\n"
        f"r = CrossEncoderReranker({str(tiny_model_dir)!r}, max_length=32, device='cpu')\n"
        "assert len(r.score('q', [RerankInput('p', 't', (), 'text')])) == 1\n"
        "assert SentenceTransformerEmbedder(device='cpu').encode(['a query']).shape[0] == 1\n"
        "changed = {k for k, _ in set(os.environ.items()) ^ set(before.items())}\n"
        "print(sorted(k for k in changed if k.startswith(('HF_', 'TRANSFORMERS_'))))\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.strip().splitlines()[-1] == "[]"
