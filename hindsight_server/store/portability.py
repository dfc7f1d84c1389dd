"""Reading a tenant's memories for an export: one REPEATABLE READ snapshot for the whole stream, pages
by id (the primary key's order, so each page is an index range and the server's memory stays one page
however large the tenant)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import asyncpg

from hindsight_server.domain.portability import CURRENT_STATUSES, ExportQuery, PortableMemory
from hindsight_server.store.errors import translate_errors
from hindsight_server.store.rows import MEMORY_COLUMNS, memory_from_row
from hindsight_server.store.sql import SEEN_BY, VECTOR_COLUMN, OnPool, Sql, where_subject_tier_kind


class ExportSnapshot:
    def __init__(self, connection: asyncpg.Connection, query: ExportQuery) -> None:
        self._connection = connection
        self._query = query

    def _where(self, sql: Sql, after_id: str | None) -> None:
        query = self._query
        sql.where(f"tenant_id = {sql.param(query.tenant_id)}")
        if query.subject is not None:
            sql.where(f"subject = {sql.param(query.subject)}")
        if query.viewer is not None:
            sql.where(SEEN_BY.format(agent=sql.param(query.viewer)))
        where_subject_tier_kind(sql, "", query.tiers, query.kinds)  # the subject: above ("" is one)
        if query.window.start is not None:
            sql.where(f"created_at >= {sql.param(query.window.start)}")
        if query.window.end is not None:
            sql.where(f"created_at < {sql.param(query.window.end)}")
        if not query.include_history:
            sql.where(f"status = ANY({sql.param([s.value for s in CURRENT_STATUSES])}::text[])")
        if after_id is not None:
            sql.where(f"id > {sql.param(after_id)}::uuid")

    async def count(self) -> int:
        sql = Sql()
        self._where(sql, self._query.after_id)
        async with translate_errors():
            counted: int = await self._connection.fetchval(
                f"SELECT count(*) FROM memories WHERE {sql.clause}", *sql.args
            )
        return counted

    async def pages(self, page_size: int) -> AsyncIterator[list[PortableMemory]]:
        vectors = (
            "".join(f", {column}" for column in VECTOR_COLUMN.values())
            if self._query.include_embeddings
            else ""
        )
        after = self._query.after_id
        while True:
            sql = Sql()
            self._where(sql, after)
            limit = sql.param(page_size)
            async with translate_errors():
                rows = await self._connection.fetch(
                    f"""SELECT {MEMORY_COLUMNS}{vectors} FROM memories WHERE {sql.clause}
                        ORDER BY id LIMIT {limit}""",
                    *sql.args,
                )
            if not rows:
                return
            yield [_portable(row, bool(vectors)) for row in rows]
            after = str(rows[-1]["id"])


def _portable(row: asyncpg.Record, with_vectors: bool) -> PortableMemory:
    if not with_vectors:
        return PortableMemory(memory_from_row(row))
    found = {
        space: row[column].to_numpy() for space, column in VECTOR_COLUMN.items() if row[column] is not None
    }
    return PortableMemory(memory_from_row(row), found)


class PortabilityStore(OnPool):
    @contextlib.asynccontextmanager
    async def snapshot(self, query: ExportQuery) -> AsyncIterator[ExportSnapshot]:
        """One connection and one read-only REPEATABLE READ transaction for the whole export: every page
        sees the database as it was when the export began, whatever is written meanwhile."""
        async with (
            translate_errors(),
            self._pool.acquire() as connection,
            connection.transaction(isolation="repeatable_read", readonly=True),
        ):
            yield ExportSnapshot(connection, query)
