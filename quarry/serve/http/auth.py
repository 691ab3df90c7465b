"""Bearer-token verification: the only way a request gets a ``Principal``.

Tenant, subject and groups come from a signed JWT (PyJWT), never from tool input. The
accepted algorithms are fixed by configuration, never by the token header, so ``alg:
none`` and HS256-signed-with-the-RSA-public-key forgeries are rejected before decoding.
Every failure is the same ``AuthError``; the gateway answers 401 with one generic body
so a caller cannot tell an expired token from a forged one.
"""

from __future__ import annotations

import re
import threading
import time
import uuid
from collections.abc import Iterable

import jwt
from pydantic import BaseModel, ConfigDict

from quarry.core.lru import LRU
from quarry.core.records import SLUG as TENANT_PATTERN
from quarry.core.records import Principal

from quarry.serve.http.revocation import RevocationList
from quarry.serve.settings import AuthSettings

REQUIRED_CLAIMS = ("exp", "iat", "aud", "iss", "sub")
OPERATOR_SCOPE = "operator"  # may read its own tenant's traces (filtered by its groups) and health
PLATFORM_SCOPE = "platform"  # only in a platform token (own key and audience): every tenant's health
# Claims are checked with exact types and full matches (re.fullmatch: a "$" anchor would
# accept "acme\n"). Groups and subjects are opaque IdP strings, so they are bounded and
# free of control characters and surrounding space rather than held to a slug.
_OPAQUE = re.compile(r"[^\x00-\x20\x7F](?:[^\x00-\x1F\x7F]{0,254}[^\x00-\x20\x7F])?")
MAX_GROUPS = 256
_NUMERIC_CLAIMS = ("exp", "iat", "nbf")


class AuthError(Exception):
    """Any verification failure; the message is for logs only, never for the caller."""


class Identity(BaseModel):
    model_config = ConfigDict(frozen=True)

    principal: Principal
    scopes: frozenset[str] = frozenset()

    @property
    def is_operator(self) -> bool:
        return OPERATOR_SCOPE in self.scopes



def _key_for(alg: str, settings: AuthSettings, kid: object = None, now: float | None = None):
    """The one key a token may be verified with: by ``kid`` from the key set (its configured
    alg must equal the header's), else the single legacy key for ``alg`` (also when no key
    set is configured, so an IdP that sends a ``kid`` keeps working with one static key)."""
    if kid is not None and (settings.keys or settings.jwks_uri):
        key = next((k for k in settings.keys if k.kid == kid), None) if type(kid) is str else None
        if key is None and settings.jwks_uri and type(kid) is str:
            return _jwks_key(alg, kid, settings)
        if key is None:
            raise AuthError("unknown key id")
        if key.alg != alg:
            raise AuthError(f"algorithm {alg!r} not configured for this key id")
        if key.not_after is not None and (time.time() if now is None else now) > key.not_after:
            raise AuthError("key retired")
        return key.secret.get_secret_value() if key.secret is not None else key.public_key_pem
    if alg == "HS256" and settings.hs256_secret is not None:
        return settings.hs256_secret.get_secret_value()
    if alg == "RS256" and settings.rs256_public_key_pem:
        return settings.rs256_public_key_pem
    raise AuthError(f"algorithm not accepted: {alg!r}")


_JWKS: dict[tuple[str, float, float], jwt.PyJWKClient] = {}  # one client per configured source
_JWKS_LOCK = threading.Lock()


def jwks_client(settings: AuthSettings) -> jwt.PyJWKClient:
    """PyJWKClient caches the set for ``jwks_refresh_s`` and re-fetches on an unknown kid at
    most once per ``jwks_cooldown_s`` (its cooldown)."""
    src = (settings.jwks_uri, settings.jwks_refresh_s, settings.jwks_cooldown_s)
    with _JWKS_LOCK:
        client = _JWKS.get(src)
        if client is None:
            client = _JWKS[src] = jwt.PyJWKClient(settings.jwks_uri, cache_jwk_set=True, lifespan=settings.jwks_refresh_s,
                                                  cooldown_duration=settings.jwks_cooldown_s, timeout=5)
        return client


def _jwks_key(alg: str, kid: str, settings: AuthSettings):
    if alg not in settings.jwks_algorithms:
        raise AuthError(f"algorithm not accepted from the JWKS: {alg!r}")
    try:
        jwk = jwks_client(settings).get_signing_key(kid)
    except jwt.PyJWKClientError as e:
        raise AuthError(f"JWKS: {e}") from None
    if jwk.algorithm_name != alg:  # the JWK's own alg/kty must agree with the header
        raise AuthError(f"JWKS key {kid!r} is not an {alg} key")
    return jwk.key


def verify_token(token: str, settings: AuthSettings) -> Identity:
    try:
        header = jwt.get_unverified_header(token)
    except jwt.PyJWTError as e:
        raise AuthError(f"malformed token: {e}") from None
    alg = header.get("alg")
    if alg not in settings.algorithms:
        raise AuthError(f"algorithm not accepted: {alg!r}")
    try:
        claims = jwt.decode(
            token,
            _key_for(alg, settings, header.get("kid")),
            algorithms=[alg],
            audience=settings.audience,
            issuer=settings.issuer,
            leeway=settings.leeway_s,
            options={"require": list(REQUIRED_CLAIMS)},
        )
    except jwt.PyJWTError as e:
        raise AuthError(f"{type(e).__name__}: {e}") from None
    _check_numeric_claims(claims)
    tenant, sub, groups = claims.get("tenant"), claims.get("sub"), claims.get("groups")
    if not is_tenant_slug(tenant):
        raise AuthError("tenant claim missing or malformed")
    if not is_opaque_claim(sub):
        raise AuthError("sub claim malformed")
    if type(groups) is not list or len(groups) > MAX_GROUPS or not all(is_opaque_claim(g) for g in groups):
        raise AuthError("groups claim must be a list of strings")
    # "*" is an ACL wildcard in the index; a token must not grant it as a group.
    if "*" in groups:
        raise AuthError("groups claim may not contain '*'")
    scope = _scope(claims)
    if PLATFORM_SCOPE in scope:
        raise AuthError("a tenant token may not carry the platform scope")
    return Identity(
        principal=Principal(tenant=tenant, subject=sub, groups=frozenset(groups)),
        scopes=scope,
    )


