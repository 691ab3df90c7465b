"""Where a search's time goes over HTTP: medians of the ``Server-Timing`` header over
sequential searches against a built index.

    python -m quarry.eval.profile_serve --index-root var/demo-index [--requests 120]
"""

from __future__ import annotations

import argparse
import statistics
import time


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--index-root", required=True, help="an index built from the sample corpus (e.g. by quarry demo)")
    ap.add_argument("--requests", type=int, default=120, help="searches; the first 20 warm up and are not counted")
    ap.add_argument("--port", type=int, default=8411)
    args = ap.parse_args(argv)

    import httpx

    from quarry.eval import serve_load as b
    from quarry.serve import launch
    from quarry.serve.http.auth import mint_token
    from quarry.serve.settings import AuthSettings, ServeSettings

    secret = "profile-" * 5
    settings = ServeSettings(index_root=args.index_root, auth=AuthSettings(hs256_secret=secret),
                             ray_namespace="quarry-profile", store_name_prefix="quarry-profile")
    base = launch.start(settings, "127.0.0.1", args.port, ray_init={
        "num_cpus": 2, "include_dashboard": False, "log_to_driver": False, "configure_logging": False})
    try:
        client = httpx.Client(base_url=base, timeout=60)
        tokens = {t: mint_token(t, "profile", b.GROUPS, secret=secret, ttl_s=3600) for t in b.QUERIES}
        parts: dict[str, list[float]] = {}
        totals = []
        for i, (tenant, query) in enumerate(b.workload(args.requests)):
            h = {"Authorization": f"Bearer {tokens[tenant]}"}
            h["X-Quarry-Run"] = client.post("/v1/runs", headers=h).json()["run_id"]
            t0 = time.perf_counter()
            r = client.post("/v1/search", headers=h, json={"query": query, "top_k": b.TOP_K})
            ms = (time.perf_counter() - t0) * 1000
            if i < 20:
                continue
            totals.append(ms)
            for item in r.headers["server-timing"].split(", "):
                name, dur = item.split(";dur=")
                parts.setdefault(name, []).append(float(dur))
        print(f"| part | median ms |\n| --- | ---: |\n| client-measured total | {statistics.median(totals):.1f} |")
        for name, xs in parts.items():
            print(f"| {name} | {statistics.median(xs):.1f} |")
    finally:
        launch.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
