#!/usr/bin/env bash
# The one-shot GPU check for a lent GPU machine (issue 12): install the cuVS FAISS build in
# place of faiss-cpu, run the GPU contract tests and the benchmarks, write results to $OUT.
#   OUT=/tmp/gpu-out bash scripts/gpu_check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-var/gpu-check}"; mkdir -p "$OUT"
bash scripts/setup.sh
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$OUT/gpu.csv" || true
.venv/bin/python -m pip uninstall -y -q faiss-cpu
.venv/bin/python -m pip install -q 'faiss-gpu-cuvs>=1.14.2'
.venv/bin/python -c "import faiss; print('faiss', faiss.__version__, 'gpus', faiss.get_num_gpus())" | tee "$OUT/faiss.txt"
.venv/bin/python -m pytest -q -m gpu tests/core/test_dense_gpu.py -rA 2>&1 | tee "$OUT/gpu-tests.txt"
.venv/bin/python -m pytest -q tests/core/test_search_contract.py tests/core/test_dense_gpu.py 2>&1 | tail -3 | tee -a "$OUT/gpu-tests.txt"
.venv/bin/python -m quarry.eval.bench_dense --rows 1000000 --queries 300 --json "$OUT/dense.json" | tee "$OUT/dense.txt"
.venv/bin/python -m quarry.eval.bench_embed --texts 2000 --device cpu --save "$OUT/cpu.npy" | tee "$OUT/embed.jsonl"
.venv/bin/python -m quarry.eval.bench_embed --texts 50000 --device cuda --batch-size 512 | tee -a "$OUT/embed.jsonl"
.venv/bin/python -m quarry.eval.bench_embed --texts 2000 --device cuda --reference "$OUT/cpu.npy" | tee -a "$OUT/embed.jsonl"
