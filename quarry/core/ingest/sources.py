"""Reading source records at the build boundary (DESIGN §7 steps 1-2).

Readers turn JSONL, Parquet and Markdown-with-front-matter into plain dicts; ``validate``
turns one dict into a frozen ``SourceDocument``. Every raw record carries ``_source``
(file and line/row) so a bad one can be reported in the quarantine output: a record is
never silently dropped (DESIGN §2).

A record that cannot even be parsed (a malformed JSON line, broken YAML front matter) is
still yielded, as ``{"_source": ..., "_error": (field, message)}``; ``validate`` turns it
into a ``pydantic.ValidationError`` whose location is that field ("json", "front_matter"),
so every caller quarantines it through the same ``validation_reason`` path.

Also here: loaders for BEIR datasets (corpus, queries, qrels) and ``SAMPLE_CORPUS``, the
shipped multi-tenant sample corpus.
"""

from __future__ import annotations

import csv
import importlib.resources
import json
import logging
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError
from pydantic_core import InitErrorDetails, PydanticCustomError

from quarry.core.errors import UsageError
from quarry.core.records import SourceDocument, validation_reason

log = logging.getLogger(__name__)

SOURCE_KEY = "_source"  # where a raw record came from: "path:line" or "path#row=n"
ERROR_KEY = "_error"  # set by a reader on a record it could not parse: (field, message)
_BOOKKEEPING = (SOURCE_KEY, ERROR_KEY)

SAMPLE_CORPUS: Path = Path(str(importlib.resources.files("quarry") / "sample_corpus"))

_SKIP_NAMES = {"readme.md"}  # corpus folders document themselves; a README is not a document


# --- YAML -----------------------------------------------------------------------------


class _FrontMatterLoader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 booleans.

    PyYAML follows YAML 1.1, where ``on``/``off``/``yes``/``no`` are booleans: the event key
    ``on:`` would become ``True`` and an entity or group named ``no`` would become ``False``.
    Only ``true``/``false`` are booleans here.
    """


_FrontMatterLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
for _first in "tTfF":
    _FrontMatterLoader.add_implicit_resolver(
        "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), [_first]
    )

_FENCE = re.compile(r"^---[ \t]*$")


def split_front_matter(text: str) -> tuple[str | None, str]:
    """Split ``---``-delimited front matter from a Markdown body.

    Returns ``(yaml_text, body)``; ``yaml_text`` is None when the file has no front matter,
    and also when the block is never closed (then the whole file is body, so the missing
    envelope fields surface as field-level validation errors).
    """
    text = text.lstrip("\ufeff")
    lines = text.splitlines(keepends=True)
    if not lines or not _FENCE.match(lines[0].rstrip("\r\n")):
        return None, text
    for i in range(1, len(lines)):
        if _FENCE.match(lines[i].rstrip("\r\n")):
            return "".join(lines[1:i]), "".join(lines[i + 1 :])
    return None, text


# --- readers --------------------------------------------------------------------------


def read_records(path: str | Path) -> Iterator[dict[str, Any]]:
    """Yield raw records from a JSONL file, a Parquet file, a Markdown file, or a folder
    holding any of them (recursively, in sorted order so builds are reproducible).

    Each record has ``_source``; unparseable ones also have ``_error`` (see module doc).
    """
    root = Path(path)
    if root.is_dir():
        for f in iter_source_files(root):
            yield from read_file(f, root)
        return
    if not root.is_file():
        raise FileNotFoundError(root)
    if _reader_for(root) is None:
        raise ValueError(f"{root}: unsupported source format (expected .jsonl, .parquet or .md)")
    yield from read_file(root, root.parent)


def iter_source_files(root: str | Path) -> list[Path]:
    """The source files under a folder, sorted so builds are reproducible. Hidden files and
    folders (.git, editor swap files) and README files are never corpus content."""
    root = Path(root)
    out = []
    for f in sorted(root.rglob("*")):
        rel = f.relative_to(root)
        if not f.is_file() or any(part.startswith(".") for part in rel.parts) or f.name.lower() in _SKIP_NAMES:
            continue
        if _reader_for(f) is None:
            log.debug("skipping %s: not a source format", f)
            continue
        out.append(f)
    return out


def list_source_files(source: str | Path) -> list[str]:
    """The files :func:`read_records` reads from ``source`` (a file or a folder), in its
    sorted order. A single file must be in a source format."""
    root = Path(source)
    if root.is_file():
        if not any(root.name.lower().endswith(x) for x in (".jsonl", ".ndjson", ".parquet", ".md", ".markdown")):
            raise UsageError(f"{root}: unsupported source format (expected .jsonl, .ndjson, .parquet or .md)")
        return [str(root)]
    return [str(f) for f in iter_source_files(root)]


def write_source_jsonl(docs: Iterable[SourceDocument], path: str | Path) -> Path:
    """Write source documents as a JSONL source (e.g. a BEIR corpus loaded with
    :func:`load_beir_corpus`, for the Spark build of ``quarry eval beir``)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    with p.open("w", encoding="utf-8") as fh:
        for d in docs:
            fh.write(d.model_dump_json(exclude_defaults=True) + "\n")
    return p


