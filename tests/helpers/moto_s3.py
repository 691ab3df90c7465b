"""A moto S3 server for one test, with fsspec's ``s3`` protocol pointed at it."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def moto_s3_root(monkeypatch, bucket: str = "quarry-test") -> Iterator[str]:
    """Start ``moto_server`` on a free port; yield ``s3://<bucket>/idx``; stop it after."""
    import fsspec
    import s3fs

    port = _free_port()
    moto = Path(sys.executable).with_name("moto_server")
    proc = subprocess.Popen([str(moto), "-p", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setitem(fsspec.config.conf, "s3", {"endpoint_url": url, "key": "testing", "secret": "testing"})
    s3fs.S3FileSystem.clear_instance_cache()
    try:
        deadline = time.time() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if time.time() > deadline:
                    raise
                time.sleep(0.2)
        fsspec.filesystem("s3").mkdir(bucket)
        yield f"s3://{bucket}/idx"
    finally:
        s3fs.S3FileSystem.clear_instance_cache()
        proc.terminate()
        proc.wait(timeout=10)
