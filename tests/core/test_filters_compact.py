"""ACL columns as packed per-group bitsets: the same masks as the dense matrix they
replace, and older shards' dense ``acl`` arrays are still read."""

import numpy as np
import pytest

from quarry.core.index.filters import FilterColumns, pack_acl
from quarry.core.records import Principal

pytestmark = pytest.mark.unit

GROUPS = ("eng", "hr", "sales")


def _dense_mask(acl, public, groups, principal_groups):
    cols = [i for i, g in enumerate(groups) if g in principal_groups]
    m = public.copy()
    if cols:
        m |= acl[:, cols].any(axis=1)
    return m


@pytest.mark.parametrize("n", [0, 1, 7, 8, 9, 133])
def test_packed_masks_equal_the_dense_matrix_and_old_files_read(n):
    rng = np.random.default_rng(n)
    acl = rng.random((n, len(GROUPS))) < 0.3
    public = rng.random(n) < 0.2
    arrays = {"acl": acl, "public": public, "doc_type": np.zeros(n, np.int16),
              "valid_from": np.zeros(n, np.int64), "valid_to": np.zeros(n, np.int64),
              "deleted": np.zeros(n, bool)}
    old = FilterColumns.from_arrays("t", GROUPS, ("doc",), arrays)  # a shard written before bitsets
    new = FilterColumns.from_arrays("t", GROUPS, ("doc",), {**old.to_arrays()})
    assert "acl" not in old.to_arrays() and old.acl_bits.shape == (len(GROUPS), (n + 7) // 8)
    for pg in [(), ("eng",), ("hr", "sales"), GROUPS, ("nobody",)]:
        p = Principal(tenant="t", subject="u", groups=frozenset(pg))
        want = _dense_mask(acl, public, GROUPS, pg)
        assert np.array_equal(old.mask(p), want) and np.array_equal(new.mask(p), want)
    assert not new.mask(Principal(tenant="other", subject="u", groups=frozenset(GROUPS))).any()
    for i, g in enumerate(GROUPS):
        assert np.array_equal(new.group_rows(g), acl[:, i])


def test_bitsets_are_an_eighth_of_the_matrix():
    acl = np.ones((10_000, 40), dtype=bool)
    assert pack_acl(acl).nbytes == 40 * 1250 == acl.nbytes // 8
