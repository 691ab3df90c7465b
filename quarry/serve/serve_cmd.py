"""``quarry serve``: start Ray (in this process, or connect to a cluster) and serve the
Quarry application until interrupted.

The same application deploys without this command: ``serve run
quarry.serve.app:build_app index_root=...`` or ``serve deploy infra/serve/quarry-serve.yaml``.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

EPILOG = """\
examples:
  quarry serve --index-root var/demo-index
  quarry serve --index-root s3://bucket/indexes --config infra/serve/quarry-serve.yaml \\
      --address auto --host 0.0.0.0

Tokens: `quarry token --tenant acme --subject alice --groups all-staff` mints one signed
with the same local key (QUARRY_JWT_SECRET, else $QUARRY_HOME/dev-jwt-secret). For
RS256, set `jwt_public_key_file` in the config (or QUARRY_JWT_PUBLIC_KEY_FILE).
OpenAPI docs: http://HOST:PORT/docs; agent tool schemas: GET /v1/tools.

Stopping: SIGTERM (how Kubernetes stops a pod) or SIGINT drains and exits 0: Serve stops
accepting, in-flight requests finish (at most --drain-s), Serve and Ray shut down.
"""


def config_args(config: str | None) -> dict[str, Any]:
    """Application args from ``--config``: a flat mapping of ServeSettings fields, or a Serve
    config file (the first application's ``args``, as in infra/serve/quarry-serve.yaml)."""
    if not config:
        return {}
    import yaml

    data = yaml.safe_load(Path(config).read_text()) or {}
    if not isinstance(data, dict):
        raise ValueError(f"{config}: expected a mapping")
    apps = data.get("applications")
    if apps:
        mine = [a for a in apps if a.get("import_path", "").startswith("quarry.serve.app")] or apps
        out = dict(mine[0].get("args") or {})
        # The config's per-deployment options (autoscaling from `quarry plan`) apply here too,
        # as `serve deploy` would apply them.
        planned = {d["name"]: {k: v for k, v in d.items() if k != "name"} for d in mine[0].get("deployments") or []}
        if planned:
            out.setdefault("deployment_options", planned)
        return out
    return dict(data)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = EPILOG
    p.add_argument("--index-root", required=True,
                   help="where published per-tenant indexes live: a local path or fsspec URI (s3://...). "
                        "Each tenant's CURRENT is re-read, so new generations are served without a restart")
    p.add_argument("--host", default="127.0.0.1",
                   help="interface for the HTTP proxy (default 127.0.0.1; 0.0.0.0 to accept remote callers)")
    p.add_argument("--port", type=int, default=8000, help="HTTP port (default 8000)")
    p.add_argument("--config", default=None,
                   help="YAML with ServeSettings fields (replicas, reranker, run_budget, top_k_ceiling, "
                        "candidate_width_ceiling, auth keys...), flat or as a Serve config file whose "
                        "first application's args are used; --index-root overrides its index_root")
    p.add_argument("--address", default=None,
                   help="Ray cluster to join ('auto', 'HOST:6379' or 'ray://HOST:10001'); default: "
                        "$RAY_ADDRESS, else start Ray in this process")
    p.add_argument("--drain-s", type=float, default=30.0,
                   help="on SIGTERM/SIGINT, seconds to let in-flight requests finish before Ray is shut down "
                        "(default 30; keep it under the pod's terminationGracePeriodSeconds)")


def _on_stop_signals(stop: threading.Event) -> None:
    """SIGINT and SIGTERM set ``stop``. Called again after ``ray.init``, which installs its
    own SIGTERM handler (``sys.exit``) that would skip the drain and Ray's shutdown."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda signum, _frame: stop.set())


def run(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from quarry.serve import launch
    from quarry.serve.settings import settings_from_args

    try:
        data = {**config_args(args.config), "index_root": launch.absolute_root(args.index_root)}
        settings = settings_from_args(data)
        if "://" not in settings.index_root and not os.path.isdir(settings.index_root):
            raise ValueError(f"index root {settings.index_root} does not exist; build one with `quarry build`")
    except (OSError, ValueError, ValidationError) as e:
        print(f"quarry serve: error: {e}", file=sys.stderr)
        return 2
    address = args.address or os.environ.get("RAY_ADDRESS") or None
    where = f"Ray cluster at {address}" if address else "Ray in this process"
    print(f"quarry serve: starting {where}; index root {settings.index_root}", flush=True)
    stop = threading.Event()
    _on_stop_signals(stop)
    try:
        base = launch.start(settings, args.host, args.port, address)
    except (Exception, SystemExit) as e:  # noqa: BLE001 - startup failures (and Ray's SIGTERM exit) are reported
        if isinstance(e, SystemExit):
            print("quarry serve: stopped by a signal while starting", file=sys.stderr)
        else:
            print(f"quarry serve: failed to start: {type(e).__name__}: {e}", file=sys.stderr)
        launch.stop(connected=bool(address), drain_s=args.drain_s)
        return 0 if isinstance(e, SystemExit) else 1
    _on_stop_signals(stop)  # ray.init replaced the SIGTERM handler
    print(f"quarry serve: serving on {base} (docs {base}/docs, tools {base}/v1/tools, health {base}/healthz); "
          "Ctrl-C to stop", flush=True)
    direct = launch.ingress_urls(args.host, timeout_s=10) if not address else []
    if direct:
        print(f"quarry serve: Gateway replicas also answer directly (no proxy hop) on {', '.join(direct)}; "
              "these ports change when a replica is replaced", flush=True)
    try:
        while not stop.wait(0.5):
            pass
    finally:
        print(f"quarry serve: shutting down (draining up to {args.drain_s:g}s)", flush=True)
        # On a shared cluster, delete our application but leave the cluster's Serve alone.
        drained = launch.stop(connected=bool(address), drain_s=args.drain_s)
        print("quarry serve: stopped" + ("" if drained else f" (Serve did not drain within {args.drain_s:g}s)"),
              flush=True)
    return 0


def serve_main(index_root: str, host: str = "127.0.0.1", port: int = 8000, config: str | None = None,
               address: str | None = None, drain_s: float = 30.0) -> int:
    """Programmatic form of ``quarry serve`` (blocks until SIGINT/SIGTERM)."""
    return run(argparse.Namespace(index_root=index_root, host=host, port=port, config=config, address=address,
                                  drain_s=drain_s))
