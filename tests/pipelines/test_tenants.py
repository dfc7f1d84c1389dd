"""API keys (pipelines/tenants.py) on the in-memory key table (tests/support/fakes): a key created is
stored as its secret's hash and checks back to its tenant, scopes and agent; bad requests and bad keys
are refused with their messages; checked keys and unknown ids are cached apart; a revocation here takes
effect at once, elsewhere once the cache expires; lookups of ids never seen are bounded.
tests/pipelines/test_api_key_cache.py runs the cache against PostgreSQL."""

from __future__ import annotations

import hashlib
import re
from datetime import UTC, datetime, timedelta

import pytest

from hindsight_server.domain.errors import InvalidArgument, NotFound, ResourceExhausted, Unauthenticated
from hindsight_server.domain.policy import Limits
from hindsight_server.domain.principal import DEFAULT_SCOPES, Scope
from hindsight_server.domain.ratelimit import RateLimiter
from hindsight_server.pipelines.tenants import ApiKeys
from tests.support.fakes.api_keys import InMemoryApiKeys
from tests.support.fakes.clock import FakeClock

NOW = datetime(2024, 5, 1, 12, tzinfo=UTC)
CACHED = 300.0  # seconds a checked key is trusted: longer than any test
NEVER_CACHED = 0.0


def api_keys(cache_s: float = CACHED, lookups: RateLimiter | None = None) -> tuple[ApiKeys, InMemoryApiKeys]:
    table = InMemoryApiKeys()
    return ApiKeys(table, lambda: NOW, Limits(), cache_s, lookups), table


async def test_a_created_key_is_stored_as_its_hash_and_checks_back_to_what_it_grants() -> None:
    keys, table = api_keys()
    created = await keys.create("acme", "travel agent", scopes={Scope.READ, Scope.ERASE}, agent_id="travel")

    prefix, key_id, secret = created.api_key.split("_", 2)
    assert (prefix, key_id) == ("hs", created.key_id)
    stored = table.keys[key_id]
    assert stored.key_hash == hashlib.sha256(secret.encode()).digest()
    assert secret.encode() not in stored.key_hash
    assert (stored.tenant_id, stored.label, stored.created_at, stored.revoked_at) == (
        "acme",
        "travel agent",
        NOW,
        None,
    )
    tenant_id, principal = await keys.principal_of(created.api_key)
    assert tenant_id == "acme"
    assert (principal.scopes, principal.key_id, principal.agent_id) == (
        frozenset({Scope.READ, Scope.ERASE}),
        key_id,
        "travel",
    )


async def test_a_key_bound_to_no_agent_grants_the_default_scopes() -> None:
    keys, _ = api_keys()
    created = await keys.create("acme")
    _, principal = await keys.principal_of(created.api_key)
    assert (principal.scopes, principal.agent_id, created.scopes) == (DEFAULT_SCOPES, "", DEFAULT_SCOPES)


async def test_every_key_gets_its_own_id_and_secret() -> None:
    keys, table = api_keys()
    created = [await keys.create("acme") for _ in range(20)]
    assert len({c.key_id for c in created}) == len({c.api_key for c in created}) == len(table.keys) == 20
    for key in created:  # secrets may hold "_" and "-": each still checks
        assert (await keys.principal_of(key.api_key))[0] == "acme"


@pytest.mark.parametrize(
    ("tenant_id", "label", "scopes", "agent_id", "message"),
    [
        ("", "", DEFAULT_SCOPES, "", "tenant_id: required"),
        ("acme corp", "", DEFAULT_SCOPES, "", "tenant_id: use letters"),
        ("acme", "l" * 257, DEFAULT_SCOPES, "", "label: longer than 256 characters"),
        ("acme", "", frozenset(), "", "scopes: name at least one of read, write"),
        ("acme", "", DEFAULT_SCOPES, "agent\n", "agent_id: contains control characters"),
        ("acme", "", DEFAULT_SCOPES, "a" * 257, "agent_id: longer than 256 characters"),
    ],
)
async def test_a_bad_key_request_is_refused_and_stores_nothing(
    tenant_id: str, label: str, scopes: frozenset[Scope], agent_id: str, message: str
) -> None:
    keys, table = api_keys()
    with pytest.raises(InvalidArgument, match=re.escape(message)):
        await keys.create(tenant_id, label, scopes=scopes, agent_id=agent_id)
    assert not table.keys


