"""``quarry token``: mint a development bearer token for ``quarry serve``.

The token carries who is searching (tenant, subject, groups, optional scope); the server
takes the principal only from a verified token, never from tool input. Signed with HS256
and the local development secret that ``quarry serve`` also reads (``QUARRY_JWT_SECRET``,
else ``$QUARRY_HOME/dev-jwt-secret``, created on first use with mode 0600), or with RS256
when a private key file is given. In production an identity provider mints tokens and the
server holds only its public key.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

EPILOG = """\
examples:
  quarry token --tenant acme --subject alice --groups all-staff,support
  quarry token --tenant acme --subject ops --groups '' --scope operator --ttl 600
  QUARRY_PLATFORM_SECRET=... quarry token --platform --ttl 600
  curl -H "Authorization: Bearer $(quarry token --tenant acme --subject alice --groups all-staff)" \\
       -X POST http://127.0.0.1:8000/v1/runs
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.description = (p.description or "") + (
        ". Prints a JWT signed with the local development key (the one `quarry serve` verifies with).")
    p.epilog = EPILOG
    p.add_argument("--tenant", help="tenant the token is for (lowercase slug, e.g. acme); required unless --platform")
    p.add_argument("--subject", help="the user or agent identity (the JWT 'sub' claim)")
    p.add_argument("--groups",
                   help="comma-separated access groups, e.g. all-staff,support ('' for none; '*' is not allowed); "
                        "required unless --platform")
    p.add_argument("--platform", action="store_true",
                   help="mint a platform credential instead (every tenant's /healthz detail), signed with "
                        "$QUARRY_PLATFORM_SECRET for the 'quarry-platform' audience; no tenant token can stand in")
    p.add_argument("--ttl", type=int, default=3600, help="seconds until the token expires (default 3600)")
    p.add_argument("--scope", default=None,
                   help="space-separated scopes; 'operator' may read search traces of its tenant")
    p.add_argument("--audience", default="quarry", help="'aud' claim; must match the server's (default quarry)")
    p.add_argument("--issuer", default="quarry-dev", help="'iss' claim; must match the server's (default quarry-dev)")
    p.add_argument("--revoke-jti", default=None, metavar="JTI",
                   help="instead of minting, add this token id to the revocation list at --revocation-uri")
    p.add_argument("--revoke-subject", action="store_true",
                   help="instead of minting, revoke every token of --tenant/--subject issued before now")
    p.add_argument("--revocation-uri", default=None,
                   help="the server's auth.revocation_uri (fsspec URI, e.g. s3://bucket/index/_auth/revocations.json)")
    p.add_argument("--kid", default=None,
                   help="key id to put in the token header (the server's key set picks the key by it)")
    p.add_argument("--private-key-file", default=None,
                   help="sign RS256 with this PEM private key (default: $QUARRY_JWT_PRIVATE_KEY_FILE, else "
                        "HS256 with the local dev secret)")


def parse_groups(groups: str | list[str]) -> list[str]:
    gs = [g.strip() for g in groups.split(",")] if isinstance(groups, str) else [g.strip() for g in groups]
    return sorted({g for g in gs if g})


def mint(tenant: str, subject: str, groups: str | list[str], ttl: int = 3600, scope: str | None = None,
         audience: str = "quarry", issuer: str = "quarry-dev", private_key_file: str | None = None,
         kid: str | None = None) -> str:
    """Validate the claims the server will check and return a signed token."""
    from quarry.serve.http.auth import is_opaque_claim, is_tenant_slug, mint_token
    from quarry.serve.settings import load_dev_secret

    gs = parse_groups(groups)
    if not is_tenant_slug(tenant):
        raise ValueError(f"tenant {tenant!r} is not a lowercase slug ([a-z0-9][a-z0-9_.-]*)")
    if not is_opaque_claim(subject):
        raise ValueError("subject must be 1-256 characters without control characters or surrounding spaces")
    if not all(is_opaque_claim(g) for g in gs):
        raise ValueError("each group must be 1-256 characters without control characters")
    if "*" in gs:
        raise ValueError("'*' is an index ACL wildcard, not a group a token may carry")
    if ttl <= 0:
        raise ValueError("--ttl must be positive")
    key_file = private_key_file or os.environ.get("QUARRY_JWT_PRIVATE_KEY_FILE")
    kw = dict(ttl_s=ttl, audience=audience, issuer=issuer, scope=scope, kid=kid)
    if key_file:
        return mint_token(tenant, subject, gs, private_key_pem=Path(key_file).read_text(), **kw)
    return mint_token(tenant, subject, gs, secret=load_dev_secret(), **kw)


def mint_platform(subject: str | None, ttl: int, issuer: str = "quarry-dev") -> str:
    from quarry.serve.http.auth import mint_platform_token

    secret = os.environ.get("QUARRY_PLATFORM_SECRET")
    if not secret:
        raise ValueError("--platform needs QUARRY_PLATFORM_SECRET (the server's platform_secret) in the environment")
    if ttl <= 0:
        raise ValueError("--ttl must be positive")
    return mint_platform_token(secret, subject or "platform", ttl_s=ttl, issuer=issuer)


def run(args: argparse.Namespace) -> int:
    try:
        if args.revoke_jti or args.revoke_subject:
            from quarry.serve.http.revocation import add_revocation

            if not args.revocation_uri:
                raise ValueError("--revoke-jti/--revoke-subject need --revocation-uri")
            if args.revoke_subject and (args.tenant is None or args.subject is None):
                raise ValueError("--revoke-subject needs --tenant and --subject")
            if args.revoke_jti:
                add_revocation(args.revocation_uri, jti=args.revoke_jti)
            else:
                add_revocation(args.revocation_uri, tenant=args.tenant, subject=args.subject)
            print("revoked; replicas stop it within auth.revocation_check_s", file=sys.stderr)
            return 0
        if args.platform:
            print(mint_platform(args.subject, args.ttl, args.issuer))
            return 0
        if args.tenant is None or args.subject is None or args.groups is None:
            raise ValueError("--tenant, --subject and --groups are required (or give --platform)")
        tok = mint(args.tenant, args.subject, args.groups, args.ttl, args.scope, args.audience, args.issuer,
                   args.private_key_file, args.kid)
    except (OSError, ValueError) as e:
        print(f"quarry token: error: {e}", file=sys.stderr)
        return 2
    print(tok)
    return 0
