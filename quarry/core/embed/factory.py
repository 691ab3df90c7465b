"""The one place that builds embedders: for a build, from a spec string; for a query, from
the index's manifest, refusing a model whose name or dimension differs from the one the
index was built with (vectors of another model are silently wrong, never an error)."""

from __future__ import annotations

import os
from typing import Literal

from pydantic import BaseModel, ConfigDict

from quarry.core.errors import UsageError
from quarry.core.embed.embedders import Embedder, HashingEmbedder, SentenceTransformerEmbedder
from quarry.core.index.manifest import IndexManifest

Encoder = Literal["torch", "onnx", "onnx-int8"]
ENCODERS: tuple[str, ...] = ("torch", "onnx", "onnx-int8")


class EmbedderMismatch(UsageError):
    """The requested embedder is not the model the index was built with."""


class EmbedderSpec(BaseModel):
    """What a manifest records about the embedder that built an index."""

    model_config = ConfigDict(frozen=True)

    name: str
    dim: int
    encoder: str = "torch"  # manifests written before the field existed were torch builds

    @classmethod
    def of(cls, e: Embedder) -> "EmbedderSpec":
        return cls(name=e.name, dim=int(e.dim), encoder=getattr(e, "encoder", "torch"))

    @classmethod
    def from_manifest(cls, manifest: IndexManifest) -> "EmbedderSpec":
        raw = manifest.embedder
        name = raw.name or "unknown"
        enc = raw.encoder or ("hashing" if name.startswith("hashing") else "torch")
        return cls(name=name, dim=int(raw.dim or 0), encoder=enc)

    @property
    def hashing(self) -> bool:
        return self.name.startswith("hashing")


def build_embedder(spec: str | None = "default", *, encoder: str = "torch", batch_size: int = 64,
                   device: str | None = None, cache_dir: str | os.PathLike | None = None) -> Embedder:
    """``hashing`` / ``hashing:<dim>`` (deterministic, no model), ``default`` (the packaged
    all-MiniLM-L6-v2) or a local sentence-transformers model directory, run by ``encoder``
    (``torch``, ``onnx`` or ``onnx-int8``; ignored by hashing). Nothing loads here."""
    spec = spec or "default"
    if spec == "hashing" or spec.startswith("hashing:"):
        dim = spec.split(":", 1)[1] if ":" in spec else "256"
        if not dim.isdigit() or int(dim) < 1:
            raise UsageError(f"embedder {spec!r}: the hashing dimension must be a positive integer (hashing:256)")
        return HashingEmbedder(int(dim))
    path = None if spec == "default" else spec
    if encoder == "torch":
        return SentenceTransformerEmbedder(path, device=device, batch_size=batch_size)
    if encoder in ("onnx", "onnx-int8"):
        from quarry.core.embed.onnx_encoders import OnnxEmbedder

        return OnnxEmbedder(path, quantized=encoder == "onnx-int8", batch_size=batch_size, cache_dir=cache_dir)
    raise UsageError(f"unknown encoder {encoder!r}; choose one of {', '.join(ENCODERS)}")


def manifest_spec(manifest: IndexManifest) -> str:
    """The :func:`build_embedder` spec that reproduces the model an index records: its
    hashing dimension, else the packaged MiniLM (a model directory is not recorded)."""
    built = EmbedderSpec.from_manifest(manifest)
    return f"hashing:{built.dim}" if built.hashing else "default"


def embedder_for_index(manifest: IndexManifest, spec: str | None = None, *, encoder: str | None = None,
                       batch_size: int = 64, device: str | None = None,
                       cache_dir: str | os.PathLike | None = None) -> Embedder:
    """The query embedder for an index: ``spec`` (default: the manifest's own model) run by
    ``encoder`` (default: the encoder that built it). Raises :class:`EmbedderMismatch` when
    ``spec`` names another model or dimension. An ONNX encoder is checked against torch
    when it loads (``quarry.core.embed.onnx_encoders``)."""
    built = EmbedderSpec.from_manifest(manifest)
    tenant = manifest.tenant
    if spec is None and built.name == "unknown":
        raise EmbedderMismatch(f"index {tenant!r} does not record its embedder; pass the embedder it was built with")
    if spec is None:
        spec = manifest_spec(manifest)
    if encoder is None or built.hashing:
        encoder = "torch" if built.encoder == "hashing" else built.encoder
    emb = build_embedder(spec, encoder=encoder, batch_size=batch_size, device=device, cache_dir=cache_dir)
    return check_embedder(manifest, emb, spec)


def check_embedder(manifest: IndexManifest, emb: Embedder, spec: str | None = None) -> Embedder:
    """``emb`` if it is the model the index was built with; else :class:`EmbedderMismatch`."""
    built = EmbedderSpec.from_manifest(manifest)
    if (built.name != "unknown" and emb.name != built.name) or (built.dim and int(emb.dim) != built.dim):
        raise EmbedderMismatch(
            f"index {manifest.tenant!r} was built with {built.name} (dim {built.dim}) but the "
            f"embedder {spec or emb.name!r} is {emb.name} (dim {emb.dim}); query with the index's model "
            "or rebuild the index"
        )
    return emb
