"""ONNX Runtime query encoders for a sentence-transformers model, and the agreement check
that decides whether one may stand in for the torch encoder an index was built with.

The model is exported once (``quarry.core.embed.onnx_export.export_onnx``, head ``token_embeddings``)
into the model cache, optionally quantized to int8 (dynamic, per channel), and pooled and
normalised here exactly as sentence-transformers' Pooling + Normalize modules do. At load
the encoder embeds a fixed probe set and compares it with the torch encoder of the same
directory: below ``min_cosine`` on any probe it refuses to serve. onnxruntime, onnx,
transformers and torch load lazily, inside :meth:`OnnxEmbedder.load`.
"""

from __future__ import annotations

import json
import os
import re
import threading
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from quarry.core.embed.embedders import Embedder, local_model_dir, model_dim, model_name
from quarry.core.embed.onnx_export import export_onnx, onnx_cache_path

MIN_COSINE = 0.99
ONNX_ENCODERS = ("onnx", "onnx-int8")

# Fixed probes: short and long queries, identifiers, numbers, a claim, non-English text and
# one passage past the 256-token window (truncation must agree too).
PROBES: tuple[str, ...] = (
    "refund window",
    "hello",
    "What is the refund window for enterprise customers after the v2 policy?",
    "INC-2291 duplicate payouts root cause",
    "E-4471 reconcile_settlement acme-9",
    "Refunds above 2.5% need approval until the Acme cutover on 2026-01-15.",
    "0-dimensional biomaterials show inductive properties.",
    "ALDH1 expression is associated with poorer prognosis for breast cancer primary tumors.",
    "Vitamin D deficiency increases the risk of fractures in older adults",
    "Wie lange dauert eine Rückerstattung?",
    "who owns the settlement runbook?",
    " ".join(f"Section {i}: the settlement batch runs daily at 16:00 UTC and is reconciled by treasury." for i in range(40)),
)

# int8: weights of every MatMul quantized per output channel, except the feed-forward
# blocks (intermediate and output dense), whose activations carry the outliers that push
# a fully quantized MiniLM below the agreement threshold on short queries.
INT8_KEEP_FP32 = r"layer\.\d+/(intermediate|output)/dense/"


class EncoderDisagreement(ValueError):
    """A query encoder whose vectors are not the index's model's vectors."""


def agreement(candidate: Embedder, reference: Embedder, probes: Sequence[str] = PROBES) -> float:
    """Smallest cosine between the two encoders' vectors over ``probes``."""
    a, b = candidate.encode(list(probes)), reference.encode(list(probes))
    if a.shape != b.shape:
        return -1.0
    return float(np.min(np.sum(a * b, axis=1)))


def check_agreement(candidate: Embedder, reference: Embedder, min_cosine: float = MIN_COSINE,
                    probes: Sequence[str] = PROBES) -> float:
    """The minimum probe cosine; raises :class:`EncoderDisagreement` below ``min_cosine``."""
    got = agreement(candidate, reference, probes)
    if got < min_cosine:
        raise EncoderDisagreement(
            f"query encoder {getattr(candidate, 'encoder', '?')} of {candidate.name} disagrees with "
            f"{getattr(reference, 'encoder', '?')} of {reference.name}: minimum cosine {got:.4f} < {min_cosine} "
            f"on {len(probes)} fixed probes; its vectors would not match the index — use encoder 'torch' "
            "or rebuild the index with this encoder"
        )
    return got


def _pooling(path: Path) -> str:
    """``mean`` or ``cls``; anything else (extra Dense layers, max pooling) is refused."""
    modules = json.loads((path / "modules.json").read_text()) if (path / "modules.json").exists() else []
    kinds = [m.get("type", "").rsplit(".", 1)[-1] for m in modules]
    allowed = ("Transformer", "Pooling", "Normalize")
    if kinds and kinds[:2] != ["Transformer", "Pooling"] or any(k not in allowed for k in kinds):
        raise ValueError(f"{path}: ONNX encoding supports Transformer + Pooling (+ Normalize) models, got {kinds}")
    cfg_path = path / "1_Pooling" / "config.json"
    cfg = json.loads(cfg_path.read_text()) if cfg_path.exists() else {"pooling_mode_mean_tokens": True}
    modes = [k for k, v in cfg.items() if k.startswith("pooling_mode_") and v]
    if modes == ["pooling_mode_mean_tokens"]:
        return "mean"
    if modes == ["pooling_mode_cls_token"]:
        return "cls"
    raise ValueError(f"{path}: ONNX encoding supports mean or CLS pooling, got {modes}")


def _max_seq_length(path: Path) -> int | None:
    cfg = path / "sentence_bert_config.json"
    return json.loads(cfg.read_text()).get("max_seq_length") if cfg.exists() else None


