"""One place that creates the SparkSession for Quarry's jobs.

``get_spark(master=None)`` works in three situations without code changes:

* ``python -m quarry.jobs.build`` / ``quarry build`` on a laptop: no master configured,
  so ``local[*]`` is used (or whatever ``--master`` says);
* ``spark-submit quarry/jobs/build.py ...``: spark-submit already started the JVM and set
  ``spark.master``; we must not override it (``PYSPARK_GATEWAY_PORT`` tells us);
* tests: ``get_spark("local[2]", local_dir=tmp)`` once per test session.

Executors run Python UDFs with the same interpreter as the driver in local mode
(``PYSPARK_PYTHON``), and Python workers are reused between tasks
(``spark.python.worker.reuse``) so a model loaded by the embed stage stays loaded for the
life of the worker.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

DEFAULT_CONF: dict[str, str] = {
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    # Arrow batches handed to mapInPandas/applyInPandas; the embed stage sub-batches them.
    "spark.sql.execution.arrow.maxRecordsPerBatch": "2048",
    "spark.python.worker.reuse": "true",  # keeps the embed stage's model cache alive
    "spark.sql.adaptive.enabled": "true",
    "spark.ui.showConsoleProgress": "false",  # the job prints its own stage lines
    "spark.sql.session.timeZone": "UTC",
}


def under_spark_submit() -> bool:
    """True when this Python process was launched by spark-submit (JVM already up)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def get_spark(
    master: str | None = None,
    app_name: str = "quarry-build",
    local_dir: str | None = None,
    conf: Mapping[str, Any] | None = None,
):
    """A SparkSession configured for Quarry's jobs (reuses an active one).

    ``master=None`` keeps spark-submit's master, or falls back to ``local[*]``.
    """
    from pyspark.sql import SparkSession

    # Local mode: executors must use this interpreter (the one with quarry installed).
    if not under_spark_submit():
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    if master is None and not under_spark_submit():
        master = "local[*]"
    if master is not None:
        builder = builder.master(master)
        if master.startswith("local"):
            builder = builder.config("spark.ui.enabled", os.environ.get("QUARRY_SPARK_UI", "false"))
            builder = builder.config("spark.driver.memory", os.environ.get("QUARRY_SPARK_DRIVER_MEMORY", "2g"))
            builder = builder.config("spark.sql.shuffle.partitions", "8")
    if local_dir:
        os.makedirs(local_dir, exist_ok=True)
        builder = builder.config("spark.local.dir", local_dir)
    for k, v in {**DEFAULT_CONF, **(conf or {})}.items():
        builder = builder.config(k, str(v))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(os.environ.get("QUARRY_SPARK_LOG_LEVEL", "WARN"))
    return spark
