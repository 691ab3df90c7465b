import base64
import json
import time

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from quarry.serve.http.auth import AuthError, bearer_token, mint_token, verify_token
from quarry.serve.settings import AuthSettings

pytestmark = pytest.mark.unit

SECRET = "test-secret-of-sufficient-length-0123456789"
HS = AuthSettings(hs256_secret=SECRET)


def _rsa():
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    priv = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    pub = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    ).decode()
    return priv, pub


def test_hs256_roundtrip_and_operator_scope():
    ident = verify_token(mint_token("acme", "u1", ["eng", "eng", "support"], secret=SECRET), HS)
    assert ident.principal.tenant == "acme" and ident.principal.subject == "u1"
    assert ident.principal.groups == {"eng", "support"} and not ident.is_operator
    op = verify_token(mint_token("acme", "ops", [], secret=SECRET, scope="operator"), HS)
    assert op.is_operator


def test_rs256_roundtrip_and_forgeries():
    priv, pub = _rsa()
    rs = AuthSettings(rs256_public_key_pem=pub)
    assert verify_token(mint_token("acme", "u", ["g"], private_key_pem=priv), rs).principal.tenant == "acme"
    other_priv, _ = _rsa()
    with pytest.raises(AuthError):
        verify_token(mint_token("acme", "u", ["g"], private_key_pem=other_priv), rs)
    # classic confusion attack: HS256 signed with the public key as the secret
    payload = {"iss": "quarry-dev", "aud": "quarry", "sub": "u", "iat": int(time.time()),
               "exp": int(time.time()) + 60, "tenant": "acme", "groups": ["g"]}
    forged = (
        base64.urlsafe_b64encode(json.dumps({"alg": "HS256", "typ": "JWT"}).encode()).rstrip(b"=").decode()
        + "." + base64.urlsafe_b64encode(json.dumps(payload).encode()).rstrip(b"=").decode() + ".sig"
    )
    with pytest.raises(AuthError):
        verify_token(forged, rs)


def _claims(**over):
    now = int(time.time())
    c = {"iss": "quarry-dev", "aud": "quarry", "sub": "u", "iat": now, "exp": now + 60,
         "tenant": "acme", "groups": ["g"]}
    c.update(over)
    return {k: v for k, v in c.items() if v is not None}


@pytest.mark.parametrize(
    "token",
    [
        "",
        "not-a-jwt",
        jwt.encode(_claims(), "some-other-secret-0123456789-0123456789", algorithm="HS256"),  # forged
        jwt.encode(_claims(exp=int(time.time()) - 10), SECRET, algorithm="HS256"),  # expired
        jwt.encode(_claims(aud="other"), SECRET, algorithm="HS256"),  # wrong audience
        jwt.encode(_claims(iss="evil"), SECRET, algorithm="HS256"),  # wrong issuer
        jwt.encode(_claims(exp=None), SECRET, algorithm="HS256"),  # no exp
        jwt.encode(_claims(iat=None), SECRET, algorithm="HS256"),  # no iat
        jwt.encode(_claims(sub=None), SECRET, algorithm="HS256"),  # no sub
        jwt.encode(_claims(tenant=None), SECRET, algorithm="HS256"),  # no tenant
        jwt.encode(_claims(tenant="Bad Tenant"), SECRET, algorithm="HS256"),
        jwt.encode(_claims(groups="eng"), SECRET, algorithm="HS256"),  # not a list
        jwt.encode(_claims(groups=["*"]), SECRET, algorithm="HS256"),  # wildcard as group
        jwt.encode(_claims(), None, algorithm="none"),  # alg none
        jwt.encode(_claims(), SECRET, algorithm="HS512"),  # alg not configured
    ],
)
def test_rejected(token):
    with pytest.raises(AuthError):
        verify_token(token, HS)


def test_bearer_header_parsing():
    assert bearer_token("Bearer abc") == "abc"
    for bad in (None, "", "Basic abc", "Bearer ", "abc"):
        with pytest.raises(AuthError):
            bearer_token(bad)


def test_settings_need_a_key():
    with pytest.raises(ValueError):
        AuthSettings()


