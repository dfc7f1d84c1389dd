"""Who is calling: over HTTP a bearer token names the tenant, the agent it acts as and, optionally, the
one subject it is confined to; over stdio (and on loopback HTTP without tokens) the configuration names
the tenant and agent.

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
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx2
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken
from starlette.authentication import AuthenticationError

from gateway_mcp.config import TokenBinding
from gateway_mcp.errors import ToolError

__all__ = [
    "BearerTokens",
    "Caller",
    "CallerOf",
    "Introspection",
    "IntrospectionBusy",
    "TenantToken",
    "TokenTenants",
    "bearer_caller",
    "fixed_caller",
    "hash_token",
]

log = logging.getLogger(__name__)
V = TypeVar("V")


@dataclass(frozen=True, slots=True)
class Caller:
    """Whom a tool call acts for. `subject` None: any subject the model names; else that one only."""

    tenant: str
    agent_id: str
    subject: str | None = None


CallerOf = Callable[[], Caller]


def hash_token(token: str) -> str:
    """The form a token is configured in: SHA-256, lowercase hex."""
    return hashlib.sha256(token.encode()).hexdigest()


class TenantToken(AccessToken):
    tenant: str
    agent_id: str
    subject: str | None = None


def _binding(value: str | TokenBinding) -> TokenBinding:
    return TokenBinding(tenant=value) if isinstance(value, str) else value


class TokenTenants:
    """The SDK's TokenVerifier over the configured hashes."""

    def __init__(self, tokens: Mapping[str, str | TokenBinding]) -> None:
        self._known = [(bytes.fromhex(digest), digest, _binding(bound)) for digest, bound in tokens.items()]

    async def verify_token(self, token: str) -> AccessToken | None:
        presented = hashlib.sha256(token.encode()).digest()
        found: tuple[str, TokenBinding] | None = None
        # Every entry is compared, each in constant time: the timing does not tell which one matched.
        for known, digest, bound in self._known:
            if hmac.compare_digest(presented, known):
                found = (digest, bound)
        if found is None:
            return None
        digest, bound = found
        # The hash's prefix identifies the token (e.g. in the SDK's session ownership) without the secret.
        client_id = f"token-{digest[:16]}"
        return TenantToken(
            token=f"sha256:{digest[:16]}",
            client_id=client_id,
            scopes=[],
            tenant=bound.tenant,
            agent_id=bound.agent_id or client_id,
            subject=bound.subject,
        )


class IntrospectionBusy(AuthenticationError):
    """Too many tokens new to this gateway are being checked: retry after `retry_after_s`."""

    def __init__(self, retry_after_s: float) -> None:
        super().__init__(f"too many new tokens are being verified; retry in {retry_after_s:.1f} s")
        self.retry_after_s = retry_after_s


