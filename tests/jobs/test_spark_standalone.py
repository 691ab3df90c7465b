"""``quarry build`` on a real Spark standalone cluster: a master and a worker started here on
loopback with pyspark's own ``spark-class``, the job submitted by
``infra/spark/spark-submit-standalone.sh`` and writing to the S3 server. The worker is
started without any S3 setting, so executors reach the object store only through what the
script passes (``spark.executorEnv.*``): the driver/executor split a cluster has."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(900)]
REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "infra" / "spark" / "spark-submit-standalone.sh"
S3_VARS = ("FSSPEC_S3", "AWS_")


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_port(port: int, proc: subprocess.Popen, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"exited with {proc.returncode}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.5)
    raise TimeoutError(f"nothing listening on {port}")


@pytest.fixture()
def standalone(tmp_path):
    import pyspark

    home = Path(pyspark.__file__).parent
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("no Java")
    clean = {k: v for k, v in os.environ.items() if not k.startswith(S3_VARS)}  # the nodes know no S3
    clean.update(SPARK_HOME=str(home), SPARK_LOCAL_IP="127.0.0.1", SPARK_LOG_DIR=str(tmp_path / "logs"),
                 PYSPARK_PYTHON=sys.executable)
    cls = str(home / "bin" / "spark-class")
    mport, wwork = _port(), tmp_path / "work"
    logs = []
    master = subprocess.Popen([cls, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(mport),
                               "--webui-port", str(_port())], env=clean, stdout=open(tmp_path / "master.log", "wb"),
                              stderr=subprocess.STDOUT)
    logs.append(master)
    worker = None
    try:
        _wait_port(mport, master)
        url = f"spark://127.0.0.1:{mport}"
        worker = subprocess.Popen([cls, "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--cores", "2",
                                   "--memory", "3g", "--work-dir", str(wwork), "--webui-port", str(_port()), url],
                                  env=clean, stdout=open(tmp_path / "worker.log", "wb"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while "Successfully registered with master" not in (tmp_path / "worker.log").read_text(errors="replace"):
            if worker.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError((tmp_path / "worker.log").read_text(errors="replace")[-3000:])
            time.sleep(0.5)
        yield url, wwork
    finally:
        for p in (worker, master):
            if p is not None and p.poll() is None:
                p.terminate()
                try:
                    p.wait(20)
                except subprocess.TimeoutExpired:
                    p.kill()


def test_build_on_a_standalone_cluster_into_s3(standalone, s3_server, tmp_path):
    from quarry.core.index import layout
    from quarry.core.index.manifest import read_manifest
    from quarry.core.ingest.sources import SAMPLE_CORPUS

    url, work = standalone
    root = s3_server.uri("standalone", "idx")
    venv_bin = str(Path(sys.executable).parent)
    env = {**os.environ, **s3_server.env, "MASTER": url, "SOURCE": str(SAMPLE_CORPUS), "INDEX_ROOT": root,
           "EXECUTOR_CORES": "2", "EXECUTOR_MEMORY": "1g", "EXECUTOR_OVERHEAD": "512m", "EMBEDDER": "hashing",
           "SHARD_DOCS": "10", "PARTITIONS": "4", "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1",
           "PATH": f"{venv_bin}:{os.environ.get('PATH', '')}", "QUARRY_SPARK_DRIVER_MEMORY": "1g"}
    p = subprocess.run(["bash", str(SCRIPT), "--json", "--quiet"], env=env, capture_output=True, text=True, timeout=840)
    assert p.returncode == 0, p.stderr[-5000:]
    report = json.loads(p.stdout[p.stdout.index("{"):])
    assert report["master"] == url and report["published"]
    assert set(report["tenants"]) == {"acme", "globex", "initech"}
    fs = s3_server.fs()
    for t in report["tenants"]:
        assert layout.current_generation(root, t) == 1
        m = read_manifest(root, t, 1)
        for s in m.shards:  # what the executors reported and verified is what the bucket holds
            for rel, size in s.sizes.items():
                assert fs.info(f"{s3_server.bucket}/standalone/idx/{t}/gen-1/shard-{s.shard}/{rel}")["size"] == size
    assert fs.exists(f"{s3_server.bucket}/standalone/idx/_runs/{report['run_id']}.json")
    # the tasks ran in executors the worker launched (their logs are in its work dir)
    assert list(work.glob("app-*/*/stderr")), "no executor ran on the standalone worker"