def read_file(f: str | Path, root: str | Path) -> Iterator[dict[str, Any]]:
    """Raw records of one source file; ``root`` anchors Markdown doc ids (relative paths)."""
    f = Path(f)
    reader = _reader_for(f)
    if reader is None:
        raise ValueError(f"{f}: unsupported source format (expected .jsonl, .parquet or .md)")
    yield from reader(f, Path(root))


def _reader_for(f: Path):
    suffix = f.suffix.lower()
    if suffix in (".jsonl", ".ndjson"):
        return _read_jsonl
    if suffix == ".parquet":
        return _read_parquet
    if suffix in (".md", ".markdown"):
        return _read_markdown
    return None


def _read_jsonl(f: Path, _root: Path) -> Iterator[dict[str, Any]]:
    with f.open("r", encoding="utf-8", errors="replace") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            src = f"{f}:{lineno}"
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                yield {SOURCE_KEY: src, ERROR_KEY: ("json", f"{e.msg} at column {e.colno}")}
                continue
            if not isinstance(obj, dict):
                yield {SOURCE_KEY: src, ERROR_KEY: ("json", f"expected an object, got {type(obj).__name__}")}
                continue
            obj[SOURCE_KEY] = src
            yield obj


def _read_parquet(f: Path, _root: Path) -> Iterator[dict[str, Any]]:
    import pyarrow.parquet as pq

    row = 0
    for batch in pq.ParquetFile(f).iter_batches(batch_size=4096):
        for rec in batch.to_pylist():
            # Columnar files store absent optional fields as nulls; dropping them lets the
            # record's defaults apply, while a null required field still fails as "missing".
            out = {k: v for k, v in rec.items() if v is not None}
            out[SOURCE_KEY] = f"{f}#row={row}"
            row += 1
            yield out


def _read_markdown(f: Path, root: Path) -> Iterator[dict[str, Any]]:
    src = f"{f}:1"
    text = f.read_text(encoding="utf-8", errors="replace")
    yaml_text, body = split_front_matter(text)
    meta: Any = {}
    if yaml_text is not None:
        try:
            meta = yaml.load(yaml_text, Loader=_FrontMatterLoader) or {}
        except yaml.YAMLError as e:
            yield {SOURCE_KEY: src, ERROR_KEY: ("front_matter", f"invalid YAML: {_one_line(str(e))}")}
            return
        if not isinstance(meta, dict):
            yield {SOURCE_KEY: src, ERROR_KEY: ("front_matter", "must be a mapping of envelope fields")}
            return
    rec: dict[str, Any] = {str(k): v for k, v in meta.items()}
    # YAML types `version: 3` as an int; that is a parsing artefact, not a bad record.
    for key in ("doc_id", "version"):
        if isinstance(rec.get(key), int) and not isinstance(rec.get(key), bool):
            rec[key] = str(rec[key])
    if "doc_id" not in rec:
        rel = f.relative_to(root) if f.is_relative_to(root) else Path(f.name)
        rec["doc_id"] = rel.with_suffix("").as_posix()
    rec.setdefault("format", "markdown")
    # Front matter cannot also supply the body: the file's body is the evidence.
    rec["text"] = body.strip("\n")
    rec[SOURCE_KEY] = src
    yield rec


def _one_line(s: str) -> str:
    return " ".join(s.split())


# --- validation and quarantine ----------------------------------------------------------


def validate(raw: dict[str, Any]) -> SourceDocument:
    """Validate one raw record; raises ``pydantic.ValidationError`` with field-level errors.

    Reader bookkeeping (``_source``) is dropped first. A record a reader could not parse
    raises too, located at the failing layer ("json" or "front_matter").
    """
    if ERROR_KEY in raw:
        field, message = raw[ERROR_KEY]
        raise ValidationError.from_exception_data(
            SourceDocument.__name__,
            [
                InitErrorDetails(
                    type=PydanticCustomError("unreadable", "{message}", {"message": message}),
                    loc=(field,),
                    input=raw.get(SOURCE_KEY),
                )
            ],
        )
    return SourceDocument.model_validate({k: v for k, v in raw.items() if k not in _BOOKKEEPING})


@dataclass(frozen=True)
class Quarantined:
    """A source record kept out of the build, with why. ``record_id`` is "doc_id@version"
    (or the bare doc_id) when the record had one, so an operator can find it upstream."""

    record_id: str | None
    source: str
    reason: str


