"""Revocation within a stated time: a jti or a subject cut-off written to the list stops a
token (cached or not) within revocation_check_s (injected clock, no sleeps)."""

from __future__ import annotations

import time

import jwt
import pytest

from quarry.serve.http.auth import AuthError, CachedVerifier, mint_token
from quarry.serve.http.revocation import add_revocation
from quarry.serve.settings import AuthSettings

pytestmark = pytest.mark.unit

SECRET = "r" * 40


def _verifier(uri: str, now: list[float]) -> CachedVerifier:
    s = AuthSettings(hs256_secret=SECRET, token_cache_s=30, revocation_uri=uri, revocation_check_s=10)
    return CachedVerifier(s, clock=lambda: now[0])


def test_revoked_jti_stops_within_revocation_check_s(tmp_path):
    uri = f"file://{tmp_path}/_auth/revocations.json"
    now = [time.time()]
    v = _verifier(uri, now)
    tok, other = (mint_token("acme", "alice", ["g"], secret=SECRET) for _ in range(2))
    v.verify(tok), v.verify(other)  # no list yet: nothing revoked
    add_revocation(uri, jti=jwt.decode(tok, options={"verify_signature": False})["jti"])
    now[0] += 9
    assert v.verify(tok).principal.subject == "alice"  # not re-read yet: within the bound
    now[0] += 2
    with pytest.raises(AuthError, match="revoked"):
        v.verify(tok)  # still in the token cache, refused all the same
    assert v.verify(other).principal.subject == "alice"  # another jti is unaffected


def test_subject_revoked_before_t(tmp_path):
    uri = str(tmp_path / "rev.json")
    now = [time.time()]
    v = _verifier(uri, now)
    t_old = int(time.time()) - 100
    old = mint_token("acme", "bob", [], secret=SECRET, now=t_old)
    fresh = mint_token("acme", "bob", [], secret=SECRET)
    globex_bob = mint_token("globex", "bob", [], secret=SECRET, now=t_old)
    add_revocation(uri, tenant="acme", subject="bob", before=t_old + 1)
    with pytest.raises(AuthError):
        v.verify(old)
    assert v.verify(fresh).principal.subject == "bob"
    assert v.verify(globex_bob).principal.tenant == "globex"  # the cut-off is per tenant


def test_add_revocation_validates():
    with pytest.raises(ValueError):
        add_revocation("memory://x.json")
    with pytest.raises(ValueError):
        add_revocation("memory://x.json", subject="bob")


def test_quarry_token_revoke_cli(tmp_path, capsys):
    import json

    from quarry.cli import main

    uri = str(tmp_path / "rev.json")
    assert main(["token", "--revoke-jti", "abc", "--revocation-uri", uri]) == 0
    assert main(["token", "--revoke-subject", "--tenant", "acme", "--subject", "bob", "--revocation-uri", uri]) == 0
    data = json.loads((tmp_path / "rev.json").read_text())
    assert data["jti"] == ["abc"] and "acme/bob" in data["subjects"]
    assert main(["token", "--revoke-jti", "abc"]) == 2  # no --revocation-uri: one-line error, exit 2
    assert "revocation-uri" in capsys.readouterr().err
