"""The documented IDF side channel as measured by eval/idf_side_channel:
tenant-wide statistics let restricted documents flip the order a principal sees; visible-only
statistics never do. If per-visibility-class statistics land, this test's first assertion
is the one to change."""

from __future__ import annotations

import pytest

from quarry.eval.idf_side_channel import measure_targeted

pytestmark = pytest.mark.unit


def test_restricted_documents_flip_the_visible_order_only_with_tenant_wide_stats(tmp_path):
    rows = measure_targeted(tmp_path, max_n=5)
    tenant_first = [r["first_tenant_stats"] for r in rows]
    assert tenant_first[0] == "d-v1" and "d-v2" in tenant_first  # the order moved: one bit leaked
    assert {r["first_visible_stats"] for r in rows} == {"d-v1"}  # visible-only stats: never moves
    scores = [r["score_v1_tenant"] for r in rows]
    assert all(a > b for a, b in zip(scores, scores[1:]))  # each restricted copy lowers the IDF
