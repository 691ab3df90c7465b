"""Bearer-token verification: the only way a request gets a ``Principal``.

Tenant, subject and groups come from a signed JWT (PyJWT), never from tool input. The
accepted algorithms are fixed by configuration, never by the token header, so ``alg:
none`` and HS256-signed-with-the-RSA-public-key forgeries are rejected before decoding.
Every failure is the same ``AuthError``; the gateway answers 401 with one generic body
so a caller cannot tell an expired token from a forged one.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterable

import jwt
from pydantic import BaseModel, ConfigDict

from quarry.core.records import Principal

from .settings import AuthSettings

REQUIRED_CLAIMS = ("exp", "iat", "aud", "iss", "sub")
OPERATOR_SCOPE = "operator"  # may read its own tenant's traces and health details
ADMIN_SCOPE = "admin"  # may read health details of every loaded tenant (not their traces)
_TENANT = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,62}$")


class AuthError(Exception):
    """Any verification failure; the message is for logs only, never for the caller."""


class Identity(BaseModel):
    model_config = ConfigDict(frozen=True)

    principal: Principal
    scopes: frozenset[str] = frozenset()

    @property
    def is_operator(self) -> bool:
        return OPERATOR_SCOPE in self.scopes

    @property
    def is_admin(self) -> bool:
        return ADMIN_SCOPE in self.scopes


def _key_for(alg: str, settings: AuthSettings):
    if alg == "HS256" and settings.hs256_secret is not None:
        return settings.hs256_secret.get_secret_value()
    if alg == "RS256" and settings.rs256_public_key_pem:
        return settings.rs256_public_key_pem
    raise AuthError(f"algorithm not accepted: {alg!r}")


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
            _key_for(alg, settings),
            algorithms=[alg],
            audience=settings.audience,
            issuer=settings.issuer,
            leeway=settings.leeway_s,
            options={"require": list(REQUIRED_CLAIMS)},
        )
    except jwt.PyJWTError as e:
        raise AuthError(f"{type(e).__name__}: {e}") from None
    tenant, sub, groups = claims.get("tenant"), claims.get("sub"), claims.get("groups")
    if not isinstance(tenant, str) or not _TENANT.match(tenant):
        raise AuthError("tenant claim missing or malformed")
    if not isinstance(sub, str) or not sub.strip():
        raise AuthError("sub claim malformed")
    if not isinstance(groups, list) or not all(isinstance(g, str) and g.strip() for g in groups):
        raise AuthError("groups claim must be a list of strings")
    # "*" is an ACL wildcard in the index; a token must not grant it as a group.
    if "*" in groups:
        raise AuthError("groups claim may not contain '*'")
    scope = claims.get("scope", "")
    if not isinstance(scope, str):
        raise AuthError("scope claim must be a space-separated string")
    return Identity(
        principal=Principal(tenant=tenant, subject=sub, groups=frozenset(groups)),
        scopes=frozenset(scope.split()),
    )


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
    if secret is not None:
        return jwt.encode(claims, secret, algorithm="HS256")
    return jwt.encode(claims, private_key_pem, algorithm="RS256")