def is_tenant_slug(value: object) -> bool:
    return type(value) is str and TENANT_PATTERN.fullmatch(value) is not None


def is_opaque_claim(value: object) -> bool:
    return type(value) is str and _OPAQUE.fullmatch(value) is not None


def _check_numeric_claims(claims: dict) -> None:
    """``exp``/``iat``/``nbf`` must be JSON numbers: PyJWT also accepts ``"exp": "1999999999"``."""
    for name in _NUMERIC_CLAIMS:
        if name in claims and (type(claims[name]) not in (int, float) or claims[name] != claims[name]):
            raise AuthError(f"{name} claim must be a number")


def _scope(claims: dict) -> frozenset[str]:
    scope = claims.get("scope", "")
    if type(scope) is not str or len(scope) > 1000:
        raise AuthError("scope claim must be a space-separated string")
    return frozenset(scope.split())


def verify_platform_token(token: str, settings: AuthSettings) -> bool:
    """Whether ``token`` is a platform credential: HS256 under ``platform_hs256_secret``
    with ``platform_audience`` and the platform scope. Tenant tokens are signed with
    another key for another audience, so none passes; any failure is just ``False``."""
    if settings.platform_hs256_secret is None:
        return False
    try:
        if jwt.get_unverified_header(token).get("alg") != "HS256":
            return False
        claims = jwt.decode(token, settings.platform_hs256_secret.get_secret_value(), algorithms=["HS256"],
                            audience=settings.platform_audience, issuer=settings.issuer, leeway=settings.leeway_s,
                            options={"require": list(REQUIRED_CLAIMS)})
        _check_numeric_claims(claims)
        return PLATFORM_SCOPE in _scope(claims) and is_opaque_claim(claims.get("sub"))
    except (jwt.PyJWTError, AuthError):
        return False


def bearer_token(authorization: str | None) -> str:
    if not authorization:
        raise AuthError("no Authorization header")
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise AuthError("not a bearer token")
    return token.strip()


def mint_token(
    tenant: str,
    subject: str,
    groups: Iterable[str],
    *,
    ttl_s: int = 3600,
    audience: str = "quarry",
    issuer: str = "quarry-dev",
    secret: str | None = None,
    private_key_pem: str | None = None,
    scope: str | None = None,
    now: int | None = None,
    kid: str | None = None,
) -> str:
    """A development token: HS256 with ``secret`` or RS256 with ``private_key_pem``."""
    if (secret is None) == (private_key_pem is None):
        raise ValueError("give exactly one of secret or private_key_pem")
    iat = int(time.time()) if now is None else now
    claims = {
        "iss": issuer,
        "aud": audience,
        "sub": subject,
        "iat": iat,
        "exp": iat + ttl_s,
        "jti": uuid.uuid4().hex,
        "tenant": tenant,
        "groups": sorted(set(groups)),
    }
    if scope:
        claims["scope"] = scope
    headers = {"kid": kid} if kid else None
    if secret is not None:
        return jwt.encode(claims, secret, algorithm="HS256", headers=headers)
    return jwt.encode(claims, private_key_pem, algorithm="RS256", headers=headers)


def mint_platform_token(secret: str, subject: str = "platform", *, ttl_s: int = 600,
                        audience: str = "quarry-platform", issuer: str = "quarry-dev") -> str:
    """A platform credential for the cross-tenant health view (no tenant, no groups)."""
    iat = int(time.time())
    claims = {"iss": issuer, "aud": audience, "sub": subject, "iat": iat, "exp": iat + ttl_s,
              "jti": uuid.uuid4().hex, "scope": PLATFORM_SCOPE}
    return jwt.encode(claims, secret, algorithm="HS256")


class CachedVerifier:
    """Bearer-token verification that remembers a verified token for at most
    ``settings.token_cache_s`` and never past its ``exp`` (signature checks are the largest
    fixed cost of a request; a cached entry is only ever a token that passed every check).
    Keyed by the whole token, which carries its tenant and groups. One per Gateway replica,
    shared by REST and MCP. ``clock`` is injectable for tests."""

    def __init__(self, settings: AuthSettings, capacity: int = 4096, clock=time.time):
        self.settings = settings
        self._clock = clock
        self._verified: LRU[str, tuple[Identity, float, object, float]] = LRU(capacity)
        self.revocations = (RevocationList(settings.revocation_uri, settings.revocation_check_s, clock)
                            if settings.revocation_uri else None)

    def verify(self, token: str) -> Identity:
        now = self._clock()
        hit = self._verified.get(token)
        if hit is None or now >= hit[1]:
            ident = verify_token(token, self.settings)
            claims = jwt.decode(token, options={"verify_signature": False})
            until = min(float(claims["exp"]) + self.settings.leeway_s, now + self.settings.token_cache_s)
            hit = (ident, until, claims.get("jti"), float(claims["iat"]))
            if until > now:
                self._verified.put(token, hit)
        ident = hit[0]
        if self.revocations is not None and self.revocations.revoked(
                hit[2], ident.principal.tenant, ident.principal.subject, hit[3]):
            raise AuthError("token revoked")
        return ident
