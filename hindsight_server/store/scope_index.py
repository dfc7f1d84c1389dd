"""What a server's index of a subject or of a whole tenant (domain/scope_index.py, subject "") reads: its
memories a page at a time, and at each recall what changed since it last looked (migration 0022 says why
nothing is missed; 0023 indexes the changes by tenant)."""

from __future__ import annotations

from collections.abc import Sequence

import asyncpg

from hindsight_server.domain.scope_index import IndexedMemory, ScopeChanges
from hindsight_server.store.errors import translate_errors
from hindsight_server.store.rows import MEMORY_COLUMNS, memory_from_row
from hindsight_server.store.sql import VECTOR_COLUMN, OnPool, pinned_plans

__all__ = ["ScopeIndexRows"]

# Every column an indexed memory is built from: the memory, its vectors, its lexemes with the number of
# positions of each (unnest walks a tsvector in the order tsvector_to_array lists it) and its length.
_INDEXED_COLUMNS = f"""{MEMORY_COLUMNS}, {", ".join(VECTOR_COLUMN.values())}, lexical_terms,
    coalesce(tsvector_to_array(lexical), '{{}}') AS lexemes,
    coalesce(ARRAY(SELECT cardinality(u.positions) FROM unnest(lexical) AS u), '{{}}') AS counts"""

# The horizon of the statement's snapshot: every transaction below it has ended (store/feed.py).
_HORIZON = "pg_snapshot_xmin(pg_current_snapshot())::text"


def _in_scope(subject: str) -> str:
    """The scope's filter beside `tenant_id = $1`, its subject being $2: one text per kind of scope,
    so each statement is planned on the index that serves it (a subject's, or the tenant's)."""
    return "AND $2::text = ''" if subject == "" else "AND subject = $2"


def _indexed(row: asyncpg.Record) -> IndexedMemory:
    vectors = {
        space: row[column].to_numpy() for space, column in VECTOR_COLUMN.items() if row[column] is not None
    }
    return IndexedMemory(
        memory_from_row(row), vectors, row["lexemes"], row["counts"], row["lexical_terms"] or 0
    )


class ScopeIndexRows(OnPool):
    async def horizon(self) -> int:
        async with translate_errors():
            return int(await self._pool.fetchval(f"SELECT {_HORIZON}"))

    async def scope_rows(self, tenant_id: str, subject: str, limit: int) -> int:
        """How many memories the subject (the tenant, for "") holds, every status, counted up to `limit`
        (by the created_at index; no row is read)."""
        async with translate_errors():
            return int(
                await self._pool.fetchval(
                    f"""SELECT count(*) FROM (SELECT 1 FROM memories
                                             WHERE tenant_id = $1 {_in_scope(subject)} LIMIT $3) AS held""",
                    tenant_id,
                    subject,
                    limit,
                )
            )

    async def subject_page(
        self, tenant_id: str, subject: str, after: IndexedMemory | None, limit: int
    ) -> list[IndexedMemory]:
        """The subject's memories (every status; the tenant's, for the subject ""), newest first, after
        `after` in that order (the subject's or the tenant's created_at index), at most `limit`."""
        created, memory_id = (None, None) if after is None else (after.memory.created_at, after.memory.id)
        async with translate_errors():
            rows = await self._pool.fetch(
                f"""SELECT {_INDEXED_COLUMNS} FROM memories
                    WHERE tenant_id = $1 {_in_scope(subject)}
                      AND ($3::timestamptz IS NULL OR (created_at, id) < ($3::timestamptz, $4::uuid))
                    ORDER BY created_at DESC, id DESC LIMIT $5""",
                tenant_id,
                subject,
                created,
                memory_id,
                limit,
            )
        return [_indexed(row) for row in rows]

    async def changes(self, tenant_id: str, subject: str, since: int, limit: int) -> ScopeChanges:
        """What changed in the subject (the tenant, for the subject "") since the horizon `since`: at
        most `limit` ids (more: the caller builds again rather than read them one by one). Every recall
        of a held scope asks it: on the pinned connections (look-ups by key, one plan whatever the
        values), 0.09 ms of PostgreSQL's CPU against 0.25 ms planned for each call."""
        async with translate_errors():
            row = await pinned_plans(self._pool).fetchrow(
                f"""SELECT {_HORIZON} AS horizon,
                           coalesce((SELECT removed_xid >= $3::text::xid8 FROM scope_removals
                                     WHERE tenant_id = $1), false) AS removed,
                           ARRAY(SELECT id::text FROM memories
                                 WHERE tenant_id = $1 {_in_scope(subject)} AND change_xid >= $3::text::xid8
                                 LIMIT $4) AS changed""",
                tenant_id,
                subject,
                str(since),
                limit,
            )
        return ScopeChanges(int(row["horizon"]), bool(row["removed"]), list(row["changed"]))

    async def indexed(self, tenant_id: str, memory_ids: Sequence[str]) -> list[IndexedMemory]:
        """The given memories of the tenant, by key (on the pinned connections, as `changes`)."""
        async with translate_errors():
            rows = await pinned_plans(self._pool).fetch(
                f"""SELECT {_INDEXED_COLUMNS} FROM memories
                    WHERE tenant_id = $1 AND id = ANY($2::uuid[])""",
                tenant_id,
                list(memory_ids),
            )
        return [_indexed(row) for row in rows]
