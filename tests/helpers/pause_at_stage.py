"""Run a job module as ``python -m`` would, with its driver stopped at one stage.

    python tests/helpers/pause_at_stage.py STAGE MARKER MODULE [ARGS...]

Every job announces its stages through ``quarry.jobs.report.Progress.start``; this wraps
that method so that, when ``STAGE`` starts, the driver writes ``MARKER`` and sleeps until
killed. The crash tests (test_build_kill, test_apply_changes, test_compact) SIGKILL the
process group then, so the kill lands at a known stage boundary without a test hook in
production code.
"""

from __future__ import annotations

import os
import runpy
import sys
import time
from pathlib import Path

from quarry.jobs.report import Progress


def main() -> None:
    stage, marker, module, *argv = sys.argv[1:]
    start = Progress.start

    def paused_start(self: Progress, name: str) -> None:
        if name == stage:
            Path(marker).write_text(f"{name} {os.getpid()}\n")
            print(f"[test] paused at stage {name!r}", file=sys.stderr, flush=True)
            while True:
                time.sleep(1)
        start(self, name)

    Progress.start = paused_start
    sys.argv = [module, *argv]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
