#!/usr/bin/env bash
# quarry build on a Spark standalone or YARN cluster (configuration; NOT tested here:
# only local mode was run in this repository). See README.md in this folder.
#
# Prerequisites on every node (driver and executors):
#   * Python 3.11 with the quarry-rag package and its dependencies installed (the same
#     venv/image everywhere), OR the conda-pack/venv-pack archive below;
#   * the source corpus readable at the same path on every executor (NFS, a mounted
#     bucket, or HDFS-fuse); the index root is an fsspec URI (s3://...), written by the
#     executors (shards) and the driver (manifest, CURRENT).
set -euo pipefail

MASTER="${MASTER:-spark://spark-master:7077}"          # or: yarn
SOURCE="${SOURCE:-/mnt/corpora/acme-2026-01}"           # path visible to every executor
INDEX_ROOT="${INDEX_ROOT:-s3://quarry-indexes/prod}"
# A packed environment shipped to executors (built with: venv-pack -o quarry-env.tar.gz);
# leave empty when executors already have quarry installed (a shared image).
ENV_ARCHIVE="${ENV_ARCHIVE:-}"

# The entry script: the quarry CLI (quarry/cli.py) from the installed package, run as `build`.
ENTRY="$(python -c 'import quarry.cli as m; print(m.__file__)')"

ARGS=(
  --master "$MASTER"
  --deploy-mode client                    # the driver writes the manifest and CURRENT
  --name quarry-build
  --conf spark.executor.cores=4
  --conf spark.task.cpus=1                # = torch threads per embedding task
  --conf spark.executor.memory=8g
  --conf spark.executor.memoryOverhead=4g # the model and Arrow batches live in Python workers
  --conf spark.python.worker.reuse=true   # the embed stage loads the model once per worker
  --conf spark.sql.execution.arrow.pyspark.enabled=true
  --conf spark.sql.execution.arrow.maxRecordsPerBatch=2048
  --conf spark.sql.shuffle.partitions=64
  # object-store credentials for fsspec/s3fs on executors (or an instance profile / IRSA)
  --conf spark.executorEnv.AWS_REGION="${AWS_REGION:-eu-west-1}"
)
if [[ -n "$ENV_ARCHIVE" ]]; then
  ARGS+=(--archives "$ENV_ARCHIVE#env"
         --conf spark.pyspark.python=./env/bin/python
         --conf spark.pyspark.driver.python="$(command -v python)")
fi

exec spark-submit "${ARGS[@]}" "$ENTRY" build \
  --source "$SOURCE" \
  --index-root "$INDEX_ROOT" \
  --shard-docs 50000 \
  --contextualizer extractive \
  --embedder default \
  --batch-size 128 \
  --partitions 64
