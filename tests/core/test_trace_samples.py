"""The trace reader behind `quarry plan --from-traces`: which fields it reads and how."""

import json

import pytest

from quarry.core.capacity.trace_samples import collect_samples, parse_server_timing, read_trace_records

pytestmark = pytest.mark.unit


def test_server_timing_header_is_parsed():
    assert parse_server_timing("auth;dur=0.31, retrieve;dur=20.5, total;desc=x;dur=40") == {
        "auth": 0.31, "retrieve": 20.5, "total": 40.0}


def test_fields_and_fallbacks():
    s = collect_samples([
        {"kind": "search", "run_id": "a", "candidates": 50, "delivered": ["p1", "p2"], "timings": {"total": 30}},
        {"kind": "search", "run_id": "a", "candidates": [{}] * 7, "delivered": 900,
         "stages": [{"name": "rerank", "kept": 3}], "timings_ms": {"retrieve": 12, "rerank": 4}},
        {"kind": "search", "run_id": "b"},
        {"kind": "answer", "run_id": "b", "candidates": 99},
    ])
    assert (s.searches, s.runs, s.calls_per_task) == (3, 2, 1.5)
    assert s.candidates == (50.0, 7.0)
    assert s.delivered_tokens == (900.0,)       # an id list is not a token count
    assert s.survivors == (2.0, 3.0)            # len(delivered ids), then rerank.kept
    assert (s.total_ms, s.retrieve_ms, s.rerank_ms) == ((30.0,), (12.0,), (4.0,))


def test_reader_errors_name_the_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="no trace file"):
        list(read_trace_records(tmp_path / "nope"))
    with pytest.raises(ValueError, match="no \\*.jsonl"):
        list(read_trace_records(tmp_path))
    bad = tmp_path / "t.jsonl"
    bad.write_text(json.dumps({"kind": "search"}) + "\n{oops\n")
    with pytest.raises(ValueError, match="t.jsonl:2"):
        list(read_trace_records(bad))
