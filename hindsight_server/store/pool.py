"""The asyncpg pool: pgvector's codec on every connection, a time budget on every statement."""

from __future__ import annotations

from typing import Any

import asyncpg
from pgvector.asyncpg import register_vector

from hindsight_server.store.budget import connection_class
from hindsight_server.store.errors import translate_errors


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
) -> asyncpg.Pool:
    """Opens the pool; Unavailable when the database cannot be reached. `traced`: a span per statement
    (store/tracing.py), when tracing is on."""
    settings: dict[str, Any] = {
        # The server's backstop; each statement's own budget (store/budget.py) is the call's deadline, or
        # statement_timeout_ms outside a call, and asyncpg cancels it when that passes.
        "statement_timeout": str(max(statement_timeout_ms, max_statement_timeout_ms)),
        "application_name": "hindsight",
        # Filtered HNSW scans keep going until the LIMIT is met (pgvector >= 0.8), instead of silently
        # returning fewer rows when the tenant filter discards candidates (ENVIRONMENT.md: 11.7 of 20).
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
    async with translate_errors():
        pool: asyncpg.Pool = await asyncpg.create_pool(
            dsn,
            min_size=min_size,
            max_size=max_size,
            timeout=connect_timeout_s,
            command_timeout=None,
            server_settings=settings,
            init=_init_connection,
            reset=_keep_session,
            connection_class=connection_class(
                statement_timeout_ms / 1000, max_statement_timeout_ms / 1000, traced
            ),
        )
    return pool
