"""Reading append-only JSON-lines logs written by processes that may die mid-write: the run
store's write-ahead log and the trace files.

A crash can leave the last line torn, and a restarted writer appends after it, so the torn
fragment and the first new record share a line. :func:`read_appended` skips a line that
does not decode and keeps reading: every record written after a restart is kept, and only
the torn write (with the record glued to it) is lost.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any


def read_appended(lines: Iterable[str]) -> Iterator[Any]:
    """The decoded records of an append-only JSON-lines log, torn lines skipped."""
    for line in lines:
        try:
            yield json.loads(line)
        except json.JSONDecodeError:
            continue
