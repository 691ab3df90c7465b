"""Keys from a JWKS served by a real local HTTP server whose content rotates: kid selection,
refresh on an unknown kid (rate-limited by the cooldown), removed keys, alg confusion."""

from __future__ import annotations

import json
import time

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from helpers.jwks import jwks_server as serve_jwks
from quarry.serve.http.auth import AuthError, verify_token
from quarry.serve.settings import AuthSettings

pytestmark = pytest.mark.unit


def _rsa():
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _jwk(priv, kid):
    d = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(priv.public_key()))
    return {**d, "kid": kid, "use": "sig", "alg": "RS256"}


def _tok(priv, kid, alg="RS256"):
    now = int(time.time())
    claims = {"iss": "quarry-dev", "aud": "quarry", "sub": "alice", "iat": now, "exp": now + 300,
              "tenant": "acme", "groups": ["all-staff"]}
    return jwt.encode(claims, priv, algorithm=alg, headers={"kid": kid})


@pytest.fixture
def jwks_server():
    with serve_jwks() as (url, state):
        yield url, state


def test_jwks_rotation_refresh_and_removed_key(jwks_server):
    url, state = jwks_server
    old, new = _rsa(), _rsa()
    state["keys"] = [_jwk(old, "old")]
    # cooldown 0: an unknown kid re-fetches at once; refresh long, so only unknown kids fetch
    s = AuthSettings(jwks_uri=url, jwks_refresh_s=3600, jwks_cooldown_s=0)
    assert verify_token(_tok(old, "old"), s).principal.tenant == "acme"
    state["keys"] = [_jwk(old, "old"), _jwk(new, "new")]  # {old} -> {old, new}
    assert verify_token(_tok(new, "new"), s).principal.subject == "alice"  # unknown kid: one refresh
    assert verify_token(_tok(old, "old"), s).principal.tenant == "acme"  # overlap: both verify
    state["keys"] = [_jwk(new, "new")]  # -> {new}
    s2 = AuthSettings(jwks_uri=url + "?v=2", jwks_refresh_s=3600, jwks_cooldown_s=0)  # a replica that re-fetches
    assert verify_token(_tok(new, "new"), s2).principal.tenant == "acme"
    with pytest.raises(AuthError):
        verify_token(_tok(old, "old"), s2)  # removed key refused
    with pytest.raises(AuthError):
        verify_token(_tok(_rsa(), "never"), s2)


def test_unknown_kid_refetches_at_most_once_per_cooldown(jwks_server):
    url, state = jwks_server
    k = _rsa()
    state["keys"] = [_jwk(k, "a")]
    s = AuthSettings(jwks_uri=url + "?cool", jwks_refresh_s=3600, jwks_cooldown_s=60)
    verify_token(_tok(k, "a"), s)
    before = state["fetches"]
    for i in range(5):
        with pytest.raises(AuthError):
            verify_token(_tok(_rsa(), f"bogus-{i}"), s)
    assert state["fetches"] - before <= 1


def test_jwks_alg_is_fixed_by_configuration(jwks_server):
    url, state = jwks_server
    k = _rsa()
    state["keys"] = [_jwk(k, "a")]
    s = AuthSettings(jwks_uri=url + "?alg", jwks_cooldown_s=0)
    now = int(time.time())
    claims = {"iss": "quarry-dev", "aud": "quarry", "sub": "x", "iat": now, "exp": now + 60, "tenant": "acme",
              "groups": []}
    forged = jwt.encode(claims, "k" * 40, algorithm="HS256", headers={"kid": "a"})  # HS256 under an RS256 kid
    with pytest.raises(AuthError):
        verify_token(forged, s)
    with pytest.raises(AuthError):
        verify_token(jwt.encode(claims, None, algorithm="none", headers={"kid": "a"}), s)
