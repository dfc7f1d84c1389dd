"""What every memories module shares: the WHERE builder, the visibility rule, the vector columns, and
the switch that leaves a statement no plan but the HNSW graph."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import Any, cast

import asyncpg

from hindsight_server.domain.model import (
    Kind,
    Tier,
    VectorSpace,
)

# A private memory is seen by the agent that wrote it only (private ones always carry an agent_id, so
# a caller without one sees shared memories alone). Every read by a caller applies it.
SEEN_BY = "(visibility = 'shared' OR agent_id = {agent})"

# The memories partition holding a tenant's rows (NULL while it has none): tableoid::regclass prints the
# partition's name, quoted as an identifier when it must be.
TENANT_PARTITION = "(SELECT tableoid::regclass FROM memories WHERE tenant_id = {tenant} LIMIT 1)"


def locked_in_order(matching: str) -> str:
    """A CTE `locked(tenant_id, id)` that row-locks the memories `matching` (FROM and WHERE clauses over
    `memories m`) in (tenant_id, id) order. A statement that updates many memories takes their locks
    through it first: two such statements over rows they share (the embedding worker completing a batch,
    a consolidation expiring a session's turns, the access counters) then wait for each other instead of
    each holding what the other needs, which PostgreSQL ends by aborting one (a deadlock, seen under
    the load test as an AppendTurn failing). The lock comes after the sort (LockRows above Sort), so
    the order holds; MATERIALIZED keeps the CTE from being folded into the statement's own plan."""
    return f"""locked AS MATERIALIZED (
        SELECT m.tenant_id, m.id {matching} ORDER BY m.tenant_id, m.id FOR UPDATE OF m)"""


# The memories of tenant $1 whose ids are in the uuid[] $2, locked in order.
LISTED_MEMORIES_LOCKED = locked_in_order("FROM memories m WHERE m.tenant_id = $1 AND m.id = ANY($2::uuid[])")


# The column holding each space's vectors (identifiers from this table only, never from a caller).
VECTOR_COLUMN = {
    VectorSpace.MULTILINGUAL: "embedding",
    VectorSpace.ENGLISH: "embedding_en",
    VectorSpace.CHINESE: "embedding_zh",
    VectorSpace.ENGLISH_CONTEXT: "embedding_en_ctx",
}


class OnPool:
    """A group of statements on the server's pool."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool


def pinned_plans(pool: asyncpg.Pool) -> asyncpg.Pool:
    """`pool`'s connections with pinned plans (store/pool.py, PINNED_PLANS): only for a statement whose
    one right plan is an HNSW walk or an index's order, never one that may need a sort."""
    return cast(asyncpg.Pool, pool.pinned)


class Sql:
    """Accumulates WHERE conditions with numbered parameters ($1, $2, ...)."""

    def __init__(self) -> None:
        self.args: list[Any] = []
        self.conditions: list[str] = []

    def param(self, value: Any) -> str:
        self.args.append(value)
        return f"${len(self.args)}"

    def where(self, condition: str) -> None:
        self.conditions.append(condition)

    @property
    def clause(self) -> str:
        return " AND ".join(self.conditions) if self.conditions else "TRUE"


def where_subject_tier_kind(sql: Sql, subject: str, tiers: Sequence[Tier], kinds: Sequence[Kind]) -> None:
    if subject:
        sql.where(f"subject = {sql.param(subject)}")
    if tiers:
        sql.where(f"tier = ANY({sql.param([t.value for t in tiers])}::text[])")
    if kinds:
        sql.where(f"kind = ANY({sql.param([k.value for k in kinds])}::text[])")


@contextlib.asynccontextmanager
async def graph_plans(connection: asyncpg.Connection) -> AsyncIterator[None]:
    """Inside a transaction: statements are planned with sorting off, so `ORDER BY vector <=> query` can
    only be served by the HNSW graph and `ORDER BY created_at DESC LIMIT n` by an index in that order (a
    write's search for its peers, inside the write's own transaction; a recall's searches run on the
    pool's pinned connections, `pinned_plans`).
    PostgreSQL's estimate of a scope's rows cannot be trusted to choose (it multiplies the tenant's and
    the subject's selectivities), and even with a right estimate it sorted 8,700 peers (50 ms) rather
    than walk the graph (1 ms); the caller chooses by the scope's counted size instead
    (domain/search_plan.py). Sorts that are the only plan still run."""
    await connection.execute("SET LOCAL enable_sort = off")
    yield
    await connection.execute("SET LOCAL enable_sort = on")
