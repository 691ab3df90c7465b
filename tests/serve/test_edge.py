"""The request-edge helpers without Ray: limits, the no-echo error renderer, trace privacy,
and the corrected OpenAPI operations (their HTTP behaviour is in test_hardening)."""

from __future__ import annotations

import asyncio
import json

import pytest
from jsonschema import Draft202012Validator

from quarry.serve.http.errors import error_details
from quarry.serve.http.limits import RequestLimitsMiddleware, header_bytes, is_json_content_type, json_depth_exceeds
from quarry.serve.http.openapi import answer_schema, operations
from quarry.serve.settings import RequestLimits
from quarry.serve.stores.trace_privacy import REDACTED, passage_ids, query_fields, redact_query, redact_trace

pytestmark = pytest.mark.unit


def _depth_oracle(body: bytes) -> int:
    """Max nesting by actually parsing (fine for small inputs)."""
    def d(x):
        if isinstance(x, list):
            return 1 + max((d(v) for v in x), default=0)
        if isinstance(x, dict):
            return 1 + max((d(v) for v in x.values()), default=0)
        return 0
    return d(json.loads(body))


@pytest.mark.parametrize("body", [
    b'{"a": [1, [2, [3]]], "b": "[[[[[[[[[[[[[[[[[[[["}',
    b'[' * 40 + b']' * 40,
    b'{"x": "\\"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["}',
    b'[[], [], [], [], [], [], [], [], [], [], [], [], [], [], [], [], [], [], [], [], [], [], [], [], [], [], [], []]',
    b'{"q": "\\\\", "r": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}',
])
def test_depth_scan_agrees_with_the_parser(body):
    for limit in (4, 8, 32):
        assert json_depth_exceeds(body, limit) == (_depth_oracle(body) > limit)


def test_header_size_and_content_types():
    assert header_bytes([(b"host", b"x"), (b"authorization", b"Bearer abc")]) == 4 + 1 + 4 + 13 + 10 + 4
    assert is_json_content_type("application/json; charset=utf-8") and is_json_content_type("application/problem+json")
    for bad in ("", "text/plain", "application/jsonx", "multipart/form-data; boundary=x", "text/json"):
        assert not is_json_content_type(bad)


def _run(mw, scope, chunks):
    sent, received = [], []

    async def receive():
        if chunks:
            body, more = chunks.pop(0)
            return {"type": "http.request", "body": body, "more_body": more}
        return {"type": "http.disconnect"}

    async def send(msg):
        sent.append(msg)

    async def app(scope, receive, send):
        msg = await receive()
        received.append(msg["body"])
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    asyncio.run(RequestLimitsMiddleware(app, lambda: mw)(scope, receive, send))
    return sent[0]["status"] if sent else None, received


def _scope(headers, method="POST"):
    return {"type": "http", "method": method, "headers": headers}


def test_middleware_counts_streamed_bytes_and_replays_the_body():
    lim = RequestLimits(max_body_bytes=2048, max_header_bytes=1024, max_json_depth=4)
    js = [(b"content-type", b"application/json")]
    assert _run(lim, _scope(js), [(b'{"a":', True), (b' 1}', False)]) == (200, [b'{"a": 1}'])
    assert _run(lim, _scope(js), [(b"x" * 1500, True), (b"x" * 1500, False)]) == (413, [])
    assert _run(lim, _scope(js + [(b"content-length", b"99999")]), [(b"{}", False)]) == (413, [])
    assert _run(lim, _scope(js + [(b"content-length", b"12, 12")]), [(b"{}", False)]) == (400, [])
    assert _run(lim, _scope(js + [(b"x-pad", b"p" * 2000)]), [(b"{}", False)]) == (431, [])
    assert _run(lim, _scope([(b"content-type", b"text/plain")]), [(b"{}", False)]) == (415, [])
    assert _run(lim, _scope(js), [(b"[[[[[[]]]]]]", False)]) == (400, [])
    # bodiless POSTs (create a run) and GETs need no content type
    assert _run(lim, _scope([]), [(b"", False)]) == (200, [b""])
    assert _run(lim, _scope([], "GET"), [(b"", False)]) == (200, [b""])


