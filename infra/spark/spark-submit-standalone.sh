#!/usr/bin/env bash
# quarry build on a Spark standalone or YARN cluster. See README.md in this folder.
#
# Tested: tests/jobs/test_spark_standalone.py runs this script against a standalone master
# and worker started on loopback (pyspark's own spark-class, Spark 4.x) with the index root
# on an S3 API (the moto server), the worker started WITHOUT any S3 setting: executors get
# the object store only through the spark.executorEnv.* lines below. Not tested: YARN, a
# multi-machine cluster, a corpus on NFS.
#
# Prerequisites on every node (driver and executors):
#   * Python 3.11 with the quarry-rag package and its dependencies installed (the same
#     venv/image everywhere), OR the conda-pack/venv-pack archive below;
#   * the source corpus readable at the same path on every executor (NFS, a mounted
#     bucket, or HDFS-fuse); the index root is an fsspec URI (s3://...), written by the
#     executors (shards, each verified where it was written) and the driver (manifest, CURRENT).
set -euo pipefail

MASTER="${MASTER:-spark://spark-master:7077}"          # or: yarn
SOURCE="${SOURCE:-/mnt/corpora/acme-2026-01}"           # path visible to every executor
INDEX_ROOT="${INDEX_ROOT:-${QUARRY_INDEX_ROOT:-s3://quarry-indexes/prod}}"
# A packed environment shipped to executors (built with: venv-pack -o quarry-env.tar.gz);
# leave empty when executors already have quarry installed (a shared image).
ENV_ARCHIVE="${ENV_ARCHIVE:-}"
EXECUTOR_CORES="${EXECUTOR_CORES:-4}"
EXECUTOR_MEMORY="${EXECUTOR_MEMORY:-8g}"
EXECUTOR_OVERHEAD="${EXECUTOR_OVERHEAD:-4g}"             # the model and Arrow batches live in Python workers
EMBEDDER="${EMBEDDER:-default}"
SHARD_DOCS="${SHARD_DOCS:-50000}"
PARTITIONS="${PARTITIONS:-64}"

# The entry script: the quarry CLI (quarry/cli.py) from the installed package, run as `build`.
ENTRY="$(python -c 'import quarry.cli as m; print(m.__file__)')"

ARGS=(
  --master "$MASTER"
  --deploy-mode client                    # the driver writes the manifest and CURRENT
  --name quarry-build
  --conf spark.executor.cores="$EXECUTOR_CORES"
  --conf spark.task.cpus=1                # = torch threads per embedding task
  --conf spark.executor.memory="$EXECUTOR_MEMORY"
  --conf spark.executor.memoryOverhead="$EXECUTOR_OVERHEAD"
  --conf spark.python.worker.reuse=true   # the embed stage loads the model once per worker
  --conf spark.sql.execution.arrow.pyspark.enabled=true
  --conf spark.sql.execution.arrow.maxRecordsPerBatch=2048
  --conf spark.sql.shuffle.partitions="$PARTITIONS"
)
# Object-store settings for fsspec/s3fs on the executors, passed from this environment when
# set (else the nodes' own: an instance profile / IRSA). fsspec reads FSSPEC_S3_* at import.
for var in AWS_REGION AWS_DEFAULT_REGION AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY AWS_SESSION_TOKEN \
           FSSPEC_S3_ENDPOINT_URL FSSPEC_S3_KEY FSSPEC_S3_SECRET; do
  if [[ -n "${!var:-}" ]]; then ARGS+=(--conf "spark.executorEnv.$var=${!var}"); fi
done
if [[ -n "$ENV_ARCHIVE" ]]; then
  ARGS+=(--archives "$ENV_ARCHIVE#env"
         --conf spark.pyspark.python=./env/bin/python
         --conf spark.pyspark.driver.python="$(command -v python)")
elif [[ -n "${PYSPARK_PYTHON:-}" ]]; then
  ARGS+=(--conf spark.pyspark.python="$PYSPARK_PYTHON")  # the interpreter with quarry, on every node
fi

exec spark-submit "${ARGS[@]}" "$ENTRY" build \
  --source "$SOURCE" \
  --index-root "$INDEX_ROOT" \
  --shard-docs "$SHARD_DOCS" \
  --contextualizer extractive \
  --embedder "$EMBEDDER" \
  --batch-size 128 \
  --partitions "$PARTITIONS" \
  "$@"