def quantize_int8(src: Path, target: Path) -> Path:
    """Dynamic int8 weights (per channel) for every MatMul outside ``INT8_KEEP_FP32``; atomic."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    keep = [n.name for n in onnx.load(str(src), load_external_data=False).graph.node
            if n.op_type == "MatMul" and re.search(INT8_KEEP_FP32, n.name)]
    tmp = target.with_name(f".{target.name}.tmp-{uuid.uuid4().hex[:8]}")
    try:
        quantize_dynamic(str(src), str(tmp), weight_type=QuantType.QInt8, per_channel=True,
                         op_types_to_quantize=["MatMul"], nodes_to_exclude=keep)
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            tmp.unlink()
    return target


class OnnxEmbedder:
    """The same sentence-transformers model run by ONNX Runtime (``quantized``: int8).

    Cheap constructor (name and dim come from the directory); :meth:`load` exports once,
    opens the session and runs the agreement check against the torch encoder, raising
    :class:`EncoderDisagreement` when the vectors differ. ``agreement`` holds the measured
    minimum cosine afterwards. ``cache_dir``: where exports go (default: the model cache
    of ``quarry.core.embed.onnx_export``); never beside a model in site-packages.
    """

    def __init__(self, path: str | Path | None = None, quantized: bool = False, batch_size: int = 64,
                 cache_dir: str | os.PathLike | None = None, threads: int | None = None,
                 min_cosine: float = MIN_COSINE):
        self.path = local_model_dir(path)
        self.quantized = quantized
        self.encoder = "onnx-int8" if quantized else "onnx"
        self.name = model_name(self.path)  # same model as the torch encoder: same name
        self.dim = model_dim(self.path)
        self.batch_size = batch_size
        self.cache_dir = Path(cache_dir) if cache_dir is not None else None
        self.threads = threads
        self.min_cosine = min_cosine
        self.onnx_path: Path | None = None
        self.agreement: float | None = None
        self._lock = threading.Lock()
        self._sess: Any = None
        self._tok: Any = None
        self._inputs: list[str] = []
        self._pool = "mean"
        self._max_len: int | None = None

    def __repr__(self) -> str:
        return f"OnnxEmbedder({str(self.path)!r}, encoder={self.encoder!r})"

    def load(self) -> "OnnxEmbedder":
        """Export (once), open the session, check agreement with torch; idempotent, thread-safe."""
        with self._lock:
            if self._sess is not None:
                return self
            import onnxruntime as ort
            from transformers import AutoTokenizer

            self._pool = _pooling(self.path)
            self._max_len = _max_seq_length(self.path)
            tok = AutoTokenizer.from_pretrained(str(self.path), local_files_only=True)
            fp32 = onnx_cache_path(self.path, self.cache_dir, "encoder.onnx", beside=False)
            if not fp32.is_file():
                export_onnx(self.path, fp32, tok, head="token_embeddings")
            target = fp32
            if self.quantized:
                target = fp32.with_name("encoder-int8.onnx")
                if not target.is_file():
                    quantize_int8(fp32, target)
            opts = ort.SessionOptions()
            # No busy-waiting between runs: spinning threads starve whatever shares the cores
            # (torch in the same process, the other legs, other replicas).
            opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
            if self.threads:
                opts.intra_op_num_threads = self.threads
            sess = ort.InferenceSession(str(target), opts, providers=["CPUExecutionProvider"])
            self._tok, self._inputs, self.onnx_path = tok, [i.name for i in sess.get_inputs()], target
            self._sess = sess
        self._check()
        return self

    def _check(self) -> None:
        from quarry.core.embed.embedders import SentenceTransformerEmbedder

        ref = SentenceTransformerEmbedder(self.path, device="cpu")
        try:
            self.agreement = check_agreement(self, ref, self.min_cosine)
        except EncoderDisagreement:
            self._sess = None  # never serve a refused encoder, even if the caller ignores the error
            raise

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        if len(texts) == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        if self._sess is None:
            self.load()
        return self._encode(list(texts))

    def _encode(self, texts: list[str]) -> np.ndarray:
        # Longest first so each batch pads little; the order is restored at the end. int8
        # runs one text at a time: dynamic quantization scales activations per tensor, so
        # batch-mates (and their padding) would shift each other's vectors.
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        step = 1 if self.quantized else self.batch_size
        for start in range(0, len(order), step):
            idx = order[start : start + step]
            enc = self._tok([texts[i] for i in idx], padding=True, truncation=True, max_length=self._max_len,
                            return_tensors="np")
            feeds = {n: np.asarray(enc[n], dtype=np.int64) for n in self._inputs}
            hidden = self._sess.run(None, feeds)[0]
            if self._pool == "cls":
                vec = hidden[:, 0]
            else:
                mask = feeds["attention_mask"][..., None].astype(np.float32)
                vec = (hidden * mask).sum(axis=1) / np.clip(mask.sum(axis=1), 1e-9, None)
            norms = np.linalg.norm(vec, axis=1, keepdims=True)
            out[idx] = vec / np.clip(norms, 1e-12, None)
        return out
