"""Source readers, validation and quarantine (DESIGN §2, §7 steps 1-2), and the BEIR loaders."""

from __future__ import annotations

import datetime as dt
import json
import logging
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pydantic import ValidationError

from quarry.core.ingest.sources import (
    Quarantined,
    load_beir_corpus,
    load_beir_queries,
    load_documents,
    load_qrels,
    read_records,
    split_front_matter,
    validate,
)

pytestmark = pytest.mark.unit

SCIFACT = Path(__file__).parents[3] / "shared" / "data" / "beir" / "scifact"


def _rec(**kw) -> dict:
    base = {"doc_id": "d1", "version": "1", "tenant": "acme", "title": "T", "text": "Some evidence.", "acl": ["all-staff"]}
    base.update(kw)
    return base


def _write_jsonl(path: Path, lines: list) -> Path:
    path.write_text("\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines) + "\n")
    return path


# --- JSONL ----------------------------------------------------------------------------


def test_jsonl_records_carry_source_and_validate(tmp_path):
    f = _write_jsonl(tmp_path / "docs.jsonl", [_rec(), _rec(doc_id="d2", published_at="2026-01-03")])
    raws = list(read_records(f))
    assert [r["_source"] for r in raws] == [f"{f}:1", f"{f}:2"]
    docs = [validate(r) for r in raws]
    assert docs[1].published_at == dt.date(2026, 1, 3)
    assert docs[0].acl == ("all-staff",)


def test_malformed_json_line_is_quarantined_not_dropped(tmp_path):
    f = _write_jsonl(tmp_path / "docs.jsonl", [_rec(), '{"doc_id": "d2", "tenant": ', "[1, 2]", _rec(doc_id="d3")])
    docs, bad = load_documents(f)
    assert [d.doc_id for d in docs] == ["d1", "d3"]
    assert len(bad) == 2
    assert all(q.reason.startswith("json: ") for q in bad)
    assert bad[0].source == f"{f}:2" and bad[0].record_id is None
    assert "expected an object" in bad[1].reason


def test_quarantine_reasons_are_field_level(tmp_path):
    f = _write_jsonl(
        tmp_path / "docs.jsonl",
        [
            _rec(doc_id="bad-tenant", tenant="Acme Corp"),
            _rec(doc_id="no-acl", acl=[]),
            _rec(doc_id="blank", text="   "),
            _rec(doc_id="bad@id"),
            _rec(doc_id="dates", effective_from="2026-02-01", effective_to="2026-01-01"),
            _rec(doc_id="extra", colour="red"),
        ],
    )
    docs, bad = load_documents(f)
    assert docs == []
    reasons = {q.record_id: q.reason for q in bad}
    assert reasons["bad-tenant@1"].startswith("tenant:")
    assert reasons["no-acl@1"].startswith("acl:")
    assert reasons["blank@1"].startswith("text:") and "blank" in reasons["blank@1"]
    assert reasons["bad@id@1"].startswith("doc_id:")
    assert "effective_to" in reasons["dates@1"]
    assert reasons["extra@1"].startswith("colour:")


def test_duplicates_are_quarantined_and_first_wins(tmp_path):
    f = _write_jsonl(
        tmp_path / "docs.jsonl",
        [_rec(text="first"), _rec(text="second"), _rec(version="2"), _rec(tenant="globex")],
    )
    docs, bad = load_documents(f)
    assert [(d.tenant, d.version, d.text) for d in docs] == [("acme", "1", "first"), ("acme", "2", "Some evidence."), ("globex", "1", "Some evidence.")]
    assert bad == [Quarantined("d1@1", f"{f}:2", "duplicate")]


def test_every_input_record_is_accounted_for(tmp_path):
    lines = [_rec(doc_id=f"d{i}") for i in range(5)] + ["not json", _rec(doc_id="d0"), _rec(doc_id="x", acl=[])]
    f = _write_jsonl(tmp_path / "docs.jsonl", lines)
    n_in = len(list(read_records(f)))
    docs, bad = load_documents(f)
    assert n_in == len(lines) == len(docs) + len(bad)
    assert (len(docs), len(bad)) == (5, 3)


def test_validate_strips_source_but_not_unknown_keys():
    doc = validate({**_rec(), "_source": "x.jsonl:1"})
    assert doc.doc_id == "d1"
    with pytest.raises(ValidationError):
        validate({**_rec(), "_other": 1})


# --- Parquet --------------------------------------------------------------------------


def test_parquet_rows_with_nulls(tmp_path):
    table = pa.Table.from_pylist(
        [
            _rec(published_at=dt.date(2026, 1, 15), condition=None, entities=["acme"]),
            _rec(doc_id="d2", published_at=None, condition="until cutover", entities=[]),
            _rec(doc_id="d3", text=None, published_at=None, condition=None, entities=[]),
        ]
    )
    f = tmp_path / "docs.parquet"
    pq.write_table(table, f)
    raws = list(read_records(f))
    assert [r["_source"] for r in raws] == [f"{f}#row={i}" for i in range(3)]
    docs, bad = load_documents(f)
    assert [d.doc_id for d in docs] == ["d1", "d2"]
    assert docs[0].published_at == dt.date(2026, 1, 15) and docs[0].entities == ("acme",)
    assert docs[1].condition == "until cutover"
    # a null required field is reported as missing, at its field
    assert len(bad) == 1 and bad[0].reason.startswith("text:")


# --- Markdown -------------------------------------------------------------------------

MD = """---
doc_id: settlement-runbook
version: 2
tenant: acme
title: Settlement runbook
doc_type: runbook
acl: [all-staff]
entities: [acme, no]
published_at: 2025-10-12
events:
  - what: acme cutover completed
    on: 2026-01-15
---
# Settlement runbook

The EUR cutoff is 16:00 CET.
"""


def test_markdown_front_matter_and_body(tmp_path):
    (tmp_path / "acme").mkdir()
    (tmp_path / "acme" / "runbook.md").write_text(MD)
    [doc] = [validate(r) for r in read_records(tmp_path)]
    assert doc.key == "settlement-runbook@2"  # YAML int version coerced to str
    assert doc.format == "markdown" and doc.doc_type == "runbook"
    assert doc.published_at == dt.date(2025, 10, 12)
    # YAML 1.1 would read `on:` as True and `no` as False; the loader keeps them strings
    assert doc.events[0].on == dt.date(2026, 1, 15)
    assert doc.entities == ("acme", "no")
    assert doc.text.startswith("# Settlement runbook") and "---" not in doc.text


def test_markdown_doc_id_defaults_to_relative_path_and_readme_skipped(tmp_path):
    (tmp_path / "acme" / "help").mkdir(parents=True)
    (tmp_path / "acme" / "help" / "payouts.md").write_text("---\ntenant: acme\nacl: ['*']\n---\nPayouts arrive next day.\n")
    (tmp_path / "README.md").write_text("# not a document\n")
    (tmp_path / "acme" / "notes.txt").write_text("ignored")
    (tmp_path / ".hidden").mkdir()
    (tmp_path / ".hidden" / "x.md").write_text("---\ntenant: acme\n---\nhidden\n")
    docs, bad = load_documents(tmp_path)
    assert bad == []
    assert [d.doc_id for d in docs] == ["acme/help/payouts"]


def test_markdown_broken_or_missing_front_matter_is_quarantined(tmp_path):
    (tmp_path / "broken.md").write_text("---\ntenant: [acme\n---\nbody\n")
    (tmp_path / "list.md").write_text("---\n- a\n- b\n---\nbody\n")
    (tmp_path / "none.md").write_text("Just a body without front matter.\n")
    docs, bad = load_documents(tmp_path)
    assert docs == []
    reasons = {Path(q.source.rsplit(":", 1)[0]).name: q.reason for q in bad}
    assert reasons["broken.md"].startswith("front_matter: invalid YAML")
    assert reasons["list.md"].startswith("front_matter:")
    assert "tenant" in reasons["none.md"] and "acl" in reasons["none.md"]


def test_split_front_matter():
    assert split_front_matter("---\na: 1\n---\nbody\n") == ("a: 1\n", "body\n")
    assert split_front_matter("no front matter") == (None, "no front matter")
    assert split_front_matter("---\nnever closed\n") == (None, "---\nnever closed\n")


def test_folder_of_mixed_formats(tmp_path):
    _write_jsonl(tmp_path / "a.jsonl", [_rec(doc_id="j1")])
    pq.write_table(pa.Table.from_pylist([_rec(doc_id="p1")]), tmp_path / "b.parquet")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "c.md").write_text("---\ndoc_id: m1\ntenant: acme\nacl: [all-staff]\n---\nText.\n")
    docs, bad = load_documents(tmp_path)
    assert bad == [] and [d.doc_id for d in docs] == ["j1", "p1", "m1"]


