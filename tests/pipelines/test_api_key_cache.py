"""The API key cache (pipelines/tenants.py) against the real key table: a spray of unknown keys costs
database lookups of its own but never evicts a tenant's real key, and a key's scopes and agent come
back from the table as created; lookups of keys never seen are bounded, keys seen before are not."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Callable

import asyncpg
import pytest

from hindsight_server.config import Settings
from hindsight_server.domain.clock import system_clock
from hindsight_server.domain.errors import ResourceExhausted, Unauthenticated
from hindsight_server.domain.principal import ApiKeyRecord, Scope
from hindsight_server.domain.ratelimit import RateLimiter
from hindsight_server.pipelines.tenants import ApiKeys
from hindsight_server.process.offline import open_api_keys
from hindsight_server.store.tenants import ApiKeyStore


class CountedStore(ApiKeyStore):
    """The real store, counting the lookups that reach the database."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        super().__init__(pool)
        self.finds = 0

    async def find(self, key_id: str) -> ApiKeyRecord | None:
        self.finds += 1
        return await super().find(key_id)


@pytest.fixture
async def pool(postgres_dsn: str, make_settings: Callable[..., Settings]) -> AsyncIterator[asyncpg.Pool]:
    async with open_api_keys(make_settings()):  # the schema, migrated
        pass
    connections = await asyncpg.create_pool(postgres_dsn, min_size=1, max_size=2)
    yield connections
    await connections.close()


async def test_unknown_keys_never_evict_a_real_one(
    pool: asyncpg.Pool, make_settings: Callable[..., Settings], tenant: str
) -> None:
    store = CountedStore(pool)
    keys = ApiKeys(store, system_clock, make_settings().limits, cache_s=300)
    created = await keys.create(tenant, "agent", scopes={Scope.READ}, agent_id="travel")
    owner, principal = await keys.principal_of(created.api_key)
    assert owner == tenant
    assert (principal.scopes, principal.agent_id) == (frozenset({Scope.READ}), "travel")
    assert principal.key_id == created.key_id
    before = store.finds
    for _ in range(11_000):  # past every cache's capacity
        with pytest.raises(Unauthenticated):
            await keys.principal_of(f"hs_{secrets.token_hex(8)}_x")
    assert store.finds == before + 11_000
    sprayed = store.finds
    assert (await keys.principal_of(created.api_key))[0] == tenant
    assert store.finds == sprayed  # still cached: no lookup
    last = f"hs_{secrets.token_hex(8)}_x"
    for _ in range(2):
        with pytest.raises(Unauthenticated):
            await keys.principal_of(last)
    assert store.finds == sprayed + 1  # an unknown id is remembered too, apart


async def test_a_spray_of_new_keys_reaches_the_database_only_within_its_bound(
    pool: asyncpg.Pool, make_settings: Callable[..., Settings], tenant: str
) -> None:
    store = CountedStore(pool)
    # cache_s 0: every check of the real key goes to the database again, as on expiry under a spray.
    keys = ApiKeys(store, system_clock, make_settings().limits, cache_s=0, lookups=RateLimiter(0.001, 5))
    created = await keys.create(tenant, "agent")
    assert (await keys.principal_of(created.api_key))[0] == tenant  # seen: one of the 5
    outcomes: list[str] = []
    for _ in range(50):
        try:
            await keys.principal_of(f"hs_{secrets.token_hex(8)}_x")
        except Unauthenticated:
            outcomes.append("unknown")
        except ResourceExhausted as refused:
            outcomes.append("retry")
            assert "API keys it has not seen" in str(refused)
            assert refused.retry_after_s > 0
    assert outcomes == ["unknown"] * 4 + ["retry"] * 46
    assert store.finds == 5
    for _ in range(3):  # a key the server has seen is looked up again, never refused for the spray
        assert (await keys.principal_of(created.api_key))[0] == tenant
    assert store.finds == 8
    revoked = await keys.create(tenant, "soon revoked")
    with pytest.raises(ResourceExhausted):  # never seen here, and the bound is spent
        await keys.principal_of(revoked.api_key)
