"""Start and stop the Serve application from Python: ``quarry serve``, ``quarry demo`` and
the load benchmark share this, so all three run the same application the same way.

``start`` connects to a Ray cluster when given an address (``auto``, ``host:6379`` or
``ray://host:10001``), else starts Ray in this process; then starts Serve's HTTP proxy on
``host:port``, deploys the application and waits until ``/healthz`` answers.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from .settings import ServeSettings

APP_NAME = "quarry"
THROUGHPUT_OPTIMIZED = "RAY_SERVE_THROUGHPUT_OPTIMIZED"  # Ray Serve's env switch (ServeSettings.throughput_optimized)
# Its direct ingress stays off: clients come through the proxy (replicas would open ports
# of their own, and an ingress replica would drain 35 s on every shutdown).
THROUGHPUT_ENV = {THROUGHPUT_OPTIMIZED: "1", "RAY_SERVE_ENABLE_DIRECT_INGRESS": "0"}


def set_throughput_env() -> None:
    """Ray Serve's throughput-optimized mode for the Ray processes started after this (they
    inherit the environment); a value already set there wins."""
    for k, v in THROUGHPUT_ENV.items():
        os.environ.setdefault(k, v)


def _has_scheme(uri: str) -> bool:
    return "://" in uri


def absolute_root(index_root: str) -> str:
    """Replicas run in other processes (other nodes on a cluster): a relative local path
    is made absolute here, once. URIs (``s3://``, ``file://``) pass through."""
    return index_root if _has_scheme(index_root) else str(Path(index_root).expanduser().resolve())


def wait_healthy(base_url: str, timeout_s: float = 180.0) -> None:
    import httpx

    deadline = time.monotonic() + timeout_s
    last: Exception | str = "no answer"
    while time.monotonic() < deadline:
        try:
            r = httpx.get(f"{base_url}/healthz", timeout=5)
            if r.status_code == 200:
                return
            last = f"HTTP {r.status_code}"
        except httpx.HTTPError as e:
            last = e
        time.sleep(0.25)
    raise TimeoutError(f"{base_url}/healthz did not answer 200 within {timeout_s:.0f}s ({last})")


def start(
    settings: ServeSettings,
    host: str = "127.0.0.1",
    port: int = 8000,
    address: str | None = None,
    *,
    ray_init: dict[str, Any] | None = None,
    wait_s: float = 180.0,
) -> str:
    """Deploy the application and return its base URL once ``/healthz`` answers."""
    import ray
    from ray import serve

    from .app import build_app

    app = build_app(settings)  # validates settings before anything starts
    if not ray.is_initialized():
        if settings.throughput_optimized and not address:
            set_throughput_env()
        kw: dict[str, Any] = {"namespace": settings.ray_namespace, **(ray_init or {})}
        # "local" always starts a new instance (never attaches to another one on this host).
        kw["address"] = address or "local"
        if address:
            # num_cpus and friends describe a *new* local cluster; a connect must not pass them.
            for k in ("num_cpus", "num_gpus", "include_dashboard", "object_store_memory"):
                kw.pop(k, None)
        ray.init(**kw)
    serve.start(http_options={"host": host, "port": port})
    serve.run(app, name=APP_NAME, route_prefix="/")
    base = f"http://{'127.0.0.1' if host in ('0.0.0.0', '::', '') else host}:{port}"
    wait_healthy(base, wait_s)
    return base


def stop(connected: bool = False) -> None:
    """Tear down what ``start`` set up. In-process: Serve and Ray. Connected to a shared
    cluster: only this application is deleted, then this driver disconnects."""
    import ray
    from ray import serve

    if not ray.is_initialized():
        return
    try:
        if connected:
            serve.delete(APP_NAME)
        else:
            serve.shutdown()
    finally:
        ray.shutdown()


def free_port(host: str = "127.0.0.1") -> int:
    import socket

    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]