def record_id(raw: dict[str, Any]) -> str | None:
    doc_id, version = raw.get("doc_id"), raw.get("version")
    if doc_id is None:
        return None
    return f"{doc_id}@{version}" if version is not None else str(doc_id)


def partition(raws: Iterable[dict[str, Any]]) -> tuple[list[SourceDocument], list[Quarantined]]:
    """Validate records; bad ones and repeated (tenant, doc_id, version) keys go to quarantine.

    The first occurrence of a key wins, so the outcome depends only on the reader's
    (sorted) order. Every input record lands in exactly one of the two lists.
    """
    docs: list[SourceDocument] = []
    bad: list[Quarantined] = []
    seen: set[tuple[str, str, str]] = set()
    for raw in raws:
        source = str(raw.get(SOURCE_KEY, "<unknown>"))
        try:
            doc = validate(raw)
        except ValidationError as e:
            bad.append(Quarantined(record_id(raw), source, validation_reason(e)))
            continue
        key = (doc.tenant, doc.doc_id, doc.version)
        if key in seen:
            bad.append(Quarantined(doc.key, source, "duplicate"))
            continue
        seen.add(key)
        docs.append(doc)
    return docs, bad


def load_documents(path: str | Path) -> tuple[list[SourceDocument], list[Quarantined]]:
    """Read and validate everything under ``path``: ``(documents, quarantined)``."""
    docs, bad = partition(read_records(path))
    if bad:
        log.warning("%s: %d record(s) quarantined, %d valid", path, len(bad), len(docs))
    return docs, bad


# --- BEIR -----------------------------------------------------------------------------


def load_beir_corpus(
    dataset_dir: str | Path,
    tenant: str,
    acl: Iterable[str] = ("*",),
    limit: int | None = None,
) -> list[SourceDocument]:
    """A BEIR ``corpus.jsonl`` as plain-text documents of one tenant.

    A row with a blank text falls back to its title (BEIR titles are part of the
    document); a row with neither is skipped and counted in a warning, because an empty
    document can never be evidence and would fail validation anyway.
    """
    acl = tuple(acl)
    docs: list[SourceDocument] = []
    skipped = 0
    with (Path(dataset_dir) / "corpus.jsonl").open("r", encoding="utf-8") as fh:
        for line in fh:
            if limit is not None and len(docs) >= limit:
                break
            if not line.strip():
                continue
            row = json.loads(line)
            title = (row.get("title") or "").strip()
            text = row.get("text") or ""
            if not text.strip():
                if not title:
                    skipped += 1
                    continue
                text = title
            docs.append(
                SourceDocument(
                    doc_id=str(row["_id"]),
                    version="1",
                    tenant=tenant,
                    title=title,
                    text=text,
                    format="text",
                    acl=acl,
                    doc_type="page",
                )
            )
    if skipped:
        log.warning("%s: skipped %d BEIR document(s) with blank title and text", dataset_dir, skipped)
    return docs


def load_beir_queries(dataset_dir: str | Path) -> dict[str, str]:
    """``queries.jsonl`` as {query_id: text}; holds every split's queries."""
    return read_queries(Path(dataset_dir) / "queries.jsonl")


def read_queries(path: str | Path) -> dict[str, str]:
    """A BEIR-style queries JSONL (``{"_id", "text"}`` per line) as {query_id: text}."""
    out: dict[str, str] = {}
    with Path(path).open("r", encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                row = json.loads(line)
                out[str(row["_id"])] = row["text"]
    return out


def load_qrels(dataset_dir: str | Path, split: str) -> dict[str, dict[str, int]]:
    """``qrels/{split}.tsv`` of a BEIR dataset as {qid: {doc_id: grade}}."""
    return read_qrels(Path(dataset_dir) / "qrels" / f"{split}.tsv")


def read_qrels(path: str | Path) -> dict[str, dict[str, int]]:
    """A qrels TSV (header ``query-id corpus-id score``) as {qid: {doc_id: grade}}."""
    out: dict[str, dict[str, int]] = {}
    # newline="" lets csv handle the CRLF line endings some BEIR copies carry.
    with Path(path).open("r", encoding="utf-8", newline="") as fh:
        reader = csv.reader(fh, delimiter="\t")
        header = next(reader, None)
        if header is None or [h.strip() for h in header[:3]] != ["query-id", "corpus-id", "score"]:
            raise ValueError(f"{fh.name}: expected header 'query-id corpus-id score', got {header!r}")
        for row in reader:
            if not row or not "".join(row).strip():
                continue
            qid, did, score = (c.strip() for c in row[:3])
            out.setdefault(qid, {})[did] = int(score)
    return out
