"""API keys per tenant: created (the secret shown once), listed, revoked, and checked on every call.

A key reads `hs_<key id>_<secret>`. The id finds the row; the secret's SHA-256 is compared in constant
time with the stored one. Checked keys are cached for `cache_s`, so a revocation takes effect on every
server within that time while the database is not asked on every call. Ids that name no key are cached
apart, in a smaller cache of their own: a caller spraying random keys evicts only other unknown ids,
never a tenant's real key (which would send its next call to the database). And the database lookups of
ids this server has never seen are bounded (`lookups`, per server): past the bound such a key is asked
to retry (RESOURCE_EXHAUSTED) instead of reaching the database, so a spray of random keys costs the
database at most that many lookups a second. A key this server checked before is looked up again when
its entry expires whatever the spray: revocations still take effect within `cache_s`.

A key grants scopes and may be bound to an agent (domain/principal.py).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Generic, TypeVar

from hindsight_server.domain.clock import Clock
from hindsight_server.domain.errors import InvalidArgument, NotFound, ResourceExhausted, Unauthenticated
from hindsight_server.domain.policy import Limits
from hindsight_server.domain.principal import DEFAULT_SCOPES, ApiKeyRecord, Principal, Scope
from hindsight_server.domain.ratelimit import RateLimiter
from hindsight_server.domain.validation import validate_identifiers, validate_tenant
from hindsight_server.pipelines.ports import ApiKeyTable

__all__ = ["ApiKeys", "CreatedKey"]

_PREFIX = "hs_"


@dataclass(frozen=True, slots=True)
class CreatedKey:
    key_id: str
    tenant_id: str
    api_key: str  # shown once; only its hash is stored
    scopes: frozenset[Scope]
    agent_id: str


_KNOWN_CAPACITY = 10_000
_UNKNOWN_CAPACITY = 1_000


V = TypeVar("V")


class _Recent(Generic[V]):
    """At most `capacity` entries, each for `ttl_s`; the least recently used goes first."""

    def __init__(self, capacity: int, ttl_s: float) -> None:
        self._capacity = capacity
        self._ttl_s = ttl_s
        self._entries: OrderedDict[str, tuple[float, V]] = OrderedDict()

    def get(self, key: str, now: float) -> V | None:
        entry = self._entries.get(key)
        if entry is None or now - entry[0] >= self._ttl_s:
            return None
        self._entries.move_to_end(key)
        return entry[1]

    def __contains__(self, key: str) -> bool:
        """Whether `key` has an entry, expired or not."""
        return key in self._entries

    def put(self, key: str, value: V, now: float) -> None:
        self._entries[key] = (now, value)
        self._entries.move_to_end(key)
        while len(self._entries) > self._capacity:
            self._entries.popitem(last=False)

    def discard(self, key: str) -> None:
        self._entries.pop(key, None)


def _hash(secret: str) -> bytes:
    return hashlib.sha256(secret.encode()).digest()


class ApiKeys:
    def __init__(
        self,
        store: ApiKeyTable,
        clock: Clock,
        limits: Limits,
        cache_s: float = 30.0,
        lookups: RateLimiter | None = None,
    ) -> None:
        self._store = store
        self._clock = clock
        self._limits = limits
        self._known: _Recent[ApiKeyRecord] = _Recent(_KNOWN_CAPACITY, cache_s)
        self._unknown: _Recent[bool] = _Recent(_UNKNOWN_CAPACITY, cache_s)
        self._lookups = lookups or RateLimiter(rate=0, burst=1)  # lookups of ids never seen; 0: unbounded

    async def create(
        self,
        tenant_id: str,
        label: str = "",
        *,
        scopes: Iterable[Scope] = DEFAULT_SCOPES,
        agent_id: str = "",
    ) -> CreatedKey:
        """A new key; `agent_id` binds it to that agent ("": the whole tenant)."""
        validate_tenant(tenant_id, self._limits)
        validate_identifiers(self._limits, agent_id=agent_id)
        if len(label) > self._limits.max_identifier_chars:
            raise InvalidArgument("label", f"longer than {self._limits.max_identifier_chars} characters")
        granted = frozenset(scopes)
        if not granted:
            raise InvalidArgument("scopes", f"name at least one of {', '.join(Scope)}")
        key_id, secret = secrets.token_hex(8), secrets.token_urlsafe(32)
        await self._store.add(
            key_id, tenant_id, _hash(secret), label, self._clock(), scopes=granted, agent_id=agent_id
        )
        return CreatedKey(key_id, tenant_id, f"{_PREFIX}{key_id}_{secret}", granted, agent_id)

    async def list(self, tenant_id: str = "") -> list[ApiKeyRecord]:
        return await self._store.list(tenant_id)

    async def revoke(self, key_id: str) -> None:
        if not await self._store.revoke(key_id, self._clock()):
            raise NotFound("active API key", key_id)
        self._known.discard(key_id)

    async def principal_of(self, api_key: str) -> tuple[str, Principal]:
        """The tenant an API key belongs to and what it may do there; Unauthenticated for a malformed,
        unknown or revoked key."""
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
        return record.tenant_id, Principal(record.scopes, key_id=key_id, agent_id=record.agent_id)

    async def _record(self, key_id: str) -> ApiKeyRecord | None:
        now = time.monotonic()
        known = self._known.get(key_id, now)
        if known is not None or self._unknown.get(key_id, now):
            return known
        if key_id not in self._known and not self._lookups.allow("", now):
            wait_s = self._lookups.wait_s("")
            raise ResourceExhausted(
                f"this server is checking too many API keys it has not seen; retry in {wait_s:.2f} s",
                retry_after_s=wait_s,
            )
        record = await self._store.find(key_id)
        if record is None:
            self._unknown.put(key_id, True, now)
        else:
            self._known.put(key_id, record, now)
        return record