class Introspection:
    """An authorization server's access tokens, verified by RFC 7662 introspection: active, issued for
    this gateway (`aud` holds its resource URL, RFC 8707), and naming a tenant in `tenant_claim` (the
    agent in `agent_claim`, else the client_id; the one subject it is confined to in `subject_claim`,
    when configured, which such a token must then carry). Answers are kept until the token expires, at
    most CACHE_S, so a busy agent costs one introspection a minute. An unreachable server or an answer
    other than 200 is no verification (401) and is not kept: the next request asks again, so an outage
    of the authorization server locks agents out for as long as it lasts, not a minute longer.
    Refused tokens are kept apart from verified ones, each cache dropping its least recently used
    entry first: sprayed tokens push out only other refused ones, never an agent's good token. Tokens
    the gateway has not seen are introspected within `new_tokens_per_s` (bursts of `new_token_burst`):
    past it such a token is answered 503 with a Retry-After (IntrospectionBusy), so a spray of random
    tokens costs the authorization server no more than that; a token verified before is asked about again
    when its answer expires, whatever the spray."""

    CACHE_S = 60.0
    CAPACITY = 10_000
    REFUSED_CAPACITY = 1_000

    def __init__(
        self,
        url: str,
        *,
        resource: str,
        tenant_claim: str,
        agent_claim: str = "",
        subject_claim: str = "",
        client_id: str = "",
        client_secret: str = "",
        timeout_s: float = 5.0,
        new_tokens_per_s: float = 20.0,
        new_token_burst: float = 50.0,
    ) -> None:
        self._url = url
        self._resource = resource
        self._tenant_claim = tenant_claim
        self._agent_claim = agent_claim
        self._subject_claim = subject_claim
        # One client for the gateway's life: its connections to the authorization server are reused.
        self._http = httpx2.AsyncClient(
            timeout=timeout_s, auth=httpx2.BasicAuth(client_id, client_secret) if client_id else None
        )
        self._verified: OrderedDict[bytes, tuple[float, TenantToken]] = OrderedDict()
        self._refused: OrderedDict[bytes, float] = OrderedDict()  # -> until when
        self._new_tokens_per_s = new_tokens_per_s
        self._new_token_burst = new_token_burst
        self._new_token_budget = new_token_burst  # a token bucket, refilled as of `_budget_at`
        self._budget_at = time.monotonic()

    async def verify_token(self, token: str) -> TenantToken | None:
        digest = hashlib.sha256(token.encode()).digest()
        now = time.monotonic()
        known = self._verified.get(digest)
        if known is not None and known[0] > now:
            self._verified.move_to_end(digest)
            return known[1]
        refused_until = self._refused.get(digest)
        if refused_until is not None and refused_until > now:
            return None
        if digest not in self._verified:
            self._spend_new_token_budget(now)
        claims = await self._introspect(token)
        if claims is None:  # no answer: nothing learnt about the token, nothing to keep
            return None
        verified = self._tenant_token(digest.hex(), claims)
        expires = claims.get("exp")
        keep_s = self.CACHE_S
        if isinstance(expires, int | float):
            keep_s = min(keep_s, expires - time.time())
        if keep_s <= 0:
            return verified
        if verified is None:
            _keep(self._refused, digest, now + keep_s, self.REFUSED_CAPACITY)
        else:
            _keep(self._verified, digest, (now + keep_s, verified), self.CAPACITY)
        return verified

    def _spend_new_token_budget(self, now: float) -> None:
        """Takes one introspection of a token never verified here from the budget, or raises
        IntrospectionBusy with how long until the budget holds one again."""
        if not self._new_tokens_per_s:
            return
        elapsed = max(now - self._budget_at, 0.0)
        self._budget_at = now
        self._new_token_budget = min(
            self._new_token_burst, self._new_token_budget + elapsed * self._new_tokens_per_s
        )
        if self._new_token_budget < 1:
            raise IntrospectionBusy((1 - self._new_token_budget) / self._new_tokens_per_s)
        self._new_token_budget -= 1

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
        subject = claims.get(self._subject_claim) if self._subject_claim else None
        if self._subject_claim and (not isinstance(subject, str) or not subject):
            return None  # confinement is configured: a token naming no subject would escape it
        scope = claims.get("scope")
        expires = claims.get("exp")
        client_id = str(claims.get("client_id") or f"token-{digest[:16]}")
        agent = claims.get(self._agent_claim) if self._agent_claim else None
        return TenantToken(
            token=f"sha256:{digest[:16]}",
            client_id=client_id,
            scopes=scope.split() if isinstance(scope, str) else [],
            expires_at=int(expires) if isinstance(expires, int | float) else None,
            tenant=tenant,
            agent_id=agent if isinstance(agent, str) and agent else client_id,
            subject=subject if isinstance(subject, str) else None,
        )


def _keep(cache: OrderedDict[bytes, V], key: bytes, value: V, capacity: int) -> None:
    cache[key] = value
    cache.move_to_end(key)
    while len(cache) > capacity:
        cache.popitem(last=False)


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


def fixed_caller(tenant: str, agent_id: str) -> CallerOf:
    caller = Caller(tenant, agent_id)
    return lambda: caller


def bearer_caller() -> Caller:
    """Whom the request's verified token acts for (the middleware lets no request without one through)."""
    token = get_access_token()
    if not isinstance(token, TenantToken):
        raise ToolError("no tenant: the request carried no valid bearer token")
    return Caller(token.tenant, token.agent_id, token.subject)
