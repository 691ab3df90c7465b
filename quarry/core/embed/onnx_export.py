"""One-time ONNX exports of local Hugging Face models, and where they are cached.

Both ONNX users share this: the cross-encoder reranker (``quarry.core.rank.cross_encoder``,
head ``logits``) and the ONNX bi-encoder (``quarry.core.embed.onnx_encoders``, head
``token_embeddings``). torch and transformers are imported inside :func:`export_onnx`
only, so importing this module stays light.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import uuid
from pathlib import Path
from typing import Any, Literal

__all__ = ["export_onnx", "model_cache_dir", "onnx_cache_path"]


def model_cache_dir() -> Path:
    """Where model copies and exports go when no ``cache_dir`` is configured."""
    return Path(tempfile.gettempdir()) / "quarry-rerank-cache"


def onnx_cache_path(model_dir: Path, cache_dir: Path | None, filename: str = "model.onnx",
                    beside: bool = True) -> Path:
    """Where a model's one-time ONNX export lives: ``<model_dir>/onnx/<filename>`` when that
    is writable (and ``beside``), else ``<cache_dir>/onnx/<hash of model_dir>/<filename>``."""
    near = model_dir / "onnx"
    if beside and ((near / filename).is_file() or _writable_dir(near)):
        return near / filename
    base = cache_dir if cache_dir is not None else model_cache_dir()
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


def export_onnx(model_dir: str | os.PathLike, target: str | os.PathLike, tokenizer: Any = None, opset: int = 17,
                head: Literal["logits", "token_embeddings"] = "logits") -> Path:
    """Export a HF model to ONNX with dynamic batch and sequence axes: a sequence-classification
    model's ``logits`` (cross-encoders) or an encoder's ``token_embeddings`` (the last hidden
    state a bi-encoder pools; see ``quarry.core.embed.onnx_encoders``).

    Uses torch's TorchScript-based exporter (``dynamo=False``: the dynamo exporter needs
    ``onnxscript``) on eager attention, traced with a padded two-pair batch so the mask
    path is kept. Writes atomically, so a crashed export is never loaded.
    """
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
