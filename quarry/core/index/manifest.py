"""The index manifest: what a generation was built from and with, and what was decided about
it. One typed record, read, validated and written here and nowhere else.

    <root>/<tenant>/gen-<n>/manifest.json   written last, after every shard verified
    <root>/<tenant>/manifest.json           copy of the live generation's manifest

A manifest names its shards (with checksums), the tokenizer, BM25 and embedder parameters
the index was built with (checked before a query runs, ``quarry.core.embed.factory``), and
two decisions recorded after the build: the second-stage promotion gate
(``quarry.core.rank.gate``, field ``second_stage``) and the evidence-case publication gate
(``quarry.eval.case_gate``, field ``case_gate``). Decisions are replaced as whole records
(:func:`record_second_stage`, :func:`record_case_gate`), never edited in place.

The JSON on disk is the one every published index already has: fields a manifest does not
carry stay absent when it is written back (``exclude_unset``), and keys this model does not
know are kept as they are.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from quarry.core.index import layout

TOKENIZER_VERSION = "ident-stem-1"
BM25_K1 = 1.5
BM25_B = 0.75
MANIFEST = "manifest.json"


class _Record(BaseModel):
    """Frozen, and tolerant of keys written by other versions (they are kept on rewrite)."""

    model_config = ConfigDict(frozen=True, extra="allow")

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_unset=True)


class ShardInfo(_Record):
    """One built shard, as the manifest lists it."""

    shard: int
    passages: int
    parents: int
    documents: int
    dense_kind: str
    checksums: dict[str, str]
    # bytes per file, as written; with it, publish checks presence and size only (the shard
    # task verified the content it uploaded). Absent from manifests written before.
    sizes: dict[str, int] | None = None


class Counts(_Record):
    passages: int
    parents: int
    documents: int


class BM25Params(_Record):
    """The tenant-wide BM25 parameters and statistics the shards were scored with."""

    k1: float = BM25_K1
    b: float = BM25_B
    method: str = "lucene"
    n_docs: int = 0
    avgdl: float = 0.0


class EmbedderRecord(_Record):
    """The model that embedded the passages. ``encoder`` (torch, onnx, onnx-int8, hashing)
    is absent from manifests written before it was recorded."""

    name: str = "unknown"
    dim: int = 0
    encoder: str | None = None


class SecondStageDecision(_Record):
    """The promotion gate's decision for a second stage (``quarry.core.rank.gate``).

    ``generation`` is not stored: :func:`quarry.core.rank.gate.read_decision` sets it to
    the generation the decision was read from. The stored model's files and features are
    set only when a learned ranker was stored with the decision."""

    kind: str = "learned"  # "learned" or "cross-encoder"
    enabled: bool = False
    reason: str | None = None
    metrics: dict[str, Any] | None = None
    model_id: str | None = None
    decided_at: str | None = None  # None: nothing was recorded
    generation: int | None = None
    path: str | None = None
    files: dict[str, str] | None = None
    feature_names: list[str] | None = None
    sentence_features: bool | None = None
    report: dict[str, Any] | None = None

    SUMMARY_FIELDS: ClassVar[tuple[str, ...]] = ("kind", "enabled", "reason", "metrics", "model_id", "decided_at", "generation")

    def summary(self) -> dict[str, Any]:
        """The JSON-safe part served in stage info and traces (no file lists, no report)."""
        return {k: v for k, v in self.to_json().items() if k in self.SUMMARY_FIELDS}

    def refused(self, reason: str) -> "SecondStageDecision":
        """The same decision, not enabled, for ``reason`` (a model that failed to load)."""
        return self.model_copy(update={"enabled": False, "reason": reason})


class CaseGateMetrics(_Record):
    """One generation's evidence-case figures, as the case gate compares them."""

    isolation: str
    resolution_accuracy: float | None = None
    candidate_recall: float | None = None
    cases: int = 0
    answerable: int = 0
    false_assertion_rate: float | None = None
    leaks: list[Any] = Field(default_factory=list)


class CaseGateResult(_Record):
    """The evidence-case publication gate's decision for a built generation."""

    cases_dir: str
    cases: int
    generation: int
    live_generation: int | None
    decided_at: str
    publish: bool
    reason: str
    new: CaseGateMetrics | None = None
    live: CaseGateMetrics | None = None
    regressed: list[str] | None = None


class IndexManifest(_Record):
    """One tenant generation's manifest."""

    tenant: str
    generation: int
    shards: tuple[ShardInfo, ...]
    counts: Counts
    chunker_version: str = "unknown"
    tokenizer: str = TOKENIZER_VERSION
    bm25: BM25Params = Field(default_factory=BM25Params)
    embedder: EmbedderRecord = Field(default_factory=EmbedderRecord)
    source_watermark: str | None = None
    run_id: str | None = None
    contextualizer: str | None = None  # what the Spark build contextualized with
    # the LLM endpoint configuration it contextualized with (LLMSettings as JSON: url, model,
    # limits, prices, the *name* of the key's env var; never a key), so upserts can use it too
    contextualizer_llm: dict[str, Any] | None = None
    report: dict[str, Any] | None = None  # the build's per-tenant report
    compacted_from: dict[str, Any] | None = None
    second_stage: SecondStageDecision | None = None
    case_gate: CaseGateResult | None = None


