"""The tenant sizes the vector channel plans by: read from the BM25 statistics, cached for a minute."""

from __future__ import annotations

from hindsight.client import HindsightClient, memory_input
from hindsight_server.app import RunningServer
from hindsight_server.pipelines.tenant_sizes import TTL_S, TenantSizes
from hindsight_server.store.memories import MemoryStore


async def test_a_tenants_size_is_read_once_a_minute(
    server: RunningServer, client: HindsightClient, tenant: str
) -> None:
    now = [1_000.0]
    sizes = TenantSizes(MemoryStore(server.pool), clock=lambda: now[0])
    assert (await sizes.of(tenant))[0] == 0  # a tenant that has written nothing

    await client.write_batch(
        tenant,
        [memory_input(f"note {i} on the harbour", tier="semantic", kind="fact") for i in range(3)],
        verbatim=True,
    )
    assert (await sizes.of(tenant))[0] == 0  # still the cached size
    await server.pool.execute("ANALYZE memories")  # the table's size is the planner's estimate
    now[0] += TTL_S
    tenant_rows, table_rows = await sizes.of(tenant)
    assert tenant_rows == 3
    assert table_rows == await server.pool.fetchval("SELECT count(*) FROM memories")
