"""Figures about the store for `hindsight status` and the metrics (the pool's connections, the
deferred-embedding backlog), and the planner's statistics of a tenant's partition."""

from __future__ import annotations

import asyncpg

from hindsight_server.store.errors import translate_errors
from hindsight_server.store.sql import OnPool
from hindsight_server.telemetry.status import PoolFigures


def pool_figures(pool: asyncpg.Pool) -> PoolFigures:
    return PoolFigures(pool.get_size(), pool.get_idle_size(), pool.get_min_size(), pool.get_max_size())


async def pending_embeddings(pool: asyncpg.Pool, cap: int) -> int:
    """Memories waiting for an embedding, counted up to `cap`: the partial index on pending rows makes
    a small backlog an index-only count, and the cap bounds a large one."""
    async with translate_errors():
        count = await pool.fetchval(
            """SELECT count(*) FROM (
                   SELECT 1 FROM memories WHERE embedding_state = 'pending' LIMIT $1
               ) AS waiting""",
            cap,
        )
    return int(count)


class PlannerStatistics(OnPool):
    async def analyze_partition_of(self, tenant_id: str) -> None:
        """ANALYZE of the memories partition holding the tenant (none yet: nothing to do). It samples
        a fixed number of rows, so it takes about as long for any partition; the statement timeout of
        the pool is for requests, not for this."""
        async with translate_errors(), self._pool.acquire() as connection, connection.transaction():
            # tableoid::regclass prints the partition's name quoted as an identifier when it must be.
            partition = await connection.fetchval(
                "SELECT tableoid::regclass::text FROM memories WHERE tenant_id = $1 LIMIT 1", tenant_id
            )
            if partition is not None:
                await connection.execute("SET LOCAL statement_timeout = '60s'")
                await connection.execute(f"ANALYZE {partition}")
