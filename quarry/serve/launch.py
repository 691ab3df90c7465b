"""Start and stop the Serve application from Python: ``quarry serve``, ``quarry demo`` and
the load benchmark share this, so all three run the same application the same way.

``start`` connects to a Ray cluster when given an address (``auto``, ``host:6379`` or
``ray://host:10001``), else starts Ray in this process; then starts Serve's HTTP proxy on
``host:port``, deploys the application and waits until ``/healthz`` answers.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

from quarry.serve.settings import ServeSettings

APP_NAME = "quarry"
THROUGHPUT_OPTIMIZED = "RAY_SERVE_THROUGHPUT_OPTIMIZED"  # Ray Serve's env switch (ServeSettings.throughput_optimized)
DIRECT_INGRESS = "RAY_SERVE_ENABLE_DIRECT_INGRESS"  # ServeSettings.direct_ingress
DIRECT_INGRESS_DRAIN = "RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S"  # ServeSettings.direct_ingress_drain_s
THROUGHPUT_KEYS = (THROUGHPUT_OPTIMIZED, DIRECT_INGRESS, DIRECT_INGRESS_DRAIN)


def throughput_env(settings: ServeSettings | None = None) -> dict[str, str]:
    """The Ray Serve variables for ``settings`` (None: the settings' defaults); empty when
    the throughput-optimized mode is off."""
    def get(name: str) -> Any:
        return getattr(settings, name) if settings is not None else ServeSettings.model_fields[name].default

    if not get("throughput_optimized"):
        return {}
    return {THROUGHPUT_OPTIMIZED: "1", DIRECT_INGRESS: "1" if get("direct_ingress") else "0",
            DIRECT_INGRESS_DRAIN: f"{get('direct_ingress_drain_s'):g}"}


def set_throughput_env(settings: ServeSettings | None = None) -> None:
    """Ray Serve's throughput-optimized mode for the Ray processes started after this (they
    inherit the environment); a value already set there wins."""
    for k, v in throughput_env(settings).items():
        os.environ.setdefault(k, v)


ALL_INTERFACES = ("0.0.0.0", "::", "")


def _url_host(host: str) -> str:
    return "127.0.0.1" if host in ALL_INTERFACES else host


def ingress_urls(host: str = "127.0.0.1", timeout_s: float = 30.0, app_name: str = APP_NAME) -> list[str]:
    """The Gateway replicas' own HTTP addresses under direct ingress (a client calling one
    skips the proxy hop); empty when direct ingress is off. Ray assigns the ports
    (30000-31000) once a replica is up; they change when a replica is replaced, while the
    proxy's address does not. ``host``: what ``start`` was given; a replica listens there
    too, so a specific address is the one to call (all interfaces: the replica's node).
    ``app_name``: the Serve application whose Gateway replicas to list."""
    import ray
    from ray.serve._private.constants import SERVE_CONTROLLER_NAME, SERVE_NAMESPACE

    if os.environ.get(DIRECT_INGRESS) != "1":
        return []
    # Ray has no public call for this yet: the controller's target groups name the ports.
    ctl = ray.get_actor(SERVE_CONTROLLER_NAME, namespace=SERVE_NAMESPACE)
    deadline = time.monotonic() + timeout_s
    while True:
        groups = ray.get(ctl.get_target_groups.remote(app_name))
        urls = sorted(f"http://{t.ip if host in ALL_INTERFACES else host}:{t.port}"
                      for g in groups if str(g.protocol).upper().endswith("HTTP")
                      for t in g.targets if t.name.startswith("SERVE_REPLICA"))  # not the proxy fallback
        if urls or time.monotonic() > deadline:
            return urls
        time.sleep(0.25)


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


@contextlib.contextmanager
def kept_signal_handlers():
    """Keep the caller's Python SIGINT/SIGTERM handlers across ``ray.init``, which replaces
    SIGTERM's with ``sys.exit`` (and its core worker's crash handler, which aborts the
    process with SIGABRT after running it): a draining ``quarry serve`` must keep its own."""
    sigs = (signal.SIGINT, signal.SIGTERM)
    main = threading.current_thread() is threading.main_thread()
    before = {s: signal.getsignal(s) for s in sigs} if main else {}
    try:
        yield
    finally:
        for s, h in before.items():
            if callable(h) and h is not signal.default_int_handler:
                signal.signal(s, h)


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

    from quarry.serve.app import build_app

    app = build_app(settings)  # validates settings before anything starts
    if not ray.is_initialized():
        if not address:
            set_throughput_env(settings)
        kw: dict[str, Any] = {"namespace": settings.ray_namespace, **(ray_init or {})}
        # "local" always starts a new instance (never attaches to another one on this host).
        kw["address"] = address or "local"
        if address:
            # num_cpus and friends describe a *new* local cluster; a connect must not pass them.
            for k in ("num_cpus", "num_gpus", "include_dashboard", "object_store_memory"):
                kw.pop(k, None)
        with kept_signal_handlers():
            ray.init(**kw)
    serve.start(http_options={"host": host, "port": port})
    serve.run(app, name=APP_NAME, route_prefix="/")
    base = f"http://{_url_host(host)}:{port}"
    wait_healthy(base, wait_s)
    return base


def stop(connected: bool = False, drain_s: float | None = None) -> bool:
    """Tear down what ``start`` set up. In-process: Serve and Ray. Connected to a shared
    cluster: only this application is deleted, then this driver disconnects.

    Serve's shutdown drains: the proxies stop accepting and each replica finishes its
    in-flight requests (its graceful shutdown) before it stops. ``drain_s`` bounds that
    wait; past it Ray is shut down anyway. Returns whether Serve finished within it."""
    import ray
    from ray import serve

    if not ray.is_initialized():
        return True
    try:
        teardown = (lambda: serve.delete(APP_NAME)) if connected else serve.shutdown
        if drain_s is None:
            teardown()
            return True
        worker = threading.Thread(target=teardown, name="quarry-serve-drain", daemon=True)
        worker.start()
        worker.join(drain_s)
        return not worker.is_alive()
    finally:
        ray.shutdown()


def free_port(host: str = "127.0.0.1") -> int:
    import socket

    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]
