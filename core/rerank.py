"""Second-stage reranking (DESIGN §4 step 5).

A reranker scores (query, candidate) pairs; :func:`apply_rerank` turns scores into the
kept top-k. Candidates reach a reranker as :class:`RerankInput`, small frozen records
(id, title, heading path, chunk text) so a Serve payload never carries arrays.

:class:`CrossEncoderReranker` runs a sentence-transformers cross-encoder from a local
directory or an object-store URI (``s3://``, ``gs://``, ``file://`` ... via fsspec), with
a torch or an ONNX Runtime backend. It never contacts a model hub: a bare hub name is
rejected with a ``ValueError`` before anything is imported or fetched.

torch, transformers, sentence-transformers and onnxruntime are imported lazily, inside
the methods that need them, so ``import quarry.core`` stays light.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
import shutil
import tempfile
import threading
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

from quarry.core.text import count_tokens, heading_text

__all__ = [
    "RerankInput",
    "Reranker",
    "CrossEncoderReranker",
    "rerank_text",
    "apply_rerank",
    "token_units",
    "resolve_model_dir",
]


@dataclass(frozen=True)
class RerankInput:
    """One candidate as the second stage sees it: ids and text, never arrays."""

    passage_id: str
    title: str
    heading_path: tuple[str, ...]
    text: str


def rerank_text(c: RerankInput) -> str:
    """The passage side of a reranker pair: the heading trail (title + heading path, see
    :func:`quarry.core.text.heading_text`), a newline, the chunk (DESIGN §4.5), e.g.
    ``"Refund policy > Exceptions\\nRefunds above $500 need ..."``.
    """
    return "\n".join(p for p in (heading_text(c.title, c.heading_path), c.text.strip()) if p)


@runtime_checkable
class Reranker(Protocol):
    """A second-stage scorer of (query, candidate) pairs.

    Contract:

    - ``score(query, candidates)`` returns exactly one finite float per candidate, in the
      candidates' order. Higher means more relevant. Scores are only comparable within one
      call (one query); they are not probabilities and not calibrated across models.
    - ``score`` never reorders, drops or deduplicates candidates; ordering is the job of
      :func:`apply_rerank`, which every caller uses so the rules live in one place:

      1. sort by score, descending;
      2. ties (equal scores) keep the incoming order, i.e. the fused order of the first
         stage: the sort is stable, so of two equally scored candidates the one with the
         better fused rank comes first;
      3. keep the first ``top_k``; ranks are 1-based;
      4. a NaN score is an error (``ValueError``), never silently ranked first or last.

    - ``name`` identifies the scorer in traces and promotion-gate records.
    """

    name: str

    def score(self, query: str, candidates: Sequence[RerankInput]) -> list[float]: ...


def apply_rerank(scores: Sequence[float], ids: Sequence[str], top_k: int) -> list[tuple[str, float, int]]:
    """Order candidates by reranker score and keep ``top_k``.

    ``ids`` must be in the incoming (fused) order; ``scores[i]`` belongs to ``ids[i]``.
    Returns ``(id, score, rank)`` with 1-based ranks, best first. Sorting is by score
    descending and stable, so ties keep the fused order. Raises ``ValueError`` on a NaN
    score, mismatched lengths, duplicate ids or a negative ``top_k``.
    """
    if len(scores) != len(ids):
        raise ValueError(f"got {len(scores)} scores for {len(ids)} ids")
    if top_k < 0:
        raise ValueError(f"top_k must be >= 0, got {top_k}")
    if len(set(ids)) != len(ids):
        raise ValueError("candidate ids must be unique")
    vals = [float(s) for s in scores]
    bad = [ids[i] for i, v in enumerate(vals) if math.isnan(v)]
    if bad:
        raise ValueError(f"NaN reranker score for {len(bad)} candidate(s), e.g. {bad[0]!r}")
    order = sorted(range(len(vals)), key=lambda i: -vals[i])  # sorted() is stable
    return [(ids[i], vals[i], r) for r, i in enumerate(order[:top_k], start=1)]


def token_units(candidates: Sequence[RerankInput | str], max_length: int) -> int:
    """Reranker work for one call: the sum over candidates of ``min(tokens, max_length)``.

    Tokens are counted cheaply (:func:`quarry.core.text.count_tokens`) on the passage side
    of the pair (:func:`rerank_text`). This is the funnel economics unit of the seed:
    candidates x tokens per candidate. A subword tokenizer yields somewhat more tokens, so
    this slightly under-counts long passages' real tokens but never exceeds the cap.
    """
    if max_length < 1:
        raise ValueError(f"max_length must be >= 1, got {max_length}")
    total = 0
    for c in candidates:
        text = c if isinstance(c, str) else rerank_text(c)
        total += min(count_tokens(text), max_length)
    return total


# --------------------------------------------------------------------------- model sources

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_COMPLETE = ".quarry-complete"


def _default_cache_dir() -> Path:
    return Path(tempfile.gettempdir()) / "quarry-rerank-cache"


def resolve_model_dir(model: str, cache_dir: str | os.PathLike | None = None) -> Path:
    """A local directory holding the model: ``model`` itself, or a cached copy of a URI.

    - An existing local directory is used in place.
    - A URI with a scheme (``s3://``, ``gs://``, ``file://`` ...) is copied once with fsspec
      into ``cache_dir/<hash of the URI>`` (atomically: a crashed copy is never reused).
    - Anything else, such as a bare hub name ``cross-encoder/ms-marco-MiniLM-L-6-v2``,
      raises ``ValueError`` at once: Quarry has no model-hub access and never downloads.
    """
    if _SCHEME.match(model):
        return _copy_uri(model, Path(cache_dir) if cache_dir is not None else _default_cache_dir())
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


def _copy_uri(uri: str, cache_dir: Path) -> Path:
    import fsspec

    fs, path = fsspec.core.url_to_fs(uri)
    path = path.rstrip("/")
    target = cache_dir / hashlib.sha256(uri.rstrip("/").encode()).hexdigest()[:24]
    if (target / _COMPLETE).is_file():
        return target
    if not fs.isdir(path):
        raise ValueError(f"cross-encoder URI {uri!r} is not a directory")
    cache_dir.mkdir(parents=True, exist_ok=True)
    tmp = cache_dir / f".{target.name}.tmp-{uuid.uuid4().hex[:8]}"
    try:
        tmp.mkdir()
        for src in fs.find(path):  # every file below the prefix, keeping relative layout
            rel = src[len(path) :].lstrip("/")
            dst = tmp / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            fs.get_file(src, str(dst))
        if not (tmp / "config.json").is_file():
            raise ValueError(f"cross-encoder URI {uri!r} has no config.json; is it a saved model?")
        (tmp / _COMPLETE).write_text(uri)
        if target.exists():  # a stale, incomplete copy from a crash, or a concurrent winner
            if (target / _COMPLETE).is_file():
                return target
            shutil.rmtree(target, ignore_errors=True)
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def _set_offline() -> None:
    # Set (never read) before transformers is imported: belt and braces against hub calls.
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"


def onnx_cache_path(model_dir: Path, cache_dir: Path | None, filename: str = "model.onnx",
                    beside: bool = True) -> Path:
    """Where a model's one-time ONNX export lives: ``<model_dir>/onnx/<filename>`` when that
    is writable (and ``beside``), else ``<cache_dir>/onnx/<hash of model_dir>/<filename>``."""
    near = model_dir / "onnx"
    if beside and ((near / filename).is_file() or _writable_dir(near)):
        return near / filename
    base = cache_dir if cache_dir is not None else _default_cache_dir()
    alt = base / "onnx" / hashlib.sha256(str(model_dir).encode()).hexdigest()[:24]
    if (alt / filename).is_file() or _writable_dir(alt):
        return alt / filename
    where = f"neither {near} nor {alt} is" if beside else f"{alt} is not"
    raise ValueError(f"cannot cache the ONNX export: {where} writable; pass cache_dir")


def _writable_dir(d: Path) -> bool:
    try:
        d.mkdir(parents=True, exist_ok=True)
        probe = d / f".probe-{uuid.uuid4().hex[:8]}"
        probe.write_bytes(b"")
        probe.unlink()
        return True
    except OSError:
        return False


# --------------------------------------------------------------------------- cross-encoder


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
            _set_offline()
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


def export_onnx(model_dir: str | os.PathLike, target: str | os.PathLike, tokenizer: Any = None, opset: int = 17,
                head: Literal["logits", "token_embeddings"] = "logits") -> Path:
    """Export a HF model to ONNX with dynamic batch and sequence axes: a sequence-classification
    model's ``logits`` (cross-encoders) or an encoder's ``token_embeddings`` (the last hidden
    state a bi-encoder pools; see ``quarry.core.encoders``).

    Uses torch's TorchScript-based exporter (``dynamo=False``: the dynamo exporter needs
    ``onnxscript``) on eager attention, traced with a padded two-pair batch so the mask
    path is kept. Writes atomically, so a crashed export is never loaded.
    """
    _set_offline()
    import warnings

    import torch
    from transformers import AutoModel, AutoModelForSequenceClassification, AutoTokenizer

    model_dir = Path(model_dir)
    target = Path(target)
    tok = tokenizer or AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
    auto = AutoModelForSequenceClassification if head == "logits" else AutoModel
    hf = auto.from_pretrained(str(model_dir), local_files_only=True, attn_implementation="eager").eval()
    if head == "logits":
        sample = tok(["a short query", "q"], ["a passage of a few words", "p"], padding=True, return_tensors="pt")
    else:
        sample = tok(["a short query of a few words", "q"], padding=True, return_tensors="pt")
    names = [n for n in tok.model_input_names if n in sample]

    class _Head(torch.nn.Module):
        def __init__(self, m: torch.nn.Module) -> None:
            super().__init__()
            self.m = m

        def forward(self, *args: torch.Tensor) -> torch.Tensor:
            out = self.m(**dict(zip(names, args)))
            return out.logits if head == "logits" else out.last_hidden_state

    wrapper = _Head(hf).eval()
    axes = {n: {0: "batch", 1: "sequence"} for n in names}
    axes[head] = {0: "batch"} if head == "logits" else {0: "batch", 1: "sequence"}
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp-{uuid.uuid4().hex[:8]}")
    try:
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                wrapper,
                tuple(sample[n] for n in names),
                str(tmp),
                input_names=names,
                output_names=[head],
                dynamic_axes=axes,
                opset_version=opset,
                do_constant_folding=True,
                dynamo=False,
            )
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            tmp.unlink()
    return target
