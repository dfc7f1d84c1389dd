"""Statements that update many memories lock them in one order (store/sql.py, `locked_in_order`), so two
of them over shared rows wait for each other instead of deadlocking.

Under the load test an AppendTurn once failed with INTERNAL: its consolidation expired the session's
turn memories while the embedding worker completed a batch holding some of them, each statement locking
in its own order, and PostgreSQL aborted one. Here the collision is made certain: a third transaction
holds the middle row while the worker's statement (given the rows in descending id order) and a
consolidation's expiry (ascending) queue up behind it; when it lets go, statements locking in their
callers' orders would each hold what the other needs."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta

import asyncpg
import numpy as np
import pytest

from hindsight_server.domain.errors import Aborted
from hindsight_server.domain.model import EmbeddingState, VectorSpace
from hindsight_server.domain.vectors import ClaimRequest, PendingEmbedding
from hindsight_server.store.memories import MemoryStore
from hindsight_server.store.migrate import EmbeddingDimensions, SchemaShape, migrate
from hindsight_server.store.pool import create_pool
from tests.domain.builders import numbered

SHAPE = SchemaShape(EmbeddingDimensions(multilingual=3, english=2, chinese=2), 4)
T0 = datetime(2026, 1, 1, tzinfo=UTC)
TENANT = "acme"
ROWS = 9


@pytest.fixture
async def dsn(fresh_database: Callable[[], Awaitable[str]]) -> str:
    dsn = await fresh_database()
    await migrate(dsn, SHAPE)
    return dsn


@pytest.fixture
async def store(dsn: str) -> AsyncIterator[MemoryStore]:
    pool = await create_pool(
        dsn,
        min_size=1,
        max_size=4,
        statement_timeout_ms=10_000,
        connect_timeout_s=5,
        max_statement_timeout_ms=10_000,
    )
    yield MemoryStore(pool)
    await pool.close()


async def _claimed(store: MemoryStore) -> list[PendingEmbedding]:
    await store.insert(
        [
            numbered(
                n,
                tenant_id=TENANT,
                content=f"turn {n}",
                embedding_state=EmbeddingState.PENDING,
                created_at=T0 + timedelta(minutes=n),
            )
            for n in range(1, ROWS + 1)
        ]
    )
    both = frozenset({VectorSpace.ENGLISH})
    claim = await store.claim_pending_embeddings(ClaimRequest(ROWS, timedelta(minutes=5), both, both))
    assert len(claim.rows) == ROWS
    return claim.rows


async def _waiting_for_locks(monitor: asyncpg.Connection, count: int) -> None:
    for _ in range(500):
        waiting = await monitor.fetchval(
            """SELECT count(*) FROM pg_stat_activity
               WHERE wait_event_type = 'Lock' AND datname = current_database()"""
        )
        if waiting >= count:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{count} statements never queued behind the held row")


def _completing(store: MemoryStore, rows: list[PendingEmbedding]) -> Callable[[], Awaitable[None]]:
    vectors = {row.memory_id: np.ones(3, dtype=np.float32) for row in rows}
    english = {row.memory_id: np.ones(2, dtype=np.float32) for row in rows}
    return lambda: store.complete(rows, {VectorSpace.MULTILINGUAL: vectors, VectorSpace.ENGLISH: english}, {})


def _counting_accesses(store: MemoryStore, rows: list[PendingEmbedding]) -> Callable[[], Awaitable[None]]:
    return lambda: store.record_access([(TENANT, row.memory_id, 1, T0) for row in rows])


@pytest.mark.parametrize(
    "batch_statement", [_completing, _counting_accesses], ids=["complete", "record_access"]
)
async def test_a_batch_and_an_expiry_over_the_same_rows_wait_for_each_other(
    dsn: str,
    store: MemoryStore,
    batch_statement: Callable[[MemoryStore, list[PendingEmbedding]], Callable[[], Awaitable[None]]],
) -> None:
    rows = sorted(await _claimed(store), key=lambda row: row.memory_id, reverse=True)
    middle = rows[ROWS // 2].memory_id
    holder, monitor = await asyncpg.connect(dsn), await asyncpg.connect(dsn)
    try:
        hold = holder.transaction()
        await hold.start()
        await holder.execute(
            "SELECT 1 FROM memories WHERE tenant_id = $1 AND id = $2 FOR UPDATE", TENANT, middle
        )
        batch = asyncio.ensure_future(batch_statement(store, rows)())
        await _waiting_for_locks(monitor, 1)
        expiry = asyncio.ensure_future(
            store.expire_now(TENANT, sorted(row.memory_id for row in rows), T0 + timedelta(hours=1))
        )
        await _waiting_for_locks(monitor, 2)
        await hold.commit()
        # Both finish; a deadlock would end one of them with DeadlockDetectedError after ~1 s.
        await asyncio.wait_for(asyncio.gather(batch, expiry), timeout=10)
    finally:
        await holder.close()
        await monitor.close()
    for row in rows:
        assert (await store.get(TENANT, row.memory_id)).expires_at == T0 + timedelta(hours=1)


async def test_a_deadlock_the_order_cannot_prevent_reaches_the_caller_as_aborted(
    dsn: str, store: MemoryStore
) -> None:
    """A transaction outside the order (here: holding the last row, then asking for the first) can still
    close a cycle; the statement PostgreSQL ends for it says ABORTED (retry), not INTERNAL."""
    rows = sorted(await _claimed(store), key=lambda row: row.memory_id)
    first, last = rows[0].memory_id, rows[-1].memory_id
    lock = "SELECT 1 FROM memories WHERE tenant_id = $1 AND id = $2 FOR UPDATE"
    holder, monitor = await asyncpg.connect(dsn), await asyncpg.connect(dsn)
    try:
        async with holder.transaction():
            await holder.execute(lock, TENANT, last)
            expiry = asyncio.ensure_future(store.expire_now(TENANT, [row.memory_id for row in rows], T0))
            await _waiting_for_locks(monitor, 1)  # it holds the first row and waits for the last
            # The expiry waited first, so its deadlock check runs first and ends it; this one then
            # gets the first row.
            await holder.execute(lock, TENANT, first)
            with pytest.raises(Aborted, match="collided with a concurrent change"):
                await expiry
    finally:
        await holder.close()
        await monitor.close()
    for row in rows:  # nothing of the ended statement was written
        assert (await store.get(TENANT, row.memory_id)).expires_at is None