def test_unsupported_file_and_missing_path(tmp_path):
    (tmp_path / "x.csv").write_text("a,b\n")
    with pytest.raises(ValueError, match="unsupported"):
        list(read_records(tmp_path / "x.csv"))
    with pytest.raises(FileNotFoundError):
        list(read_records(tmp_path / "missing.jsonl"))


# --- BEIR -----------------------------------------------------------------------------


def test_beir_loader_blank_text_falls_back_to_title_and_blank_rows_are_counted(tmp_path, caplog):
    _write_jsonl(
        tmp_path / "corpus.jsonl",
        [
            {"_id": "1", "title": "A title", "text": "Body."},
            {"_id": "2", "title": "Only a title", "text": ""},
            {"_id": "3", "title": " ", "text": "  "},
        ],
    )
    with caplog.at_level(logging.WARNING, logger="quarry.core.ingest.sources"):
        docs = load_beir_corpus(tmp_path, "bench", acl=("readers",))
    assert [d.doc_id for d in docs] == ["1", "2"]
    assert docs[1].text == "Only a title"
    assert {(d.tenant, d.format, d.doc_type, d.acl) for d in docs} == {("bench", "text", "page", ("readers",))}
    assert "skipped 1" in caplog.text
    assert len(load_beir_corpus(tmp_path, "bench", limit=1)) == 1


def test_qrels_with_crlf_and_header(tmp_path):
    (tmp_path / "qrels").mkdir()
    (tmp_path / "qrels" / "test.tsv").write_bytes(b"query-id\tcorpus-id\tscore\r\n1\t10\t1\r\n1\t11\t2\r\n2\t10\t1\r\n")
    assert load_qrels(tmp_path, "test") == {"1": {"10": 1, "11": 2}, "2": {"10": 1}}
    (tmp_path / "qrels" / "bad.tsv").write_text("1\t10\t1\n")
    with pytest.raises(ValueError, match="header"):
        load_qrels(tmp_path, "bad")


@pytest.mark.skipif(not SCIFACT.is_dir(), reason=f"BEIR SciFact not present at {SCIFACT}")
def test_scifact_loads_fully():
    docs = load_beir_corpus(SCIFACT, "scifact")
    assert len(docs) == 5183
    assert len({d.doc_id for d in docs}) == 5183
    queries = load_beir_queries(SCIFACT)
    qrels = load_qrels(SCIFACT, "test")
    assert len(qrels) == 300
    assert set(qrels) <= set(queries)
    ids = {d.doc_id for d in docs}
    assert all(did in ids for rel in qrels.values() for did in rel)
