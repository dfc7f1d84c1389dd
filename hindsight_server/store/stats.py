"""Figures about the store for `hindsight status` and the metrics (the pool's connections, the
deferred-embedding backlog), and the planner's statistics of a tenant's partition."""

from __future__ import annotations

import asyncpg

from hindsight_server.store.embeddings import CONTEXT_DUE
from hindsight_server.store.errors import translate_errors
from hindsight_server.store.sql import TENANT_PARTITION, OnPool
from hindsight_server.telemetry.status import PoolFigures

ANALYZE_TIMEOUT_S = 60.0


def pool_figures(pool: asyncpg.Pool) -> PoolFigures:
    """The server's connections to its database: the pool's and its pinned ones (store/pool.py) together."""
    pools = [p for p in (pool, getattr(pool, "pinned", None)) if p is not None]
    return PoolFigures(
        sum(p.get_size() for p in pools),
        sum(p.get_idle_size() for p in pools),
        sum(p.get_min_size() for p in pools),
        sum(p.get_max_size() for p in pools),
    )


async def pending_embeddings(pool: asyncpg.Pool, cap: int, *, contexts: bool = False) -> int:
    """Memories waiting for an embedding (with `contexts`, the deployment's English context vectors too),
    counted up to `cap`: the partial indexes on the rows waiting make a small backlog an index-only
    count, and the cap bounds a large one."""
    waiting_context = f"UNION ALL SELECT 1 FROM memories WHERE {CONTEXT_DUE}" if contexts else ""
    async with translate_errors():
        count = await pool.fetchval(
            f"""SELECT count(*) FROM (
                   SELECT 1 FROM memories WHERE embedding_state = 'pending' {waiting_context} LIMIT $1
               ) AS waiting""",
            cap,
        )
    return int(count)


class PlannerStatistics(OnPool):
    async def analyze_partition_of(self, tenant_id: str) -> None:
        """ANALYZE of the memories partition holding the tenant (none yet: nothing to do). It samples
        a fixed number of rows, so it takes about as long for any partition; it gets ANALYZE_TIMEOUT_S,
        not the budget of the pool's other work outside a call (store/budget.py)."""
        async with translate_errors():
            partition = await self._pool.fetchval(
                f"SELECT {TENANT_PARTITION.format(tenant='$1')}::text", tenant_id
            )
            if partition is not None:
                await self._pool.execute(f"ANALYZE {partition}", timeout=ANALYZE_TIMEOUT_S)
