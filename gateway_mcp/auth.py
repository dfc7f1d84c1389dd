"""Who is calling: over HTTP a bearer token names the tenant; over stdio (and on loopback HTTP without
tokens) the configuration does.

Tokens are configured as SHA-256 hashes, so the configuration never holds a usable secret. The SDK's
bearer middleware answers a missing or unknown token with 401 and `WWW-Authenticate: Bearer ...`
before any tool runs.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

import httpx2
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken

from gateway_mcp.errors import ToolError

__all__ = [
    "BearerTokens",
    "Introspection",
    "TenantOf",
    "TenantToken",
    "TokenTenants",
    "bearer_tenant",
    "fixed_tenant",
    "hash_token",
]

log = logging.getLogger(__name__)

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


class Introspection:
    """An authorization server's access tokens, verified by RFC 7662 introspection: active, issued for
    this gateway (`aud` holds its resource URL, RFC 8707), and naming a tenant in `tenant_claim`.
    Answers are kept until the token expires, at most CACHE_S, so a busy agent costs one introspection
    a minute; an unreachable server or any other answer is no verification (401)."""

    CACHE_S = 60.0
    CAPACITY = 10_000

    def __init__(
        self,
        url: str,
        *,
        resource: str,
        tenant_claim: str,
        client_id: str = "",
        client_secret: str = "",
        timeout_s: float = 5.0,
    ) -> None:
        self._url = url
        self._resource = resource
        self._tenant_claim = tenant_claim
        # One client for the gateway's life: its connections to the authorization server are reused.
        self._http = httpx2.AsyncClient(
            timeout=timeout_s, auth=httpx2.BasicAuth(client_id, client_secret) if client_id else None
        )
        self._cache: OrderedDict[bytes, tuple[float, TenantToken | None]] = OrderedDict()

    async def verify_token(self, token: str) -> TenantToken | None:
        digest = hashlib.sha256(token.encode()).digest()
        cached = self._cache.get(digest)
        now = time.monotonic()
        if cached is not None and cached[0] > now:
            return cached[1]
        claims = await self._introspect(token)
        verified = None if claims is None else self._tenant_token(digest.hex(), claims)
        expires = claims.get("exp") if claims else None
        keep_s = self.CACHE_S
        if isinstance(expires, int | float):
            keep_s = min(keep_s, expires - time.time())
        if keep_s > 0:
            self._cache[digest] = (now + keep_s, verified)
            while len(self._cache) > self.CAPACITY:
                self._cache.popitem(last=False)
        return verified

    async def _introspect(self, token: str) -> dict[str, Any] | None:
        try:
            answer = await self._http.post(
                self._url, data={"token": token, "token_type_hint": "access_token"}
            )
            claims = answer.json() if answer.status_code == 200 else None
        except (httpx2.HTTPError, ValueError) as exc:
            log.warning("token introspection at %s failed: %s", self._url, exc)
            return None
        return claims if isinstance(claims, dict) else None

    async def close(self) -> None:
        await self._http.aclose()

    def _tenant_token(self, digest: str, claims: Mapping[str, Any]) -> TenantToken | None:
        if claims.get("active") is not True:
            return None
        audience = claims.get("aud")
        audiences = (
            [audience] if isinstance(audience, str) else audience if isinstance(audience, list) else []
        )
        if self._resource not in audiences:
            return None  # a token for another resource must not be replayed here
        tenant = claims.get(self._tenant_claim)
        if not isinstance(tenant, str) or not tenant:
            return None
        scope = claims.get("scope")
        expires = claims.get("exp")
        return TenantToken(
            token=f"sha256:{digest[:16]}",
            client_id=str(claims.get("client_id") or f"token-{digest[:16]}"),
            scopes=scope.split() if isinstance(scope, str) else [],
            expires_at=int(expires) if isinstance(expires, int | float) else None,
            tenant=tenant,
        )


class BearerTokens:
    """The SDK's TokenVerifier: the configured hashes first, then the authorization server's tokens."""

    def __init__(self, hashed: TokenTenants, introspection: Introspection | None) -> None:
        self._hashed = hashed
        self._introspection = introspection

    async def verify_token(self, token: str) -> AccessToken | None:
        known = await self._hashed.verify_token(token)
        if known is not None or self._introspection is None:
            return known
        return await self._introspection.verify_token(token)


def fixed_tenant(tenant: str) -> TenantOf:
    return lambda: tenant


def bearer_tenant() -> str:
    """The tenant of the request's verified token (the middleware lets no request without one through)."""
    token = get_access_token()
    if not isinstance(token, TenantToken):
        raise ToolError("no tenant: the request carried no valid bearer token")
    return token.tenant
