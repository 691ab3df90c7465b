#!/usr/bin/env bash
# Create or refresh the project's virtual environment (.venv) with everything Quarry needs.
# Idempotent: re-installs only when pyproject.toml changed. torch is pinned to the CPU
# build 2.13.0 in pyproject.toml (a bare `torch` would pull a multi-GB CUDA build).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3.11}"
command -v "$PY" >/dev/null 2>&1 || PY=python3
if [ ! -x .venv/bin/python ]; then
  echo "[setup] creating .venv with $($PY --version)" >&2
  "$PY" -m venv .venv
fi
stamp=".venv/.quarry-installed"
want="$(sha256sum pyproject.toml | cut -d' ' -f1)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "[setup] installing quarry-rag and its extras into .venv (first run takes a few minutes)" >&2
  .venv/bin/python -m pip install --quiet --upgrade pip
  .venv/bin/python -m pip install --quiet -e '.[spark,serve,onnx,dev]'
  echo "$want" > "$stamp"
fi
