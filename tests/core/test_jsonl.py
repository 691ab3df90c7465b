"""core.jsonl: an append-only log whose writer died mid-line and was restarted keeps every
record written after the restart."""

from __future__ import annotations

import pytest

from quarry.core.jsonl import read_appended

pytestmark = pytest.mark.unit


def test_a_torn_line_is_skipped_and_later_records_are_kept():
    lines = ['{"q": 1}\n', '{"q": 2, "s": {"run', '{"q": 3}\n', '{"q": 4}\n']
    # the restarted writer appended record 3 to the torn fragment: that one line is lost
    glued = [lines[0], lines[1] + lines[2], lines[3]]
    assert [r["q"] for r in read_appended(glued)] == [1, 4]
    assert [r["q"] for r in read_appended(lines)] == [1, 3, 4]
    assert list(read_appended(["", "\n"])) == []
