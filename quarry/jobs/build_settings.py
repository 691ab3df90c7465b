"""What one ``quarry build`` needs, validated once at the edge: :class:`BuildSettings`, the
source and index-root checks made before Spark starts, the source fingerprint the manifest
records, and the shape of an injected publication gate (:data:`CaseGate`)."""

from __future__ import annotations

import datetime as dt
import hashlib
import os
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

from quarry.core.errors import UsageError
from quarry.core.index import layout
from quarry.core.index.manifest import CaseGateResult
from quarry.core.ingest.contextualize import LLMSettings

# A publication gate: (index root, tenant, built generation) -> its recorded decision.
CaseGate = Callable[[str, str, int], CaseGateResult]


class BuildSettings(BaseModel):
    """Everything one build needs, validated once at the edge."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    source: str = Field(description="JSONL/Parquet/Markdown file or folder (a path every executor can read)")
    index_root: str = Field(description="local path or fsspec URI (s3://bucket/prefix)")
    master: str | None = Field(default=None, description="Spark master; None = spark-submit's or local[*]")
    tenants: tuple[str, ...] | None = None
    shard_docs: int = Field(default=50_000, ge=1, description="documents per shard (n_shards = ceil(docs/this))")
    contextualizer: str = Field(default="extractive", pattern="^(extractive|llm|none)$")
    llm: LLMSettings | None = None  # when contextualizer == "llm"
    llm_api_key: SecretStr | None = None
    embedder: str = Field(default="default", description="'default' (packaged MiniLM), 'hashing[:dim]' or a model dir")
    batch_size: int = Field(default=64, ge=1)
    chunk_tokens: int = Field(default=200, ge=16, description="chunker max_tokens per passage")
    partitions: int | None = Field(default=None, ge=1, description="partitions for the wide stages; default 2x cores, raised to records / 20,000")
    approx_threshold: int | None = None
    publish: bool = True
    # The publish step holds each tenant's writer lease (quarry.core.index.lease), waiting up
    # to lease_wait_s for another writer, then keeps retain_generations published generations.
    lease_wait_s: float = Field(default=60.0, ge=0)
    retain_generations: int = Field(default=2, ge=1)
    report_path: str | None = None
    run_id: str | None = None
    quiet: bool = False

    @field_validator("tenants")
    @classmethod
    def _tenants(cls, v):
        if v is None:
            return None
        v = tuple(sorted({t.strip() for t in v if t.strip()}))
        return v or None


def source_watermark(files: list[str]) -> str:
    """A fingerprint of the input (paths, sizes, mtimes) recorded in the manifest."""
    h = hashlib.sha256()
    latest = 0.0
    for f in files:
        stat = os.stat(f)
        latest = max(latest, stat.st_mtime)
        h.update(f"{f}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    when = dt.datetime.fromtimestamp(latest, dt.timezone.utc).isoformat(timespec="seconds") if files else "none"
    return f"files={len(files)};latest_mtime={when};sha256={h.hexdigest()[:16]}"


def check_paths(s: BuildSettings) -> None:
    if "://" in s.source and not s.source.startswith("file://"):
        raise UsageError(f"--source {s.source}: the source must be a path every executor can read "
                         "(local disk, NFS, or a mounted bucket); object-store sources are not read directly")
    src = Path(s.source.removeprefix("file://"))
    if not src.exists():
        raise UsageError(f"--source {src}: no such file or directory")
    try:
        fs, path = layout.fs_and_path(s.index_root)
    except (ValueError, ImportError) as e:
        raise UsageError(f"--index-root {s.index_root}: cannot open ({e})") from e
    if layout.is_local(s.index_root):
        p = Path(path)
        if p.exists() and not p.is_dir():
            raise UsageError(f"--index-root {s.index_root}: exists and is not a directory")
        try:
            p.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise UsageError(f"--index-root {s.index_root}: cannot create ({e})") from e
        if not os.access(p, os.W_OK):
            raise UsageError(f"--index-root {s.index_root}: not writable")
