"""The GPU dense leg, and the proof that it enforces the filter (DESIGN §8).

Classic GPU FAISS indexes accept a ``SearchParameters.sel`` and silently ignore it
(faiss issues #3924, #3114): every filtered query would compare, and could return, rows
the principal may not see. FAISS's cuVS builds (>= 1.14.2, the ``faiss-gpu-cuvs`` wheels)
pass Bitmap, Array and Range selectors to the device as a bitset. Which build is installed
is not something to assume, so the backend *proves* it at load: a search whose selector
excludes the true nearest neighbour must not return it. An index that fails the proof never
serves a filtered query on the GPU; the dense leg stays on CPU and the reason is reported
(``/healthz``, the log).

The shard's own post-filter (``Shard.dense_search`` drops any id outside the mask) stays
on either path: a leaky index could then cost recall, never a leak.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

log = logging.getLogger("quarry.dense")

# Above this many rows a shard uses an approximate GPU index (CAGRA) instead of exact flat.
GPU_APPROX_THRESHOLD = 1_000_000

DenseDevice = Literal["cpu", "gpu", "auto"]


@dataclass(frozen=True)
class BackendChoice:
    """Which device serves the dense leg, and why (reported verbatim to operators)."""

    device: Literal["cpu", "gpu"]
    reason: str
    self_test: bool | None = None  # None: not run (no GPU or not asked for)

    def to_json(self) -> dict[str, Any]:
        return {"device": self.device, "reason": self.reason, "selector_self_test": self.self_test}


def _bitmap_selector(faiss, mask: np.ndarray):
    bits = np.packbits(mask.astype(np.uint8), bitorder="little")
    return faiss.IDSelectorBitmap(len(mask), faiss.swig_ptr(bits)), bits  # keep ``bits`` alive


def selector_self_test(make_index: Callable[[np.ndarray], Any], faiss_module=None, dim: int = 16) -> tuple[bool, str]:
    """True when an index built by ``make_index(vectors)`` honours an ``IDSelectorBitmap``.

    Eight unit vectors; the query is vector 0 itself, so an index that ignores the selector
    returns row 0 first. The selector excludes rows 0 and 1; a correct index returns only
    rows from 2..7. Any exception counts as failure (fail closed)."""
    faiss = faiss_module or __import__("faiss")
    rng = np.random.default_rng(7)
    vecs = rng.standard_normal((8, dim)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    mask = np.ones(8, dtype=bool)
    mask[[0, 1]] = False
    try:
        index = make_index(vecs)
        sel, bits = _bitmap_selector(faiss, mask)
        _, ids = index.search(vecs[:1], 4, params=faiss.SearchParameters(sel=sel))
        del bits
    except Exception as e:  # noqa: BLE001 - any failure means "do not trust this build"
        return False, f"selector self-test raised {type(e).__name__}: {e}"
    got = [int(i) for i in ids[0] if i >= 0]
    if not got:
        return False, "selector self-test returned nothing"
    leaked = [i for i in got if not mask[i]]
    if leaked:
        return False, f"index returned rows {leaked} that the selector excluded (the build ignores IDSelector)"
    return True, "selector honoured"


def gpu_count(faiss_module=None) -> int:
    faiss = faiss_module or __import__("faiss")
    fn = getattr(faiss, "get_num_gpus", None)
    try:
        return int(fn()) if fn else 0
    except Exception:  # noqa: BLE001
        return 0


def _gpu_flat_factory(faiss, device: int = 0):
    res = faiss.StandardGpuResources()

    def make(vecs: np.ndarray):
        cfg = faiss.GpuIndexFlatConfig()
        cfg.device = device
        index = faiss.GpuIndexFlatIP(res, vecs.shape[1], cfg)
        index.add(np.ascontiguousarray(vecs, dtype=np.float32))
        return index

    return make, res


def choose_backend(
    want: DenseDevice,
    faiss_module=None,
    make_gpu_index: Callable[[np.ndarray], Any] | None = None,
) -> BackendChoice:
    """Decide the dense leg's device once per process. ``make_gpu_index`` overrides how the
    self-test's GPU index is built (tests pass an index that ignores its selector)."""
    if want == "cpu":
        return BackendChoice("cpu", "configured: dense_device=cpu")
    faiss = faiss_module or __import__("faiss")
    if make_gpu_index is None:
        if gpu_count(faiss) == 0 or not hasattr(faiss, "GpuIndexFlatIP"):
            return BackendChoice("cpu", "no GPU visible to FAISS (CPU build or no device)")
        make_gpu_index, _res = _gpu_flat_factory(faiss)
    ok, why = selector_self_test(make_gpu_index, faiss)
    if not ok:
        log.error("GPU FAISS refused for filtered search: %s; the dense leg stays on CPU", why)
        return BackendChoice("cpu", f"GPU refused for filtered search: {why}; serving the dense leg on CPU",
                             self_test=False)
    return BackendChoice("gpu", "GPU FAISS passed the selector self-test", self_test=True)


class GpuDense:
    """One shard's vectors on the GPU: exact ``GpuIndexFlatIP`` below ``approx_threshold``
    rows, CAGRA above it. Only built after ``choose_backend`` returned ``gpu``."""

    def __init__(self, embeddings: np.ndarray, faiss_module=None, device: int = 0,
                 approx_threshold: int = GPU_APPROX_THRESHOLD, resources=None):
        faiss = self.faiss = faiss_module or __import__("faiss")
        self.res = resources or faiss.StandardGpuResources()
        vecs = np.ascontiguousarray(embeddings, dtype=np.float32)
        n, dim = vecs.shape
        if n > approx_threshold and hasattr(faiss, "GpuIndexCagra"):
            cfg = faiss.GpuIndexCagraConfig()
            cfg.device = device
            self.index = faiss.GpuIndexCagra(self.res, dim, faiss.METRIC_INNER_PRODUCT, cfg)
            self.kind = "gpu-cagra"
        else:
            cfg = faiss.GpuIndexFlatConfig()
            cfg.device = device
            self.index = faiss.GpuIndexFlatIP(self.res, dim, cfg)
            self.kind = "gpu-flat"
        if n:
            self.index.add(vecs) if self.kind == "gpu-flat" else self.index.train(vecs)
        self.n = n

    def search(self, qvec: np.ndarray, mask: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        sel, bits = _bitmap_selector(self.faiss, mask)
        params = self.faiss.SearchParameters(sel=sel)
        dist, ids = self.index.search(np.ascontiguousarray(qvec.reshape(1, -1), dtype=np.float32), k, params=params)
        del bits
        return dist[0], ids[0]
