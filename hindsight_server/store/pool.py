"""The asyncpg pool: pgvector's codec on every connection, a time budget on every statement, and beside
it a few connections whose plans are pinned (`PINNED_PLANS`)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import asyncpg
from pgvector.asyncpg import register_vector

from hindsight_server.store.budget import PoolExhausted, acquire_budget_s, connection_class
from hindsight_server.store.errors import translate_errors

log = logging.getLogger(__name__)

# The planner settings of a pool's `pinned` connections, for the statements that have one right plan
# whatever their parameters: an HNSW walk (`ORDER BY vector <=> query`) and look-ups by key or by an index's
# order (a session's neighbouring turns, a held scope's changes, the lexical statistics). With sorting off,
# the graph or the index's own order is the only plan without a sort; planned once per connection (a generic
# plan, partitions pruned when it starts), such a statement is one round trip. On the shared connections the
# same search took a transaction to switch sorting off for it (BEGIN, SET LOCAL, the search, COMMIT) and
# ~0.5-0.8 ms of planning per statement: 1.5 ms of PostgreSQL CPU a recall on one user's 10k memories
# (BENCHMARKS.md, "Pinned plans"). Nothing that may need a sort, or whose best plan depends on its values
# (the lexical channel's term selectivity, a small scope's exact search), runs on them.
PINNED_PLANS = {"enable_sort": "off", "plan_cache_mode": "force_generic_plan"}


class BoundedPool(asyncpg.Pool):  # type: ignore[misc]  # asyncpg has no type information
    """A pool whose every wait for a connection is bounded: by the caller's own timeout, else by
    `acquire_timeout_s` or the call's deadline, whichever is sooner. Without it a full pool queues calls
    without end, and a flood of one tenant's slow calls makes every other call wait behind them."""

    acquire_timeout_s: float = 1.0
    # The same database's connections with pinned plans (PINNED_PLANS); create_pool always opens them.
    pinned: BoundedPool | None = None

    async def _acquire(self, timeout: float | None) -> Any:  # noqa: ASYNC109  # asyncpg's own signature
        budget = acquire_budget_s(self.acquire_timeout_s) if timeout is None else timeout
        try:
            return await super()._acquire(budget)
        except TimeoutError as exc:
            raise PoolExhausted(budget) from exc

    async def close(self) -> None:
        await super().close()
        if self.pinned is not None:
            await self.pinned.close()

    def terminate(self) -> None:
        super().terminate()
        if self.pinned is not None:
            self.pinned.terminate()

    async def close_within(self, patience_s: float) -> None:
        """close(), which waits for every connection to come back, for at most `patience_s`; past it the
        connections are closed by force: a connection that is never given back must not hold a stop."""
        try:
            async with asyncio.timeout(patience_s):
                await self.close()
        except TimeoutError:
            log.error(
                "the database pool did not close within %g s: a connection was not given back; closing "
                "its connections by force",
                patience_s,
            )
            self.terminate()


async def _init_connection(connection: asyncpg.Connection) -> None:
    await register_vector(connection)


async def _keep_session(connection: asyncpg.Connection) -> None:
    """What the pool does to a released connection beyond rolling back an open transaction (which
    asyncpg always does): nothing. asyncpg's default also sends `SELECT pg_advisory_unlock_all(); CLOSE
    ALL; UNLISTEN *; RESET ALL`, a round trip on every release (~5 per recall, ~5 ms of a recall's wall
    time at 100k memories); the store leaves no session state behind to undo: it never SETs, LISTENs or
    keeps a cursor, and the one session-level lock (store/jobs.py) is released, or its connection
    ended, before the connection is given back."""


async def create_pool(
    dsn: str,
    *,
    min_size: int,
    max_size: int,
    statement_timeout_ms: int,
    connect_timeout_s: float,
    max_statement_timeout_ms: int,
    hnsw_ef_search: int = 100,
    traced: bool = False,
    acquire_timeout_s: float = 1.0,
    pinned_min_size: int = 0,
    pinned_max_size: int = 1,
) -> BoundedPool:
    """Opens the pool and its `pinned` connections (PINNED_PLANS; pinned_min_size..pinned_max_size of
    them); Unavailable when the database cannot be reached. `traced`: a span per statement
    (store/tracing.py), when tracing is on."""
    settings: dict[str, Any] = {
        # The server's backstop; each statement's own budget (store/budget.py) is the call's deadline, or
        # statement_timeout_ms outside a call, and asyncpg cancels it when that passes.
        "statement_timeout": str(max(statement_timeout_ms, max_statement_timeout_ms)),
        "application_name": "hindsight",
        # Filtered HNSW scans keep going until the LIMIT is met (pgvector >= 0.8), instead of silently
        # returning fewer rows when the tenant filter discards candidates (docs/environment.md, "Traps").
        "hnsw.iterative_scan": "relaxed_order",
        "hnsw.ef_search": str(hnsw_ef_search),
        # Recall's statements are short: compiling the larger ones (BM25) cost more than it saved.
        "jit": "off",
        # asyncpg prepares every statement, and after five runs PostgreSQL may switch to one generic plan
        # that cannot see the tenant: for the vector channel it then filters by the tenant index and
        # sorts (right for a small tenant, 170-430 ms instead of 13 ms through HNSW for one of 19,000
        # memories at 100k). A custom plan per call costs ~0.8 ms of planning and is right for each.
        "plan_cache_mode": "force_custom_plan",
    }
    # A class per pool: asyncpg builds the pool in its constructor, which takes no extra arguments.
    pool_class = type("BoundedPool", (BoundedPool,), {"acquire_timeout_s": acquire_timeout_s})
    connection_type = connection_class(statement_timeout_ms / 1000, max_statement_timeout_ms / 1000, traced)

    async def opened(least: int, most: int, planner: dict[str, str]) -> BoundedPool:
        async with translate_errors():
            pool: BoundedPool = await pool_class(
                dsn,
                min_size=least,
                max_size=most,
                timeout=connect_timeout_s,
                command_timeout=None,
                server_settings={**settings, **planner},
                init=_init_connection,
                reset=_keep_session,
                connection_class=connection_type,
                # asyncpg.create_pool's defaults, which the class itself does not have.
                max_queries=50_000,
                max_inactive_connection_lifetime=300.0,
                loop=None,
                record_class=asyncpg.Record,
            )
        return pool

    pool = await opened(min_size, max_size, {})
    try:
        pool.pinned = await opened(min(pinned_min_size, pinned_max_size), pinned_max_size, PINNED_PLANS)
    except BaseException:
        pool.terminate()
        raise
    return pool
