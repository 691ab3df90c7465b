"""``quarry eval traces`` reads what the serving trace store wrote."""

from __future__ import annotations

import time

import pytest

from quarry.eval.traces import summarise
from quarry.serve.stores.tracestore import TraceWriter, read_traces

pytestmark = pytest.mark.unit


def test_summary_counts_and_percentiles_per_tenant(tmp_path):
    w = TraceWriter(str(tmp_path), flush_ms=50)
    now = time.time()
    for i, ms in enumerate([1.0, 2.0, 3.0, 4.0, 100.0]):
        w.append({"trace_id": w.new_id(now), "kind": "search", "tenant": "acme", "at": now,
                  "candidates": [{}] * (10 + i), "delivered": ["a"] * 2, "timings_ms": {"lexical": ms}})
    w.append({"trace_id": w.new_id(now), "kind": "abstention", "tenant": "acme", "at": now, "reason": "model_abstained"})
    w.append({"trace_id": w.new_id(now), "kind": "search", "tenant": "globex", "at": now, "candidates": [],
              "delivered": [], "timings_ms": {"lexical": 7.0}})
    w.close()
    s = summarise(read_traces(str(tmp_path)))
    assert s["acme"]["records"] == {"search": 5, "abstention": 1}
    assert s["acme"]["abstention_reasons"] == {"model_abstained": 1}
    assert s["acme"]["candidates_mean"] == 12.0 and s["acme"]["delivered_mean"] == 2.0
    assert s["acme"]["timings_ms"]["lexical"] == {"p50": 3.0, "p95": 100.0, "n": 5}
    assert s["globex"]["timings_ms"]["lexical"]["p50"] == 7.0
    assert set(summarise(read_traces(str(tmp_path), "globex"))) == {"globex"}
