#!/usr/bin/env bash
# README command 1: set up, then run the main job on the embedded defaults.
set -euo pipefail
cd "$(dirname "$0")"
bash scripts/setup.sh
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
exec .venv/bin/quarry demo "$@"
