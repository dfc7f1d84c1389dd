"""Who is calling: over HTTP a bearer token names the tenant; over stdio (and on loopback HTTP without
tokens) the configuration does.

Tokens are configured as SHA-256 hashes, so the configuration never holds a usable secret. The SDK's
bearer middleware answers a missing or unknown token with 401 and `WWW-Authenticate: Bearer ...`
before any tool runs.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable, Mapping

from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken

from gateway_mcp.errors import ToolError

__all__ = ["TenantOf", "TenantToken", "TokenTenants", "bearer_tenant", "fixed_tenant", "hash_token"]

TenantOf = Callable[[], str]


def hash_token(token: str) -> str:
    """The form a token is configured in: SHA-256, lowercase hex."""
    return hashlib.sha256(token.encode()).hexdigest()


class TenantToken(AccessToken):
    tenant: str


class TokenTenants:
    """The SDK's TokenVerifier over the configured hashes."""

    def __init__(self, tokens: Mapping[str, str]) -> None:
        self._known = [(bytes.fromhex(digest), digest, tenant) for digest, tenant in tokens.items()]

    async def verify_token(self, token: str) -> AccessToken | None:
        presented = hashlib.sha256(token.encode()).digest()
        found: tuple[str, str] | None = None
        # Every entry is compared, each in constant time: the timing does not tell which one matched.
        for known, digest, tenant in self._known:
            if hmac.compare_digest(presented, known):
                found = (digest, tenant)
        if found is None:
            return None
        digest, tenant = found
        # The hash's prefix identifies the token (e.g. in the SDK's session ownership) without the secret.
        return TenantToken(
            token=f"sha256:{digest[:16]}", client_id=f"token-{digest[:16]}", scopes=[], tenant=tenant
        )


def fixed_tenant(tenant: str) -> TenantOf:
    return lambda: tenant


def bearer_tenant() -> str:
    """The tenant of the request's verified token (the middleware lets no request without one through)."""
    token = get_access_token()
    if not isinstance(token, TenantToken):
        raise ToolError("no tenant: the request carried no valid bearer token")
    return token.tenant
