"""The rotating key set: a token's ``kid`` picks exactly one configured key, whose alg is
fixed by configuration; overlapping keys during rotation; removed and retired keys."""

from __future__ import annotations

import time

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from quarry.serve.http.auth import AuthError, CachedVerifier, mint_token, verify_token
from quarry.serve.settings import AuthSettings, VerificationKey

pytestmark = pytest.mark.unit

OLD, NEW = "o" * 40, "n" * 40
K_OLD = VerificationKey(kid="2026-01", alg="HS256", secret=OLD)
K_NEW = VerificationKey(kid="2026-02", alg="HS256", secret=NEW)


def _tok(secret: str, kid: str | None) -> str:
    return mint_token("acme", "alice", ["all-staff"], secret=secret, kid=kid)


def test_kid_selects_the_key_and_overlapping_keys_both_verify():
    both = AuthSettings(keys=(K_OLD, K_NEW))
    assert verify_token(_tok(OLD, "2026-01"), both).principal.tenant == "acme"
    assert verify_token(_tok(NEW, "2026-02"), both).principal.subject == "alice"
    with pytest.raises(AuthError):  # the right kid names one key only: the other secret fails
        verify_token(_tok(NEW, "2026-01"), both)


def test_unknown_and_removed_kid_are_refused():
    new_only = AuthSettings(keys=(K_NEW,))
    for tok in (_tok(OLD, "2026-01"), _tok(NEW, "nope"), _tok(OLD, None)):
        with pytest.raises(AuthError):
            verify_token(tok, new_only)


def test_retired_key_verifies_nothing_after_not_after():
    retired = VerificationKey(kid="2026-01", alg="HS256", secret=OLD, not_after=time.time() - 1)
    with pytest.raises(AuthError, match="retired"):
        verify_token(_tok(OLD, "2026-01"), AuthSettings(keys=(retired, K_NEW)))


def test_single_legacy_key_still_works_with_and_without_kid():
    legacy = AuthSettings(hs256_secret=OLD)
    assert verify_token(_tok(OLD, None), legacy).principal.tenant == "acme"
    assert verify_token(_tok(OLD, "idp-key"), legacy).principal.tenant == "acme"


def test_alg_is_fixed_by_the_key_not_the_header():
    priv = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = priv.public_key().public_bytes(serialization.Encoding.PEM,
                                         serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    s = AuthSettings(keys=(VerificationKey(kid="rsa", alg="RS256", public_key_pem=pem),))
    now = int(time.time())
    claims = {"iss": "quarry-dev", "aud": "quarry", "sub": "x", "iat": now, "exp": now + 60,
              "tenant": "acme", "groups": []}
    forged = jwt.encode(claims, "k" * 40, algorithm="HS256", headers={"kid": "rsa"})  # HS256 under an RS256 kid
    with pytest.raises(AuthError):
        verify_token(forged, s)
    none = jwt.encode(claims, None, algorithm="none", headers={"kid": "rsa"})
    with pytest.raises(AuthError):
        verify_token(none, s)


def test_es256_key():
    priv = ec.generate_private_key(ec.SECP256R1())
    pem = priv.public_key().public_bytes(serialization.Encoding.PEM,
                                         serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    now = int(time.time())
    claims = {"iss": "quarry-dev", "aud": "quarry", "sub": "x", "iat": now, "exp": now + 60,
              "tenant": "acme", "groups": ["g"]}
    tok = jwt.encode(claims, priv, algorithm="ES256", headers={"kid": "ec"})
    s = AuthSettings(keys=(VerificationKey(kid="ec", alg="ES256", public_key_pem=pem),))
    assert verify_token(tok, s).principal.groups == frozenset({"g"})


def test_key_settings_are_validated():
    with pytest.raises(ValueError):
        VerificationKey(kid="a", alg="HS256", public_key_pem="x")
    with pytest.raises(ValueError):
        AuthSettings(keys=(K_OLD, VerificationKey(kid="2026-01", alg="HS256", secret=NEW)))


def test_rotation_old_new_then_new_through_one_cached_verifier():
    """{old} -> {old,new} -> {new}: valid tokens never refused; the old token stops within
    token_cache_s once its key is removed (injected clock)."""
    now = [time.time()]
    v = CachedVerifier(AuthSettings(keys=(K_OLD,), token_cache_s=30), clock=lambda: now[0])
    old_t, new_t = _tok(OLD, "2026-01"), _tok(NEW, "2026-02")
    v.verify(old_t)
    v.settings = AuthSettings(keys=(K_OLD, K_NEW), token_cache_s=30)
    v.verify(old_t), v.verify(new_t)
    v.settings = AuthSettings(keys=(K_NEW,), token_cache_s=30)
    v.verify(new_t)
    now[0] += 31
    v.verify(new_t)
    with pytest.raises(AuthError):
        v.verify(old_t)


def test_a_configured_key_set_adds_no_dev_secret(monkeypatch):
    from quarry.serve.settings import settings_from_args

    monkeypatch.delenv("QUARRY_JWT_SECRET", raising=False)
    s = settings_from_args({"index_root": "/tmp/x", "auth": {"keys": [{"kid": "k", "alg": "HS256", "secret": NEW}]}})
    assert s.auth.hs256_secret is None and s.auth.algorithms == ("HS256",)
    with pytest.raises(AuthError):  # no kid: no legacy key to fall back on
        verify_token(_tok(NEW, None), s.auth)
    assert verify_token(_tok(NEW, "k"), s.auth).principal.tenant == "acme"
