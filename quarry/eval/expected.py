"""Pinned expectations (``eval/expected/<dataset>.json``) and the drift check behind
``quarry eval beir ... --check``: a stage's metric that moves beyond the pinned tolerance
fails the run, so a change that silently costs (or suspiciously gains) quality is caught."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

EXPECTED_DIR = Path(__file__).resolve().parents[2] / "eval" / "expected"


def load_expected(dataset: str, path: str | Path | None = None) -> dict[str, Any] | None:
    p = Path(path) if path else EXPECTED_DIR / f"{dataset.lower()}.json"
    return json.loads(p.read_text()) if p.exists() else None


def check(result: dict[str, Any], expected: dict[str, Any]) -> list[str]:
    """Drifts as one line each: ``'hybrid ndcg@10 0.7010 vs pinned 0.7162 (tolerance 0.005)'``.
    Only stages present in both are compared; a pinned stage the run did not produce is
    reported too (a check must not pass by skipping)."""
    tol = float(expected.get("tolerance", 0.005))
    out = []
    if expected.get("split") and result.get("split") and expected["split"] != result["split"]:
        return [f"split {result['split']!r} is not the pinned split {expected['split']!r}"]
    for stage, metrics in expected["stages"].items():
        got = result["stages"].get(stage)
        if got is None:
            out.append(f"{stage}: not produced by this run (pinned {metrics})")
            continue
        for name, want in metrics.items():
            if name in got and abs(float(got[name]) - float(want)) > tol:
                out.append(f"{stage} {name} {got[name]:.4f} vs pinned {want:.4f} (tolerance {tol})")
    return out
