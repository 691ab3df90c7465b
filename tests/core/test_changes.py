"""The change-log model: validation with field-level reasons, ordering, idempotence."""

from __future__ import annotations

import datetime as dt

import pytest
from pydantic import ValidationError

from quarry.core.changes.log import Change, TenantState, change_reason, fold, lag_summary, validate_change, with_lags

pytestmark = pytest.mark.unit

DOC = {"doc_id": "d1", "version": "1", "tenant": "acme", "text": "hello world", "acl": ["eng"]}


def up(at: str, text: str = "hello world", version: str = "1", **kw) -> Change:
    return validate_change({"op": "upsert", "tenant": "acme", "doc_id": "d1", "at": at,
                            "document": {**DOC, "version": version, "text": text}, **kw})


def test_change_ids_are_content_addressed_and_version_comes_from_the_document():
    a, b = up("2026-01-01T00:00:00Z"), up("2026-01-01T00:00:00Z")
    assert a.change_id == b.change_id and a.version == "1"
    assert up("2026-01-01T00:00:01Z").change_id != a.change_id
    naive = up("2026-01-01T00:00:00")
    assert naive.at.tzinfo is not None and naive.at == a.at


@pytest.mark.parametrize("raw, field", [
    ({"op": "upsert", "tenant": "acme", "doc_id": "d1", "at": "2026-01-01"}, "document"),
    ({"op": "acl", "tenant": "acme", "doc_id": "d1", "at": "2026-01-01T00:00:00"}, "acl"),
    ({"op": "delete", "tenant": "Acme!", "doc_id": "d1", "at": "2026-01-01T00:00:00"}, "tenant"),
    ({"op": "move", "tenant": "acme", "doc_id": "d1", "at": "2026-01-01T00:00:00"}, "op"),
    ({"op": "delete", "tenant": "acme", "doc_id": "d1"}, "at"),
    ({"op": "upsert", "tenant": "acme", "doc_id": "d2", "at": "2026-01-01T00:00:00", "document": DOC}, "doc_id"),
    ({"op": "upsert", "tenant": "acme", "doc_id": "d1", "at": "2026-01-01T00:00:00",
      "document": {**DOC, "acl": []}}, "document.acl"),
])
def test_invalid_changes_have_field_level_reasons(raw, field):
    with pytest.raises(ValidationError) as e:
        validate_change(raw)
    assert field in change_reason(e.value)


def _none(_doc):
    return {}


def test_fold_orders_by_at_per_document_and_is_idempotent():
    s0 = TenantState(tenant="acme", base=1)
    dele = validate_change({"op": "delete", "tenant": "acme", "doc_id": "d1", "at": "2026-01-03T00:00:00"})
    u1, u2 = up("2026-01-01T00:00:00Z", "first"), up("2026-01-02T00:00:00Z", "second")
    # read out of order: the fold still applies u1, u2, then the delete
    r = fold(s0, [dele, u2, u1], _none)
    assert r.outcomes == {u1.change_id: "applied", u2.change_id: "applied", dele.change_id: "applied"}
    assert r.state.docs["d1"].versions == {} and r.upserts == {}
    again = fold(r.state, [u1, u2, dele], _none)
    assert set(again.outcomes.values()) == {"stale"} and again.state.docs == r.state.docs
    # a change older than what was applied to its document is stale, not applied
    late = up("2026-01-02T12:00:00Z", "late")
    assert fold(r.state, [late], _none).outcomes[late.change_id] == "stale"


def test_fold_acl_and_versions_follow_the_source_semantics():
    base = {"d1": {"1": ("eng",)}}
    s0 = TenantState(tenant="acme", base=1)
    acl = validate_change({"op": "acl", "tenant": "acme", "doc_id": "d1", "acl": ["ops"], "at": "2026-01-01T00:00:00"})
    v2 = up("2026-01-02T00:00:00Z", "v2 text", version="2")
    r = fold(s0, [acl, v2], lambda d: base.get(d, {}))
    vs = r.state.docs["d1"].versions
    assert vs["1"].origin == "base" and vs["1"].acl == ("ops",)
    assert vs["2"].origin == "delta" and vs["2"].acl is None  # an upsert carries its own ACL
    del1 = validate_change({"op": "delete", "tenant": "acme", "doc_id": "d1", "version": "1",
                            "at": "2026-01-03T00:00:00"})
    r2 = fold(r.state, [del1], lambda d: base.get(d, {}))
    assert set(r2.state.docs["d1"].versions) == {"2"}
    assert r2.state.live_delta() == {("d1", "2"): vs["2"].hash}


def test_rebase_keeps_the_applied_marks():
    s = fold(TenantState(tenant="acme", base=1), [up("2026-01-01T00:00:00Z")], _none).state
    rb = s.rebased(2)
    assert rb.base == 2 and rb.docs["d1"].versions is None and rb.docs["d1"].last == s.docs["d1"].last


def test_lag_summary_percentiles():
    cs = [up(f"2026-01-01T00:00:{i:02d}Z", f"t{i}") for i in range(10)]
    r = fold(TenantState(tenant="acme", base=1), cs, _none)
    t_vis = dt.datetime(2026, 1, 1, 0, 1, tzinfo=dt.timezone.utc).timestamp()
    st = with_lags(r.state, cs, r.outcomes, t_vis)
    s = lag_summary(st)
    assert s["changes"] == 10 and s["max_s"] == 60.0 and 51 <= s["p50_s"] <= 56
