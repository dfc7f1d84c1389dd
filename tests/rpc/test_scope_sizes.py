"""The scope sizes the vector channel plans by: counted on a scope's first recall, recounted in the
background once a minute old, never waited for again."""

from __future__ import annotations

import asyncio

from hindsight.client import HindsightClient, memory_input
from hindsight_server.domain.search_plan import ScopeSize
from hindsight_server.pipelines.scope_sizes import TTL_S, ScopeSizes
from hindsight_server.process.running import RunningServer
from hindsight_server.store.memories import MemoryStore
from tests.support.eventually import eventually


async def test_a_scopes_size_is_counted_once_then_recounted_in_the_background(
    server: RunningServer, client: HindsightClient, tenant: str
) -> None:
    now = [1_000.0]
    store = MemoryStore(server.pool)
    sizes = ScopeSizes(store, clock=lambda: now[0])
    assert (await sizes.of(tenant, "")).rows == 0  # a tenant that has written nothing

    await client.write_batch(
        tenant,
        [memory_input(f"note {i}", tier="semantic", kind="fact", subject="ann") for i in range(3)]
        + [memory_input(f"note {i}", tier="semantic", kind="fact", subject="bob") for i in range(2)],
        verbatim=True,
    )
    dimension = await server.pool.fetchval(
        "SELECT atttypmod FROM pg_attribute WHERE attrelid = 'memories'::regclass AND attname = 'embedding'"
    )
    await server.pool.execute(
        "UPDATE memories SET embedding = array_fill(0.1::real, ARRAY[$2::int])::vector WHERE tenant_id = $1",
        tenant,
        dimension,
    )
    assert (await sizes.of(tenant, "")).rows == 0  # still the cached count, and no recount yet
    ann = await sizes.of(tenant, "ann")  # a subject is a scope of its own
    assert (ann.rows, ann.without_english) == (3, 3)

    now[0] += TTL_S
    assert (await sizes.of(tenant, "")).rows == 0  # the stale count answers at once ...

    async def recounted() -> bool:  # ... while the recount runs
        return bool((await sizes.of(tenant, "")).rows)

    await eventually(recounted, timeout_s=5, poll_s=0.01)
    size = await sizes.of(tenant, "")
    assert (size.rows, size.without_english) == (5, 5)
    assert (await sizes.of(tenant, "bob")).rows == 2


async def test_concurrent_first_recalls_of_a_scope_share_one_count(
    server: RunningServer, tenant: str
) -> None:
    counts = []

    class CountingStore(MemoryStore):
        async def scope_size(self, tenant_id: str, subject: str) -> ScopeSize:
            counts.append((tenant_id, subject))
            return await super().scope_size(tenant_id, subject)

    sizes = ScopeSizes(CountingStore(server.pool))
    answers = await asyncio.gather(*(sizes.of(tenant, "u1") for _ in range(5)))
    assert len(set(answers)) == 1
    assert counts == [(tenant, "u1")]


async def test_changes_noted_after_a_count_that_held_them_never_go_below_zero() -> None:
    class Counted:
        async def scope_size(self, tenant_id: str, subject: str) -> ScopeSize:
            return ScopeSize(10, 2, 1_000)  # counted after the worker had embedded the two

    sizes = ScopeSizes(Counted())
    await sizes.of("acme", "ann")
    sizes.note_written("acme", "ann", 0, -5)  # the worker reports what the count already saw
    size = await sizes.of("acme", "ann")
    assert (size.rows, size.without_english) == (10, 0)
    sizes.note_written("acme", "ann", -20, 0)
    assert (await sizes.of("acme", "ann")).rows == 0
