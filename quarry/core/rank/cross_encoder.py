"""The cross-encoder second stage: :class:`CrossEncoderReranker` runs a
sentence-transformers cross-encoder over (query, :func:`quarry.core.rank.rerank.rerank_text`)
pairs, from a local directory or an object-store URI (``s3://``, ``gs://`` ... via
``quarry.core.index.layout.fetch_dir``), with a torch or an ONNX Runtime backend. It never
contacts a model hub: a bare hub name is rejected with a ``ValueError`` before anything is
imported or fetched, and every library call passes ``local_files_only=True``.

torch, transformers, sentence-transformers and onnxruntime are imported lazily, inside
the methods that need them, so ``import quarry.core`` stays light.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from quarry.core.index import layout
from quarry.core.embed.onnx_export import export_onnx, model_cache_dir, onnx_cache_path
from quarry.core.rank.rerank import RerankInput, rerank_text

__all__ = ["CrossEncoderReranker", "resolve_model_dir"]

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def resolve_model_dir(model: str, cache_dir: str | os.PathLike | None = None) -> Path:
    """A local directory holding the model: ``model`` itself, or a cached copy of a URI.

    - An existing local directory (or ``file://`` URI) is used in place.
    - Another URI (``s3://``, ``gs://`` ...) is copied once into ``cache_dir`` by
      ``layout.fetch_dir`` (atomically: a crashed copy is never reused).
    - Anything else, such as a bare hub name ``cross-encoder/ms-marco-MiniLM-L-6-v2``,
      raises ``ValueError`` at once: Quarry has no model-hub access and never downloads.
    """
    if _SCHEME.match(model):
        try:
            d = layout.fetch_dir(model, Path(cache_dir) if cache_dir is not None else model_cache_dir())
        except FileNotFoundError:
            raise ValueError(f"cross-encoder URI {model!r} is not a directory") from None
        if not d.is_dir():
            raise ValueError(f"cross-encoder URI {model!r} is not a directory")
        if not (d / "config.json").is_file():
            raise ValueError(f"cross-encoder URI {model!r} has no config.json; is it a saved model?")
        return d.resolve()
    p = Path(model).expanduser()
    if p.is_dir():
        if not (p / "config.json").is_file():
            raise ValueError(f"cross-encoder directory {str(p)!r} has no config.json; is it a saved model?")
        return p.resolve()
    if p.exists():
        raise ValueError(f"cross-encoder model {model!r} is a file; expected a model directory")
    raise ValueError(
        f"cross-encoder model {model!r} is neither an existing local directory nor an object-store "
        "URI (s3://..., gs://..., file://...). Quarry has no model-hub access and never downloads "
        "models: copy the model to a local path or bucket and configure that path or URI."
    )


class CrossEncoderReranker:
    """A cross-encoder over (query, :func:`rerank_text`) pairs.

    Scores are the model's raw logit (``num_labels`` must be 1), without a sigmoid, so
    strongly relevant candidates do not tie at 1.0. The constructor is cheap; the model is
    loaded on the first :meth:`score` or an explicit :meth:`load`.

    ``model``: a local model directory or an object-store URI (see :func:`resolve_model_dir`).
    ``max_length``: pair truncation in subword tokens (``longest_first``: the passage side
    is cut first). ``batch_size``: pairs per forward pass. ``backend``: ``"torch"``
    (sentence-transformers ``CrossEncoder``) or ``"onnx"`` (ONNX Runtime over a one-time
    export cached at ``<model_dir>/onnx/model.onnx``, or under ``cache_dir`` when the model
    directory is read-only). ``device``: ``None`` picks CUDA when available, else CPU.
    ``cache_dir``: where URI copies and read-only models' ONNX exports go.
    """

    def __init__(
        self,
        model: str,
        max_length: int = 256,
        batch_size: int = 32,
        backend: Literal["torch", "onnx"] = "torch",
        device: str | None = None,
        cache_dir: str | os.PathLike | None = None,
    ) -> None:
        if backend not in ("torch", "onnx"):
            raise ValueError(f"backend must be 'torch' or 'onnx', got {backend!r}")
        if max_length < 2:
            raise ValueError(f"max_length must be >= 2, got {max_length}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.model = str(model)
        self.max_length = int(max_length)
        self.batch_size = int(batch_size)
        self.backend = backend
        self.device = device
        self.cache_dir = Path(cache_dir) if cache_dir is not None else None
        self.name = "cross-encoder:" + (self.model.rstrip("/").rsplit("/", 1)[-1] or self.model)
        self.model_dir: Path | None = None
        self.onnx_path: Path | None = None
        self.resolved_device: str | None = None
        self._lock = threading.Lock()
        self._ce: Any = None  # sentence_transformers.CrossEncoder
        self._tok: Any = None  # transformers tokenizer (onnx backend)
        self._sess: Any = None  # onnxruntime.InferenceSession
        self._input_names: list[str] = []
        self._max_positions: int | None = None

    def __repr__(self) -> str:
        return (
            f"CrossEncoderReranker(model={self.model!r}, max_length={self.max_length}, "
            f"batch_size={self.batch_size}, backend={self.backend!r}, device={self.device!r})"
        )

    @property
    def loaded(self) -> bool:
        return self._ce is not None or self._sess is not None

    # ------------------------------------------------------------------ loading
    def load(self) -> "CrossEncoderReranker":
        """Resolve the model source and load it; idempotent and thread-safe."""
        with self._lock:
            if self.loaded:
                return self
            model_dir = resolve_model_dir(self.model, self.cache_dir)  # fails fast on hub names
            if self.backend == "torch":
                self._load_torch(model_dir)
            else:
                self._load_onnx(model_dir)
            self.model_dir = model_dir
        return self

    def _load_torch(self, model_dir: Path) -> None:
        import torch
        from sentence_transformers import CrossEncoder

        device = self.device or ("cuda" if torch.cuda.is_available() else "cpu")
        ce = CrossEncoder(str(model_dir), device=device, local_files_only=True, backend="torch")
        if ce.num_labels != 1:
            raise ValueError(f"a reranker needs a single-logit cross-encoder; {self.model!r} has {ce.num_labels} labels")
        self._max_positions = getattr(ce.config, "max_position_embeddings", None)
        self._ce = ce
        self.resolved_device = device

    def _load_onnx(self, model_dir: Path) -> None:
        import onnxruntime as ort
        from transformers import AutoConfig, AutoTokenizer

        config = AutoConfig.from_pretrained(str(model_dir), local_files_only=True)
        if getattr(config, "num_labels", 1) != 1:
            raise ValueError(f"a reranker needs a single-logit cross-encoder; {self.model!r} has {config.num_labels} labels")
        tok = AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
        target = onnx_cache_path(model_dir, self.cache_dir)
        if not target.is_file():
            export_onnx(model_dir, target, tok)
        available = ort.get_available_providers()
        if self.device is None:
            use_cuda = "CUDAExecutionProvider" in available
        elif self.device.startswith("cuda"):
            if "CUDAExecutionProvider" not in available:
                raise ValueError(f"device={self.device!r} but onnxruntime has no CUDAExecutionProvider ({available})")
            use_cuda = True
        else:
            use_cuda = False
        providers = ["CUDAExecutionProvider", "CPUExecutionProvider"] if use_cuda else ["CPUExecutionProvider"]
        sess = ort.InferenceSession(str(target), providers=providers)
        self._input_names = [i.name for i in sess.get_inputs()]
        self._max_positions = getattr(config, "max_position_embeddings", None)
        self._tok = tok
        self._sess = sess
        self.onnx_path = target
        self.resolved_device = "cuda" if use_cuda else "cpu"

    # ------------------------------------------------------------------ scoring
    def _effective_max_length(self) -> int:
        m = self.max_length
        if self._max_positions:
            m = min(m, int(self._max_positions))
        return m

    def score(self, query: str, candidates: Sequence[RerankInput]) -> list[float]:
        """Raw logits, one per candidate, in order; batched and truncated to ``max_length``."""
        return self.score_many([(query, candidates)])[0]

    def score_many(self, items: Sequence[tuple[str, Sequence[RerankInput]]]) -> list[list[float]]:
        """``score`` for several queries at once: all their pairs share model batches, so
        concurrent searches (Serve's ``@serve.batch``) fill the accelerator together."""
        pairs = [(q, rerank_text(c)) for q, cands in items for c in cands]
        if not pairs:
            return [[] for _ in items]
        self.load()
        flat = self._score_torch(pairs) if self.backend == "torch" else self._score_onnx(pairs)
        if len(flat) != len(pairs):  # pragma: no cover - a model bug, not an input error
            raise RuntimeError(f"reranker returned {len(flat)} scores for {len(pairs)} pairs")
        out, i = [], 0
        for _, cands in items:
            out.append(flat[i : i + len(cands)])
            i += len(cands)
        return out

    def _score_torch(self, pairs: list[tuple[str, str]]) -> list[float]:
        import torch

        ce = self._ce
        ce.max_seq_length = self._effective_max_length()
        scores = ce.predict(
            pairs,
            batch_size=self.batch_size,
            activation_fn=torch.nn.Identity(),
            show_progress_bar=False,
            convert_to_numpy=True,
        )
        return [float(s) for s in scores.reshape(len(pairs))]

    def _score_onnx(self, pairs: list[tuple[str, str]]) -> list[float]:
        import numpy as np

        max_len = self._effective_max_length()
        # Longest first, like CrossEncoder.predict, so batches pad little; restore order after.
        order = sorted(range(len(pairs)), key=lambda i: -len(pairs[i][0]) - len(pairs[i][1]))
        out = np.empty(len(pairs), dtype=np.float64)
        for start in range(0, len(order), self.batch_size):
            idx = order[start : start + self.batch_size]
            enc = self._tok(
                [pairs[i][0] for i in idx],
                [pairs[i][1] for i in idx],
                padding=True,
                truncation="longest_first",
                max_length=max_len,
                return_tensors="np",
            )
            feeds = {n: np.asarray(enc[n], dtype=np.int64) for n in self._input_names}
            logits = self._sess.run(None, feeds)[0]
            out[idx] = logits.reshape(len(idx), -1)[:, 0]
        return [float(s) for s in out]
