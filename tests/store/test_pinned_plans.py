"""The connections with pinned plans (store/pool.py, PINNED_PLANS): the HNSW search and the context
look-up run there, each in one round trip, with the only plans they should ever have."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import numpy as np

from hindsight.client import HindsightClient, memory_input
from hindsight_server.domain.model import Scope, VectorSpace
from hindsight_server.process.running import RunningServer
from hindsight_server.store.channels import RecallChannels, vector_statement
from hindsight_server.store.pool import BoundedPool, create_pool
from hindsight_server.store.scope_index import ScopeIndexRows
from hindsight_server.store.sql import pinned_plans
from tests.support.plans import index_scans


async def _small_pool(dsn: str) -> BoundedPool:
    """Two shared connections and one pinned."""
    return await create_pool(
        dsn,
        min_size=1,
        max_size=2,
        statement_timeout_ms=5_000,
        max_statement_timeout_ms=5_000,
        connect_timeout_s=5,
        pinned_min_size=1,
        pinned_max_size=1,
    )


async def test_pinned_connections_cannot_sort_and_plan_each_statement_once(server: RunningServer) -> None:
    pinned = await pinned_plans(server.pool).fetchrow(
        "SELECT current_setting('enable_sort') AS sort, current_setting('plan_cache_mode') AS plans,"
        " current_setting('hnsw.iterative_scan') AS scan, current_setting('jit') AS jit"
    )
    assert dict(pinned) == {
        "sort": "off",
        "plans": "force_generic_plan",
        "scan": "relaxed_order",
        "jit": "off",
    }
    shared = await server.pool.fetchval("SELECT current_setting('enable_sort')")
    assert shared == "on"


async def test_the_vector_search_walks_the_graph_on_the_pinned_connections_only(
    server: RunningServer, client: HindsightClient, tenant: str
) -> None:
    # A tenant of three memories: on the shared connections the planner reads them and sorts (cheaper
    # for so few, as it wrongly judged for a subject among 8,700 of a large tenant); on the pinned ones
    # the graph is the only plan, whatever the estimate.
    await client.write_batch(
        tenant,
        [
            memory_input(f"ann went to lake {i}", tier="episodic", kind="event", subject="ann")
            for i in range(3)
        ],
        verbatim=True,
    )
    dimension = await server.pool.fetchval(
        "SELECT atttypmod FROM pg_attribute WHERE attrelid = 'memories'::regclass AND attname = 'embedding'"
    )
    scope = Scope(tenant_id=tenant, now=datetime.now(UTC), subject="ann")
    query = np.full(dimension, 0.1, np.float32)
    space = VectorSpace.MULTILINGUAL
    statement, args = vector_statement(scope, query, 10, space, [space], exact=False, without_english=False)

    async def scanned_indexes(pool: Any) -> list[str]:
        plan = json.loads(await pool.fetchval(f"EXPLAIN (FORMAT JSON) {statement}", *args))
        return [node["Index Name"] for node in index_scans(plan) if node["Node Type"] == "Index Scan"]

    assert not [name for name in await scanned_indexes(server.pool) if name.endswith("_embedding_idx")]
    walked = await scanned_indexes(pinned_plans(server.pool))
    assert len(walked) == 1 and walked[0].endswith("_embedding_idx"), walked
    rows = await pinned_plans(server.pool).fetch(statement, *args)  # no vectors without an inference tier
    assert rows == []


async def test_a_held_scopes_look_and_the_lexical_statistics_are_planned_once_on_the_pinned_connections(
    postgres_dsn: str,
) -> None:
    """Every recall of a held scope asks what changed and reads the tenant's term statistics: look-ups by
    key, planned once (a generic plan) on the pinned connection, not planned again for each call."""
    pool = await _small_pool(postgres_dsn)
    try:
        rows, channels = ScopeIndexRows(pool), RecallChannels(pool)
        since = await rows.horizon()
        for _ in range(3):
            assert (await rows.changes("nobody", "ann", since, 10)).changed == []
            assert await channels.term_statistics("nobody", ["lake"]) is None
        plans = await pinned_plans(pool).fetch(
            "SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements"
            " WHERE (statement LIKE '%FROM scope_removals%' OR statement LIKE '%JOIN lexical_df%')"
            " AND statement NOT LIKE '%pg_prepared_statements%'"
        )
    finally:
        await pool.close()
    assert len(plans) == 2, plans
    assert all(plan["generic_plans"] == 3 and plan["custom_plans"] == 0 for plan in plans), plans


async def test_a_pool_closes_and_terminates_its_pinned_connections(postgres_dsn: str) -> None:
    for ending in ("close", "terminate"):
        pool = await _small_pool(postgres_dsn)
        assert pool.pinned is not None
        assert await pool.pinned.fetchval("SELECT current_setting('enable_sort')") == "off"
        if ending == "close":
            await pool.close()
        else:
            pool.terminate()
        assert pool.is_closing() and pool.pinned.is_closing()