def make_manifest(tenant: str, generation: int, infos: Sequence[ShardInfo], *, n_docs: int, avgdl: float,
                  embedder_name: str, dim: int, chunker_version: str, source_watermark: str | None,
                  encoder: str | None = None, **extra: Any) -> IndexManifest:
    """The manifest of a freshly built generation. ``extra``: the build's run id,
    contextualizer and report, or a compaction's origin (fields of :class:`IndexManifest`)."""
    return IndexManifest(
        tenant=tenant,
        generation=generation,
        shards=tuple(sorted(infos, key=lambda i: i.shard)),
        counts=Counts(passages=sum(i.passages for i in infos), parents=sum(i.parents for i in infos),
                      documents=sum(i.documents for i in infos)),
        chunker_version=chunker_version,
        tokenizer=TOKENIZER_VERSION,
        bm25=BM25Params(k1=BM25_K1, b=BM25_B, method="lucene", n_docs=n_docs, avgdl=avgdl),
        embedder=EmbedderRecord(name=embedder_name, dim=dim, **({"encoder": encoder} if encoder else {})),
        source_watermark=source_watermark,
        **extra,
    )


# --------------------------------------------------------------------------- on disk


def manifest_path(root: str, tenant: str, generation: int) -> str:
    return layout.join(layout.generation_dir(root, tenant, generation), MANIFEST)


def live_manifest_path(root: str, tenant: str) -> str:
    return layout.join(layout.tenant_dir(root, tenant), MANIFEST)


def read_manifest(root: str, tenant: str, generation: int) -> IndexManifest:
    """A generation's manifest; raises ``FileNotFoundError`` when its build never finished."""
    return IndexManifest.model_validate(layout.read_json(manifest_path(root, tenant, generation)))


def write_manifest(root: str, manifest: IndexManifest) -> None:
    """Write a generation's manifest (atomically)."""
    layout.write_json(manifest_path(root, manifest.tenant, manifest.generation), manifest.to_json())


def write_live_manifest(root: str, manifest: IndexManifest) -> None:
    """Write the tenant's copy of its live generation's manifest (on publish)."""
    layout.write_json(live_manifest_path(root, manifest.tenant), manifest.to_json())


def publish(root: str, tenant: str, generation: int) -> None:
    """Make ``generation`` live: only a complete, manifested generation can be published.
    Each shard task verified its own upload against the checksums it reported (the
    manifest holds them); here every shard file is checked present with the size written
    (object metadata, no shard byte read). A shard listed without sizes (a manifest from
    before they were recorded) is re-read and its checksums compared. Then the tenant's
    manifest copy is written and ``CURRENT`` replaced atomically."""
    manifest = read_manifest(root, tenant, generation)  # raises if the build never finished
    for s in manifest.shards:
        uri = layout.shard_dir(root, tenant, generation, s.shard)
        if s.sizes is not None and set(s.sizes) == set(s.checksums):
            layout.check_files(uri, s.sizes)
        else:
            layout.verify_files(uri, s.checksums)
    record_retired_delta(root, tenant, generation)
    write_live_manifest(root, manifest)
    layout.write_atomic(layout.join(layout.tenant_dir(root, tenant), "CURRENT"), f"gen-{generation}\n".encode())


def retired_path(root: str, tenant: str, generation: int) -> str:
    return layout.join(layout.tenant_dir(root, tenant), "retired", f"gen-{generation}.json")


def record_retired_delta(root: str, tenant: str, new_generation: int) -> None:
    """Before ``CURRENT`` leaves the live generation: write which delta it was served with
    (``<tenant>/retired/gen-<n>.json``, numbers only), so a rollback to it can restore that
    delta or refuse (``quarry.core.index.pointers``)."""
    live = layout.current_generation(root, tenant)
    parsed = layout.parse_watermark(layout.read_watermark(root, tenant))
    if live is None or live == new_generation or parsed is None or parsed[1] != live:
        return
    layout.write_json(retired_path(root, tenant, live), {"generation": live, "delta": parsed[0]})


def _record(root: str, tenant: str, generation: int, field: str, value: BaseModel, *, live_copy: bool) -> None:
    """Replace ``field`` in the generation's manifest and, when ``live_copy`` and that
    generation is live, in the tenant's copy. Each file is replaced atomically."""
    manifest = read_manifest(root, tenant, generation).model_copy(update={field: value})
    write_manifest(root, manifest)
    if live_copy and layout.current_generation(root, tenant) == generation:
        try:
            live = IndexManifest.model_validate(layout.read_json(live_manifest_path(root, tenant)))
        except FileNotFoundError:
            live = manifest
        if live.generation == generation:
            write_live_manifest(root, live.model_copy(update={field: value}))


def record_second_stage(root: str, tenant: str, generation: int, decision: SecondStageDecision) -> None:
    """Record a second-stage decision in the generation's manifest (and the live copy)."""
    _record(root, tenant, generation, "second_stage", decision, live_copy=True)


def record_case_gate(root: str, tenant: str, generation: int, result: CaseGateResult) -> None:
    """Record the case gate's decision in the (not yet published) generation's manifest;
    publishing copies it into the tenant's manifest."""
    _record(root, tenant, generation, "case_gate", result, live_copy=False)
