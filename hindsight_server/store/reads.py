"""Reading memories by id, by version chain and by page. Every statement filters on tenant_id."""

from __future__ import annotations

from hindsight_server.domain.errors import NotFound
from hindsight_server.domain.model import (
    ListQuery,
    Memory,
    Page,
    PageCursor,
)
from hindsight_server.store.errors import translate_errors
from hindsight_server.store.rows import MEMORY_COLUMNS, memory_from_row
from hindsight_server.store.sql import SEEN_BY, OnPool, Sql, where_subject_tier_kind

# The longest version chain History walks each way from the memory asked for (a user's address does not
# change ten thousand times; a longer chain is a fault, and its walk is still bounded).
MAX_HISTORY_STEPS = 10_000


class MemoryReads(OnPool):
    async def ping(self) -> None:
        async with translate_errors():
            await self._pool.fetchval("SELECT 1")

    async def history(self, tenant_id: str, memory_id: str, agent_id: str = "") -> list[Memory]:
        """The version chain through a memory, oldest first: what it superseded, back to the first
        version, and what superseded it, up to the latest; at most MAX_HISTORY_STEPS each way. The
        CYCLE clauses end the walk on a loop: links are checked when written (store/writes.py), but a
        walk that never ends would hold a connection and a database core until its deadline."""
        async with translate_errors():
            rows = await self._pool.fetch(
                f"""WITH RECURSIVE older AS (
                        SELECT id, supersedes, 0 AS step FROM memories WHERE tenant_id = $1 AND id = $2
                        UNION ALL
                        SELECT m.id, m.supersedes, o.step - 1 FROM memories m
                        JOIN older o ON m.id = o.supersedes
                        WHERE m.tenant_id = $1 AND o.step > -$4::int
                    ) CYCLE id SET looped USING visited,
                    newer AS (
                        SELECT id, superseded_by, 0 AS step FROM memories WHERE tenant_id = $1 AND id = $2
                        UNION ALL
                        SELECT m.id, m.superseded_by, n.step + 1 FROM memories m
                        JOIN newer n ON m.id = n.superseded_by
                        WHERE m.tenant_id = $1 AND n.step < $4::int
                    ) CYCLE id SET looped USING visited,
                    chain AS (SELECT id, min(step) AS step FROM (
                        SELECT id, step FROM older WHERE NOT looped
                        UNION ALL SELECT id, step FROM newer WHERE NOT looped) AS walked GROUP BY id)
                    SELECT {MEMORY_COLUMNS} FROM memories JOIN chain USING (id)
                    WHERE tenant_id = $1 AND {SEEN_BY.format(agent="$3")} ORDER BY chain.step""",
                tenant_id,
                memory_id,
                agent_id,
                MAX_HISTORY_STEPS,
            )
        if not rows:
            raise NotFound("memory", memory_id)
        return [memory_from_row(row) for row in rows]

    async def get(self, tenant_id: str, memory_id: str, agent_id: str = "") -> Memory:
        """The memory as the calling agent may see it; another agent's private memory is NotFound."""
        async with translate_errors():
            row = await self._pool.fetchrow(
                f"""SELECT {MEMORY_COLUMNS} FROM memories
                    WHERE tenant_id = $1 AND id = $2 AND {SEEN_BY.format(agent="$3")}""",
                tenant_id,
                memory_id,
                agent_id,
            )
        if row is None:
            raise NotFound("memory", memory_id)
        return memory_from_row(row)

    async def page(self, query: ListQuery) -> Page:
        sql = Sql()
        sql.where(f"tenant_id = {sql.param(query.tenant_id)}")
        sql.where(SEEN_BY.format(agent=sql.param(query.agent_id)))
        where_subject_tier_kind(sql, query.subject, query.tiers, query.kinds)
        if query.session_id:
            sql.where(f"session_id = {sql.param(query.session_id)}")
        sql.where(f"status = ANY({sql.param([s.value for s in query.statuses])}::text[])")
        if query.after is not None:
            created_at = sql.param(query.after.created_at)
            after_id = sql.param(query.after.memory_id)
            sql.where(f"(created_at, id) < ({created_at}, {after_id}::uuid)")
        limit = sql.param(query.page_size + 1)
        async with translate_errors():
            rows = await self._pool.fetch(
                f"""SELECT {MEMORY_COLUMNS} FROM memories WHERE {sql.clause}
                    ORDER BY created_at DESC, id DESC LIMIT {limit}""",
                *sql.args,
            )
        memories = [memory_from_row(row) for row in rows[: query.page_size]]
        more = len(rows) > query.page_size
        cursor = PageCursor(memories[-1].created_at, memories[-1].id) if more else None
        return Page(memories=memories, next_cursor=cursor)
