"""The embedding queue shared between tenants (store/embeddings.py, migration 0025): a tenant's long
backlog delays another tenant's memories by one claim, not by the backlog; with more tenants waiting than
a claim takes, each gets its turn; and finding the tenants reads one entry of the queue's index a tenant,
not their rows."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from hindsight_server.domain.model import EmbeddingState, VectorSpace
from hindsight_server.domain.vectors import ClaimRequest
from hindsight_server.store.embeddings import WAITING_TENANTS
from hindsight_server.store.memories import MemoryStore
from hindsight_server.store.migrate import EmbeddingDimensions, SchemaShape, migrate
from hindsight_server.store.pool import BoundedPool, create_pool
from tests.domain.builders import numbered

SHAPE = SchemaShape(EmbeddingDimensions(multilingual=3, english=2, chinese=2), 4)
LEASE = timedelta(minutes=5)
T0 = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture
async def pool(fresh_database: Callable[[], Awaitable[str]]) -> AsyncIterator[BoundedPool]:
    dsn = await fresh_database()
    await migrate(dsn, SHAPE)
    opened = await create_pool(
        dsn,
        min_size=1,
        max_size=2,
        statement_timeout_ms=5_000,
        connect_timeout_s=5,
        max_statement_timeout_ms=5_000,
    )
    yield opened
    await opened.close()


_numbers = iter(range(1, 1_000_000))


async def _queue(store: MemoryStore, tenant: str, count: int, first_minute: int) -> None:
    """`count` pending memories of `tenant`, written a minute apart from `first_minute`."""
    await store.insert(
        [
            numbered(
                next(_numbers),
                tenant_id=tenant,
                content=f"{tenant} {n}",
                embedding_state=EmbeddingState.PENDING,
                created_at=T0 + timedelta(minutes=first_minute + n),
            )
            for n in range(count)
        ]
    )


async def _claim(store: MemoryStore, limit: int, after: str = "") -> tuple[set[str], bool, str]:
    english = frozenset({VectorSpace.ENGLISH})
    claim = await store.claim_pending_embeddings(ClaimRequest(limit, LEASE, english, english, after))
    return {row.content for row in claim.rows}, claim.more, claim.last_tenant


async def test_a_long_backlog_shares_the_next_claim_with_a_tenant_that_queued_after_it(
    pool: BoundedPool,
) -> None:
    store = MemoryStore(pool)
    await _queue(store, "flood", 40, first_minute=0)
    await _queue(store, "quiet", 1, first_minute=100)  # after every one of the flood's
    # Each its share first (two), then the flood the rest of the batch: a full batch, more may be due.
    assert await _claim(store, 4) == ({"flood 0", "flood 1", "flood 2", "quiet 0"}, True, "quiet")
    # The quiet tenant's row is leased: it takes no share, and the flood the whole batch.
    assert await _claim(store, 4, after="quiet") == (
        {"flood 3", "flood 4", "flood 5", "flood 6"},
        True,
        "flood",
    )


async def test_a_batch_is_full_whenever_enough_rows_are_due(pool: BoundedPool) -> None:
    store = MemoryStore(pool)
    for tenant, count in (("a", 1), ("b", 2), ("c", 30)):
        await _queue(store, tenant, count, first_minute=0)
    english = frozenset({VectorSpace.ENGLISH})
    claim = await store.claim_pending_embeddings(ClaimRequest(12, LEASE, english, english))
    order = [row.content for row in claim.rows]
    # Shares of 4: a gives 1, b 2, c 4; the 5 left go to c, the one that had more, after every share
    # (the worker embeds in this order).
    assert set(order[:7]) == {"a 0", "b 0", "b 1", "c 0", "c 1", "c 2", "c 3"}
    assert order[7:] == [f"c {n}" for n in range(4, 9)] and claim.more
    claimed, more, _ = await _claim(store, 32)
    assert claimed == {f"c {n}" for n in range(9, 30)} and not more  # 21 of 32: the queue ran dry


async def test_with_more_tenants_waiting_than_a_claim_takes_each_gets_its_turn(pool: BoundedPool) -> None:
    store = MemoryStore(pool)
    for minute, tenant in enumerate(("a", "b", "c")):
        await _queue(store, tenant, 2, first_minute=10 * minute)
    turns = []
    after = ""
    for _ in range(4):
        claimed, more, after = await _claim(store, 2, after)
        turns.append((claimed, more))
    assert turns == [
        ({"a 0", "b 0"}, True),  # two tenants a claim: c waits one turn
        ({"c 0", "a 1"}, True),  # after b: c, then round to a
        ({"b 1", "c 1"}, True),
        (set(), False),  # every row leased: nothing more is due
    ]


async def test_rows_leased_or_backing_off_are_not_claimed_and_an_empty_queue_claims_nothing(
    pool: BoundedPool,
) -> None:
    store = MemoryStore(pool)
    assert await _claim(store, 8) == (set(), False, "")
    await _queue(store, "t", 3, first_minute=0)
    assert await _claim(store, 2) == ({"t 0", "t 1"}, True, "t")
    assert await _claim(store, 8, after="t") == ({"t 2"}, False, "t")
    assert await _claim(store, 8, after="t") == (set(), False, "t")


async def test_rows_waiting_for_a_model_that_is_away_make_no_claim_that_asks_for_more(
    pool: BoundedPool,
) -> None:
    """English rows that have their multilingual vector and lack only the English one, while the English
    model is away: their tenants are waiting, but nothing can be claimed, and the worker must pause
    rather than ask again at once."""
    store = MemoryStore(pool)
    for tenant in ("a", "b"):
        memories = [
            numbered(
                next(_numbers),
                tenant_id=tenant,
                content=f"The user wrote note {n} in English",
                embedding_state=EmbeddingState.PENDING,
                created_at=T0 + timedelta(minutes=n),
            )
            for n in range(2)
        ]
        await store.insert(
            memories, {VectorSpace.MULTILINGUAL: [np.array([1.0, 0.0, 0.0], np.float32)] * len(memories)}
        )
    english = frozenset({VectorSpace.ENGLISH})
    away = await store.claim_pending_embeddings(ClaimRequest(2, LEASE, english, frozenset()))
    assert (away.rows, away.more) == ([], False)
    back = await store.claim_pending_embeddings(ClaimRequest(2, LEASE, english, english))
    assert len(back.rows) == 2 and back.more


async def test_finding_the_tenants_reads_one_index_entry_a_tenant_however_long_their_backlogs(
    pool: BoundedPool,
) -> None:
    store = MemoryStore(pool)
    for tenant in ("big", "bigger"):
        await _queue(store, tenant, 500, first_minute=0)
    await _queue(store, "small", 1, first_minute=0)
    async with pool.acquire() as connection:
        await connection.execute("ANALYZE memories")
        plan = json.loads(
            await connection.fetchval(f"EXPLAIN (ANALYZE, FORMAT JSON) {WAITING_TENANTS}", "", None, 256)
        )
    assert _rows_read(plan) < 100  # ~one probe per partition and tenant; 1,001 rows wait


def _rows_read(plan: object) -> int:
    """Rows the plan's scans of the memories table returned, summed over every loop."""
    if isinstance(plan, list):
        return sum(_rows_read(node) for node in plan)
    if not isinstance(plan, dict):
        return 0
    scans_memories = plan.get("Relation Name", "").startswith("memories")
    own = plan["Actual Rows"] * plan["Actual Loops"] if scans_memories else 0
    nested = plan.get("Plans", []) + ([plan["Plan"]] if "Plan" in plan else [])
    return int(own) + _rows_read(nested)
