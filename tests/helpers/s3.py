"""A real S3 API for tests: the moto server as a subprocess on a loopback port.

``start()`` launches ``moto_server``, creates a bucket and returns an :class:`S3Server`
whose ``env`` is what a cluster sets to reach its object store: fsspec's own
configuration variables (``FSSPEC_S3_ENDPOINT_URL``, ``FSSPEC_S3_KEY``,
``FSSPEC_S3_SECRET``, read by ``fsspec.config`` at import in every process) plus the
standard AWS variables botocore reads. :meth:`S3Server.export` puts them into
``os.environ`` (so Spark's JVM and Python workers and Ray's workers, started afterwards,
inherit them) and into this process's already-imported ``fsspec.config.conf``. Quarry
itself knows nothing of moto: it opens ``s3://`` URIs through fsspec/s3fs as on a cluster.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

KEY = SECRET = "testing"
REGION = "us-east-1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class S3Server:
    endpoint: str
    bucket: str
    proc: subprocess.Popen
    env: dict[str, str] = field(default_factory=dict)

    def uri(self, *parts: str) -> str:
        return "/".join([f"s3://{self.bucket}", *(p.strip("/") for p in parts)])

    def export(self) -> None:
        import fsspec.config

        os.environ.update(self.env)
        fsspec.config.conf.setdefault("s3", {}).update(
            {"endpoint_url": self.endpoint, "key": KEY, "secret": SECRET})

    def fs(self):
        import s3fs

        return s3fs.S3FileSystem(endpoint_url=self.endpoint, key=KEY, secret=SECRET, skip_instance_cache=True)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def _server_cmd(port: int) -> list[str]:
    exe = Path(sys.executable).with_name("moto_server")
    if exe.exists():
        return [str(exe), "-H", "127.0.0.1", "-p", str(port)]
    found = shutil.which("moto_server")
    if found:
        return [found, "-H", "127.0.0.1", "-p", str(port)]
    return [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]


def start(bucket: str = "quarry-test", log_path: str | None = None, timeout_s: float = 30.0) -> S3Server:
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    log = open(log_path, "wb") if log_path else subprocess.DEVNULL
    proc = subprocess.Popen(_server_cmd(port), stdout=log, stderr=subprocess.STDOUT,
                            env={**os.environ, "AWS_ACCESS_KEY_ID": KEY, "AWS_SECRET_ACCESS_KEY": SECRET})
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            urllib.request.urlopen(endpoint + "/", timeout=1).read()
            break
        except Exception:  # noqa: BLE001 - not listening yet
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"moto_server did not start on {endpoint} (exit {proc.poll()})") from None
            time.sleep(0.1)
    env = {
        "FSSPEC_S3_ENDPOINT_URL": endpoint, "FSSPEC_S3_KEY": KEY, "FSSPEC_S3_SECRET": SECRET,
        "AWS_ACCESS_KEY_ID": KEY, "AWS_SECRET_ACCESS_KEY": SECRET, "AWS_DEFAULT_REGION": REGION,
        "AWS_ENDPOINT_URL_S3": endpoint,
    }
    server = S3Server(endpoint=endpoint, bucket=bucket, proc=proc, env=env)
    server.fs().mkdir(bucket)
    return server