@pytest.mark.parametrize(
    ("api_key", "message"),
    [
        ("", "malformed API key"),
        ("sk_live_1234", "malformed API key"),
        ("hs_onlyid", "malformed API key"),
        ("hs_0123456789abcdef_wrong-secret", "unknown or revoked API key"),  # no such id
        ("{real}x", "unknown or revoked API key"),  # the real id, another secret
        ("{real_id}", "unknown or revoked API key"),  # the id alone
    ],
)
async def test_a_malformed_unknown_or_mistyped_key_is_unauthenticated(api_key: str, message: str) -> None:
    keys, _ = api_keys()
    real = await keys.create("acme")
    presented = api_key.format(real=real.api_key, real_id=f"hs_{real.key_id}_")
    with pytest.raises(Unauthenticated, match=message):
        await keys.principal_of(presented)


async def test_checked_keys_and_unknown_ids_are_each_looked_up_once_while_cached() -> None:
    keys, table = api_keys()
    created = await keys.create("acme")
    for _ in range(3):
        await keys.principal_of(created.api_key)
        with pytest.raises(Unauthenticated):
            await keys.principal_of("hs_0123456789abcdef_x")
    assert table.lookups == 2


async def test_without_a_cache_every_check_asks_the_table() -> None:
    keys, table = api_keys(NEVER_CACHED)
    created = await keys.create("acme")
    for _ in range(3):
        await keys.principal_of(created.api_key)
    assert table.lookups == 3


async def test_a_key_revoked_here_is_refused_at_once_and_only_once_revocable() -> None:
    keys, table = api_keys()
    created = await keys.create("acme")
    await keys.principal_of(created.api_key)  # cached

    await keys.revoke(created.key_id)

    assert table.keys[created.key_id].revoked_at == NOW
    with pytest.raises(Unauthenticated, match="unknown or revoked API key"):
        await keys.principal_of(created.api_key)
    with pytest.raises(NotFound, match=f"active API key '{created.key_id}' not found"):
        await keys.revoke(created.key_id)
    with pytest.raises(NotFound, match="active API key 'nope' not found"):
        await keys.revoke("nope")


@pytest.mark.parametrize(("cache_s", "refused"), [(CACHED, False), (NEVER_CACHED, True)])
async def test_a_key_revoked_by_another_server_is_refused_once_this_ones_cache_expires(
    cache_s: float, refused: bool
) -> None:
    keys, table = api_keys(cache_s)
    other_server = ApiKeys(table, lambda: NOW, Limits())
    created = await keys.create("acme")
    await keys.principal_of(created.api_key)

    await other_server.revoke(created.key_id)

    if refused:
        with pytest.raises(Unauthenticated):
            await keys.principal_of(created.api_key)
    else:
        assert (await keys.principal_of(created.api_key))[0] == "acme"


async def test_lookups_of_ids_never_seen_are_bounded_and_keys_seen_before_never_refused() -> None:
    keys, table = api_keys(NEVER_CACHED, RateLimiter(rate=0.001, burst=3))
    created = await keys.create("acme")
    await keys.principal_of(created.api_key)  # the first of the 3
    for n in range(2):
        with pytest.raises(Unauthenticated):
            await keys.principal_of(f"hs_{n:016x}_x")

    with pytest.raises(ResourceExhausted, match="checking too many API keys it has not seen") as refused:
        await keys.principal_of("hs_ffffffffffffffff_x")

    assert refused.value.retry_after_s > 0
    assert table.lookups == 3  # the refused one never reached the table
    for _ in range(3):  # seen before: looked up again at each expiry, whatever the spray
        assert (await keys.principal_of(created.api_key))[0] == "acme"
    assert table.lookups == 6


async def test_keys_are_listed_per_tenant_by_tenant_then_age() -> None:
    clock = FakeClock(NOW)
    keys = ApiKeys(InMemoryApiKeys(), clock, Limits())
    for tenant_id, label, hours in (("globex", "g", 0), ("acme", "second", 2), ("acme", "first", 1)):
        clock.now = NOW + timedelta(hours=hours)
        await keys.create(tenant_id, label)

    assert [k.label for k in await keys.list("acme")] == ["first", "second"]
    assert [k.label for k in await keys.list()] == ["first", "second", "g"]
    assert await keys.list("initech") == []
