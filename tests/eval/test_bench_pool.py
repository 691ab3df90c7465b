"""The resolution-pool benchmark's table and its bad-input path (timing itself is never asserted)."""

from __future__ import annotations

import pytest

from quarry.eval import bench_pool

pytestmark = pytest.mark.unit


def test_the_table_gives_each_pool_its_percentiles_and_the_ratio_to_the_smallest():
    md = bench_pool.to_markdown({0: [10.0, 10.0, 30.0], 8: [15.0, 15.0, 45.0]}, 3)
    assert "| 0 | 10.0 |" in md and md.rstrip().endswith("| 1.50 |")


def test_a_missing_index_or_a_bad_pool_list_is_one_line_and_exit_2(tmp_path, capsys):
    assert bench_pool.main(["--index-root", str(tmp_path)]) == 2
    assert bench_pool.main(["--index-root", str(tmp_path), "--pools", "0,x"]) == 2
    assert bench_pool.main(["--index-root", str(tmp_path), "--valid-at", "March"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and err[0].startswith("bench_pool: no index for") and "--valid-at" in err[2]


def test_the_out_of_force_table_names_its_setting_and_date():
    import datetime as dt

    md = bench_pool.to_markdown({0: [10.0, 10.0], 2: [11.0, 11.0]}, 2, "out_of_force", dt.date(2026, 3, 10))
    assert "# out_of_force" in md and "valid_at 2026-03-10" in md and md.rstrip().endswith("| 1.10 |")
