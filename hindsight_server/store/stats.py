"""Figures about the store for `hindsight status` and the metrics: the pool's connections and the
deferred-embedding backlog."""

from __future__ import annotations

import asyncpg

from hindsight_server.store.errors import translate_errors
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
