"""What the lifecycle jobs left in the database, read directly: statuses, audit rows, BM25 statistics."""

from __future__ import annotations

from typing import Any

import asyncpg


async def statuses(pool: asyncpg.Pool, tenant: str) -> dict[str, str]:
    rows = await pool.fetch("SELECT id, status FROM memories WHERE tenant_id = $1", tenant)
    return {str(row["id"]): row["status"] for row in rows}


async def audit_rows(pool: asyncpg.Pool, tenant: str) -> list[dict[str, Any]]:
    rows = await pool.fetch("SELECT * FROM purge_audit WHERE tenant_id = $1 ORDER BY memory_id", tenant)
    return [dict(row) | {"memory_id": str(row["memory_id"])} for row in rows]


async def bm25_statistics(pool: asyncpg.Pool, tenant: str) -> tuple[Any, Any]:
    """(kept, recounted): the tenant's BM25 statistics as the writes and jobs kept them, and as a
    count over its rows now gives them; equal when the upkeep is right."""
    stats = await pool.fetchrow("SELECT documents, terms FROM lexical_stats WHERE tenant_id = $1", tenant)
    df = await pool.fetch("SELECT term, df FROM lexical_df WHERE tenant_id = $1", tenant)
    recounted = await pool.fetchrow(
        """SELECT count(*) AS documents, coalesce(sum(lexical_terms), 0) AS terms
           FROM memories WHERE tenant_id = $1""",
        tenant,
    )
    recounted_df = await pool.fetch(
        """SELECT term, count(*) AS df FROM memories, unnest(tsvector_to_array(lexical)) AS term
           WHERE tenant_id = $1 GROUP BY term""",
        tenant,
    )
    kept = (
        (stats["documents"], stats["terms"]) if stats else (0, 0),
        {row["term"]: row["df"] for row in df},
    )
    counted = (
        (recounted["documents"], recounted["terms"]),
        {row["term"]: row["df"] for row in recounted_df},
    )
    return kept, counted