# -- exact claim types and full-match patterns ------------------------

@pytest.mark.parametrize("over", [
    {"tenant": "acme\n"},  # a "$" anchor matched before the newline
    {"tenant": "acme\r\n"},
    {"tenant": "acme "},
    {"tenant": "ACME"},
    {"tenant": "a" * 64},
    {"tenant": 7},
    {"exp": "9999999999"},  # PyJWT alone accepts numeric strings
    {"exp": True},
    {"exp": [9999999999]},
    {"iat": "0"},
    {"nbf": "0"},
    {"sub": ""},
    {"sub": "  "},
    {"sub": "u\n"},
    {"sub": " u"},
    {"sub": ["u"]},
    {"sub": "u" * 257},
    {"groups": ["eng\n"]},
    {"groups": [" eng"]},
    {"groups": [""]},
    {"groups": [1]},
    {"groups": {"eng": True}},
    {"groups": ["g%d" % i for i in range(257)]},
    {"scope": ["operator"]},
    {"scope": "operator platform"},  # the platform scope exists only in platform tokens
])
def test_claims_are_exact(over):
    tok = jwt.encode(_claims(**over), SECRET, algorithm="HS256")
    with pytest.raises(AuthError):
        verify_token(tok, HS)


def test_exact_claims_still_accept_real_identities():
    ident = verify_token(jwt.encode(_claims(sub="alice@example.com", groups=["Finance Team", "all-staff"],
                                            exp=time.time() + 60.5, tenant="acme-eu.2"), SECRET), HS)
    assert ident.principal.tenant == "acme-eu.2" and ident.principal.groups == {"Finance Team", "all-staff"}


def test_platform_credential_is_separate_from_tenant_tokens():
    from quarry.serve.http.auth import mint_platform_token, verify_platform_token

    platform_secret = "platform-secret-0123456789-0123456789-0123"
    s = AuthSettings(hs256_secret=SECRET, platform_hs256_secret=platform_secret)
    assert verify_platform_token(mint_platform_token(platform_secret), s)
    # a tenant token, even one that claims the platform audience and scope, is not one
    assert not verify_platform_token(mint_token("acme", "u", [], secret=SECRET, scope="operator"), s)
    assert not verify_platform_token(jwt.encode(_claims(aud="quarry-platform", scope="platform"), SECRET), s)
    # a platform token is not a tenant token either
    with pytest.raises(AuthError):
        verify_token(mint_platform_token(platform_secret), s)
    # right key, wrong audience or scope
    assert not verify_platform_token(mint_platform_token(platform_secret, audience="quarry"), s)
    assert not verify_platform_token(jwt.encode(_claims(aud="quarry-platform", scope="operator"), platform_secret), s)
    # not configured: nothing is a platform token
    assert not verify_platform_token(mint_platform_token(platform_secret), HS)
    with pytest.raises(ValueError):
        AuthSettings(hs256_secret=SECRET, platform_hs256_secret=SECRET)


def test_quarry_token_platform_mints_a_platform_credential(monkeypatch, capsys):
    from quarry.cli import main
    from quarry.serve.http.auth import verify_platform_token

    platform_secret = "platform-secret-0123456789-0123456789-0123"
    s = AuthSettings(hs256_secret=SECRET, platform_hs256_secret=platform_secret)
    monkeypatch.delenv("QUARRY_PLATFORM_SECRET", raising=False)
    assert main(["token", "--platform"]) == 2
    assert "QUARRY_PLATFORM_SECRET" in capsys.readouterr().err
    monkeypatch.setenv("QUARRY_PLATFORM_SECRET", platform_secret)
    assert main(["token", "--platform", "--ttl", "60"]) == 0
    tok = capsys.readouterr().out.strip()
    assert verify_platform_token(tok, s)
    with pytest.raises(AuthError):
        verify_token(tok, s)
    # a tenant token still needs its claims
    assert main(["token", "--tenant", "acme"]) == 2
    assert "--groups" in capsys.readouterr().err
    monkeypatch.setenv("QUARRY_JWT_SECRET", SECRET)
    assert main(["token", "--tenant", "acme", "--subject", "a\nb", "--groups", "x"]) == 2