def test_error_details_never_carry_input():
    errors = [{"loc": ("query",), "type": "string_unicode", "msg": "bad", "input": "refund \ud800"},
              {"loc": ("top_k",), "type": "finite_number", "msg": "Input should be a finite number", "input": float("nan")},
              {"loc": ("\ud800 secret key",), "type": "extra_forbidden", "msg": "Extra inputs are not permitted",
               "input": 1},
              {"loc": ("doc_type", 3), "type": "too_long", "msg": "m\udfff" * 500}]
    out = error_details(errors, ("body",))
    text = json.dumps(out, allow_nan=False)  # encodes: no NaN, no surrogate
    text.encode("utf-8")
    assert "secret" not in text and "refund" not in text and '"input"' not in text
    assert out[2]["loc"] == ["body", "…"] and out[3]["loc"] == ["body", "doc_type", 3]
    assert len(out[3]["msg"]) <= 300
    assert len(error_details([{"loc": ("x", i), "type": "t", "msg": "m"} for i in range(10_000)])) == 20


def test_query_redaction():
    f = query_fields("acme", "Refund for ord_4821 by alice@example.com above 2.5%  please", 80)
    assert f["query_redacted"] == "Refund for # by <email> above # please"
    assert f["query_sha256"] == query_fields("acme", "Refund for ord_4821 by alice@example.com above 2.5%  please",
                                             80)["query_sha256"]
    assert f["query_sha256"] != query_fields("globex", "Refund for ord_4821 by alice@example.com above 2.5%  please",
                                             80)["query_sha256"]
    assert len(redact_query("word " * 1000, 80)) == 80 and redact_query("anything", 0) == ""


def test_trace_redaction_hides_ids_outside_the_readers_groups():
    trace = {"trace_id": "t", "tenant": "acme", "run_id": "r",
             "candidates": [{"passage_id": "pay@1#a", "doc_id": "pay", "row": 7, "fused_rank": 1},
                            {"passage_id": "open@1#b", "doc_id": "open", "row": 3, "fused_rank": 2}],
             "delivered": ["pay@1#a", "open@1#b"], "new_ids": ["pay@1#a"],
             "source_versions": ["open@1", "pay@1"],
             "checks": [{"passage_id": "pay@1#a", "retrieved": True}],
             "decision": {"selected": [{"passage_id": "pay@1#a", "reason": "authority"}], "unresolved": ["pay"],
                          "rejected": [{"passage_id": "open@1#b", "by": "bonus@2#c"}]},
             "follow_ups": [{"query_sha256": "ab", "found": ["bonus@2#c"]}],
             "added_later": {"evidence": ["bonus@2#c"]}}
    assert passage_ids(trace) == {"pay@1#a", "open@1#b", "bonus@2#c"}
    out = redact_trace(trace, {"open@1#b"})
    text = json.dumps(out)
    assert "pay" not in text and "bonus" not in text and out["redacted_ids"] == 2
    assert out["candidates"][0] == {"passage_id": REDACTED, "doc_id": REDACTED, "row": REDACTED, "fused_rank": 1,
                                    "redacted": True}
    assert out["candidates"][1] == trace["candidates"][1]
    assert out["delivered"] == [REDACTED, "open@1#b"] and out["source_versions"] == ["open@1", REDACTED]
    assert out["decision"]["rejected"] == [{"passage_id": "open@1#b", "by": REDACTED}]
    assert out["follow_ups"][0]["found"] == [REDACTED]
    assert redact_trace(trace, {"open@1#b", "pay@1#a", "bonus@2#c"}) == {**trace, "redacted_ids": 0}
    assert trace["candidates"][0]["passage_id"] == "pay@1#a"  # the stored trace is not mutated


def test_spec_operations_state_ceilings_and_the_answer_xor():
    ops = operations(10, 60)
    search = ops[("/v1/search", "post")]["requestBody"]["content"]["application/json"]["schema"]
    v = Draft202012Validator(search)
    assert v.is_valid({"query": "x", "top_k": 10}) and not v.is_valid({"query": "x", "top_k": 11})
    assert not v.is_valid({"query": "x", "top_k": "5"}) and not v.is_valid({"query": "x", "valid_at": 0})
    a = Draft202012Validator(ops[("/v1/answer", "post")]["requestBody"]["content"]["application/json"]["schema"])
    claim = {"statement": "s", "passage_id": "p", "quote": "a b c d"}
    assert a.is_valid({"claims": [claim]}) and not a.is_valid({"claims": [claim], "abstention": {"reason": "r"}})
    assert "oneOf" not in answer_schema({"type": "object"})["oneOf"][0]
    for (path, method), op in ops.items():
        assert {"400", "413", "415", "431"} <= set(op["responses"]), (path, method)
