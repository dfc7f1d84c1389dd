"""API keys per tenant: created (the secret shown once), listed, revoked, and checked on every call.

A key reads `hs_<key id>_<secret>`. The id finds the row; the secret's SHA-256 is compared in constant
time with the stored one. Checked keys are cached for `cache_s`, so a revocation takes effect on every
server within that time while the database is not asked on every call.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass

from hindsight_server.domain.clock import Clock
from hindsight_server.domain.errors import InvalidArgument, NotFound, Unauthenticated
from hindsight_server.domain.policy import Limits
from hindsight_server.domain.validation import validate_tenant
from hindsight_server.store.tenants import ApiKeyRecord, ApiKeyStore

__all__ = ["ApiKeys", "CreatedKey"]

_PREFIX = "hs_"


@dataclass(frozen=True, slots=True)
class CreatedKey:
    key_id: str
    tenant_id: str
    api_key: str  # shown once; only its hash is stored


def _hash(secret: str) -> bytes:
    return hashlib.sha256(secret.encode()).digest()


class ApiKeys:
    def __init__(self, store: ApiKeyStore, clock: Clock, limits: Limits, cache_s: float = 30.0) -> None:
        self._store = store
        self._clock = clock
        self._limits = limits
        self._cache_s = cache_s
        self._cache: dict[str, tuple[float, ApiKeyRecord | None]] = {}

    async def create(self, tenant_id: str, label: str = "") -> CreatedKey:
        validate_tenant(tenant_id, self._limits)
        if len(label) > self._limits.max_identifier_chars:
            raise InvalidArgument("label", f"longer than {self._limits.max_identifier_chars} characters")
        key_id, secret = secrets.token_hex(8), secrets.token_urlsafe(32)
        await self._store.add(key_id, tenant_id, _hash(secret), label, self._clock())
        return CreatedKey(key_id, tenant_id, f"{_PREFIX}{key_id}_{secret}")

    async def list(self, tenant_id: str = "") -> list[ApiKeyRecord]:
        return await self._store.list(tenant_id)

    async def revoke(self, key_id: str) -> None:
        if not await self._store.revoke(key_id, self._clock()):
            raise NotFound("active API key", key_id)
        self._cache.pop(key_id, None)

    async def tenant_of(self, api_key: str) -> str:
        """The tenant an API key belongs to; Unauthenticated for a malformed, unknown or revoked key."""
        if not api_key.startswith(_PREFIX) or api_key.count("_") < 2:
            raise Unauthenticated("malformed API key: expected hs_<id>_<secret>")
        key_id, secret = api_key[len(_PREFIX) :].split("_", 1)
        record = await self._record(key_id)
        if (
            record is None
            or record.revoked_at is not None
            or not hmac.compare_digest(record.key_hash, _hash(secret))
        ):
            raise Unauthenticated("unknown or revoked API key")
        return record.tenant_id

    async def _record(self, key_id: str) -> ApiKeyRecord | None:
        now = time.monotonic()
        cached = self._cache.get(key_id)
        if cached is not None and now - cached[0] < self._cache_s:
            return cached[1]
        record = await self._store.find(key_id)
        if len(self._cache) > 10_000:  # unknown ids must not grow it without bound
            self._cache.clear()
        self._cache[key_id] = (now, record)
        return record


def key_id_of(api_key: str) -> str:
    """The id part of a well-formed key (hs_<id>_<secret>): who called, for an audit record."""
    return api_key[len(_PREFIX) :].split("_", 1)[0]
