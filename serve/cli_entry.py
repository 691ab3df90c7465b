"""Entry points the ``quarry`` CLI wires to ``quarry serve`` and ``quarry token``."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any


def _config_args(config: str | None) -> dict[str, Any]:
    if not config:
        return {}
    import yaml

    data = yaml.safe_load(Path(config).read_text()) or {}
    # Accept either a flat args mapping or a full Serve config file.
    apps = data.get("applications")
    return dict(apps[0].get("args", {})) if apps else dict(data)


def serve_main(index_root: str, host: str = "127.0.0.1", port: int = 8000, config: str | None = None) -> None:
    """Start Ray (in-process, or the cluster at ``RAY_ADDRESS``) and serve until interrupted."""
    import ray
    from ray import serve

    from .app import build_app

    args = {**_config_args(config), "index_root": index_root}
    app = build_app(args)  # validate settings before starting anything
    ray.init(address=os.environ.get("RAY_ADDRESS"), namespace=args.get("ray_namespace", "quarry"),
             ignore_reinit_error=True)
    serve.start(http_options={"host": host, "port": port})
    serve.run(app, name="quarry", route_prefix="/")
    print(f"quarry serving {index_root} on http://{host}:{port} (docs at /docs); Ctrl-C to stop", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        serve.shutdown()


def token_main(tenant: str, subject: str, groups: str | list[str], ttl: int = 3600, scope: str | None = None,
               audience: str = "quarry", issuer: str = "quarry-dev") -> str:
    """Print and return a development token signed with the local key: RS256 when
    ``QUARRY_JWT_PRIVATE_KEY_FILE`` is set, else the HS256 dev secret ``quarry serve`` uses."""
    from .auth import mint_token
    from .settings import load_dev_secret

    gs = [g.strip() for g in groups.split(",")] if isinstance(groups, str) else list(groups)
    gs = [g for g in gs if g]
    key_file = os.environ.get("QUARRY_JWT_PRIVATE_KEY_FILE")
    if key_file:
        tok = mint_token(tenant, subject, gs, ttl_s=ttl, audience=audience, issuer=issuer, scope=scope,
                         private_key_pem=Path(key_file).read_text())
    else:
        tok = mint_token(tenant, subject, gs, ttl_s=ttl, audience=audience, issuer=issuer, scope=scope,
                         secret=load_dev_secret())
    print(tok)
    return tok
