"""Key rotation and revocation end to end on a running Serve application (issue 23 item 3).

A second application on the session's Serve instance verifies tokens against
``auth.jwks_uri``: a real local HTTP JWKS server that this test rotates, {k1} -> {k1, k2} ->
{k2}. Each of the two Gateway replicas is called on its own port (direct ingress), so every
replica is seen to admit and to refuse. A background thread searches throughout with a
token of a key that is published at that moment: it must see only 200s (no downtime). A
revoked ``jti`` then stops on every replica while another token of the same key continues.

The bounds are short here (``token_cache_s`` 1 s, ``jwks_refresh_s`` 2 s,
``revocation_check_s`` 1 s); each wait polls with a generous deadline, and the measured times
are printed (``-s``), not asserted.
"""

from __future__ import annotations

import itertools
import json
import threading
import time

import httpx
import jwt
import pytest

from helpers.jwks import jwks_server
from test_quotas import deploy

pytestmark = [pytest.mark.serve, pytest.mark.slow]

NAME = "rotation"
TOKEN_CACHE_S, JWKS_REFRESH_S, REVOCATION_CHECK_S = 1.0, 2.0, 1.0
SLACK_S = 30.0  # the deadline of each wait beyond its bound: replicas share two loaded cores
QUERY = "settlement window"


class _Key:
    def __init__(self, kid: str):
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import rsa

        self.kid = kid
        priv = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.pem = priv.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption()).decode()
        self.jwk = {**json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(priv.public_key())),
                    "kid": kid, "use": "sig", "alg": "RS256"}

    def token(self, subject: str) -> str:
        from quarry.serve.http.auth import mint_token

        return mint_token("acme", subject, ["support"], private_key_pem=self.pem, kid=self.kid)


@pytest.fixture(scope="module")
def jwks():
    with jwks_server() as (url, state):
        yield url, state


@pytest.fixture(scope="module")
def rotating(quarry_app, tmp_path_factory, jwks):
    from ray import serve

    from quarry.serve import launch
    from quarry.serve.settings import AuthSettings

    url, state = jwks
    k1 = _Key("k1")
    state["keys"] = [k1.jwk]  # published before the app starts: k1 only
    revocations = str(tmp_path_factory.mktemp("rotation-auth") / "revocations.json")
    auth = AuthSettings(jwks_uri=url, jwks_refresh_s=JWKS_REFRESH_S, jwks_cooldown_s=0, token_cache_s=TOKEN_CACHE_S,
                        revocation_uri=revocations, revocation_check_s=REVOCATION_CHECK_S)
    proxy = deploy(quarry_app, tmp_path_factory, NAME, auth=auth, gateway_replicas=2, runs_open_per_subject=5000)
    urls = launch.ingress_urls("127.0.0.1", app_name=NAME)
    replicas = [httpx.Client(base_url=f"{u}/{NAME}", timeout=60) for u in urls]  # a replica's port keeps the prefix
    assert [c.get("/healthz").status_code for c in replicas] == [200] * len(urls)
    yield k1, state, revocations, proxy, replicas
    for c in (proxy, *replicas):
        c.close()
    serve.delete(NAME)


def _search(http: httpx.Client, tok: str) -> int:
    """Open a run and search once in it; the first status that is not 200, else 200."""
    h = {"Authorization": f"Bearer {tok}"}
    r = http.post("/v1/runs", headers=h)
    if r.status_code != 200:
        return r.status_code
    r = http.post("/v1/search", headers={**h, "X-Quarry-Run": r.json()["run_id"]}, json={"query": QUERY, "top_k": 2})
    return r.status_code


def _wait_for(cond, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            pytest.fail("the background searcher made no progress")
        time.sleep(0.05)


def _refused_everywhere(replicas, tok: str, bound_s: float, since: float) -> float:
    """Poll until every replica answers 401 to ``tok`` (opening a run); seconds since ``since``."""
    deadline = since + bound_s + SLACK_S
    while time.monotonic() < deadline:
        codes = [c.post("/v1/runs", headers={"Authorization": f"Bearer {tok}"}).status_code for c in replicas]
        if codes == [401] * len(replicas):
            return time.monotonic() - since
        assert set(codes) <= {200, 401}, codes
        time.sleep(0.1)
    pytest.fail(f"still admitted {bound_s + SLACK_S:.0f} s after the change (bound {bound_s} s)")


def test_jwks_rotation_and_revocation_without_downtime(rotating):
    from quarry.serve.http.revocation import add_revocation

    k1, state, revocations, proxy, replicas = rotating
    assert len(replicas) == 2, "direct ingress lists each Gateway replica"
    t1 = k1.token("rot-user")
    assert [_search(c, t1) for c in replicas] == [200, 200]  # k1 only: k1 tokens search on each replica

    # The background searcher: a fresh subject per search (one run each), signed by `signer`,
    # a key that is published whenever the main thread changes it.
    signer = [k1]
    stop, codes, lock = threading.Event(), [], threading.Lock()

    def background():
        with httpx.Client(base_url=str(proxy.base_url), timeout=60) as http:
            for n in itertools.count():
                if stop.is_set():
                    return
                code = _search(http, signer[0].token(f"bg-{n}"))
                with lock:
                    codes.append(code)

    bg = threading.Thread(target=background, daemon=True)
    bg.start()
    try:
        k2 = _Key("k2")
        state["keys"] = [k1.jwk, k2.jwk]  # overlap: {k1, k2}
        t2 = k2.token("rot-user")
        assert [_search(c, t2) for c in replicas] == [200, 200]  # an unknown kid re-fetches the set
        assert [_search(c, t1) for c in replicas] == [200, 200]  # k1 still verifies
        signer[0] = k2  # the issuer signs with k2 from now on...
        at_switch = len(codes)
        _wait_for(lambda: len(codes) >= at_switch + 2)  # no k1-signed background search left in flight
        removed = time.monotonic()
        state["keys"] = [k2.jwk]  # ...and k1 leaves the set
        k1_gone_s = _refused_everywhere(replicas, t1, JWKS_REFRESH_S + TOKEN_CACHE_S, removed)
        assert [_search(c, t2) for c in replicas] == [200, 200]  # k2 continues

        other = k2.token("rot-other")  # same key, another jti
        assert [_search(c, other) for c in replicas] == [200, 200]
        revoked_at = time.monotonic()
        add_revocation(revocations, jti=jwt.decode(t2, options={"verify_signature": False})["jti"])
        revoked_s = _refused_everywhere(replicas, t2, REVOCATION_CHECK_S, revoked_at)
        assert [_search(c, other) for c in replicas] == [200, 200]  # only the revoked jti stops
        time.sleep(0.5)
    finally:
        stop.set()
        bg.join(timeout=120)
    assert len(codes) >= 5 and set(codes) == {200}, codes  # every background search succeeded
    print(f"\nrotation on the running app: k1 refused on both replicas {k1_gone_s:.2f} s after removal "
          f"(bound jwks_refresh_s + token_cache_s = {JWKS_REFRESH_S + TOKEN_CACHE_S:.0f} s); revoked jti refused "
          f"{revoked_s:.2f} s after the write (bound revocation_check_s = {REVOCATION_CHECK_S:.0f} s); "
          f"background searches: {len(codes)}, all 200; JWKS fetches: {state['fetches']}")
