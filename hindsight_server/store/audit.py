"""The recall audit's SQL (migration 0021 says why a row per memory beside the row per recall): a buffer's
entries recorded with their recall.served events in one statement, pages newest first, retention by
time, and the erasure of entries (with their events) that name an erased memory or subject.

An entry and its event are written by the same statement, so both exist or neither; the statement
skips entries already recorded, so a flush retried after an unknown outcome (the connection lost
around the commit) records nothing twice. The entry keeps its event's key (xid, seq): erasure and
retention delete the event through it, with no index on change_events beyond its primary key.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import asyncpg

from hindsight_server.domain.audit import AuditCursor, AuditPage, AuditQuery, RecallServed
from hindsight_server.domain.feed import EventType
from hindsight_server.store.errors import translate_errors
from hindsight_server.store.sql import OnPool

__all__ = ["AuditStore", "scrub_audit_of_memories", "scrub_audit_of_subject"]

_RECORD = f"""
WITH u AS (
    SELECT * FROM unnest($1::uuid[], $2::text[], $3::timestamptz[], $4::text[], $5::text[], $6::text[],
                         $7::text[], $8::text[], $9::text[], $10::text[])
        WITH ORDINALITY AS u(id, tenant_id, at, request_id, subject, agent_id, query_hash, query_text,
                            returned, packed, n)
    WHERE NOT EXISTS (SELECT FROM recall_audit a WHERE a.tenant_id = u.tenant_id AND a.id = u.id)),
ids AS (
    SELECT u.*, coalesce(string_to_array(nullif(returned, ''), ','), '{{}}')::uuid[] AS returned_ids,
           coalesce(string_to_array(nullif(packed, ''), ','), '{{}}')::uuid[] AS packed_ids
    FROM u),
ev AS (
    -- Private to the recalling agent: its recall may have returned that agent's private memories.
    INSERT INTO change_events (id, tenant_id, type, at, subject, visibility, agent_id, memory_ids, packed_ids)
    SELECT id, tenant_id, '{EventType.RECALL_SERVED.value}', at, subject, 'private', agent_id, returned_ids,
           packed_ids
    FROM ids ORDER BY n
    RETURNING id, tenant_id, xid, seq),
entries AS (
    INSERT INTO recall_audit (tenant_id, id, at, request_id, subject, agent_id, query_hash, query_text,
                              returned_ids, packed_ids, event_xid, event_seq)
    SELECT ids.tenant_id, ids.id, ids.at, ids.request_id, ids.subject, ids.agent_id, ids.query_hash,
           ids.query_text, ids.returned_ids, ids.packed_ids, ev.xid, ev.seq
    FROM ids JOIN ev ON ev.tenant_id = ids.tenant_id AND ev.id = ids.id)
INSERT INTO recall_audit_memories (tenant_id, memory_id, at, audit_id, packed)
SELECT DISTINCT ON (ids.tenant_id, m.memory_id, ids.id)
       ids.tenant_id, m.memory_id, ids.at, ids.id, m.memory_id = ANY(ids.packed_ids)
FROM ids, unnest(ids.returned_ids) AS m(memory_id)"""

# Entries of tenant $1 chosen by `which` (over `a`), with their rows per memory and their events.
_REMOVE = """
WITH gone AS (
    DELETE FROM recall_audit a WHERE a.tenant_id = $1 AND {which}
    RETURNING a.id, a.at, a.returned_ids, a.event_xid, a.event_seq),
per_memory AS (
    DELETE FROM recall_audit_memories c
    USING (SELECT id, at, unnest(returned_ids) AS memory_id FROM gone) g
    WHERE c.tenant_id = $1 AND c.memory_id = g.memory_id AND c.at = g.at AND c.audit_id = g.id),
events AS (
    -- An event's time is its entry's: the partition of change_events that holds it (when partitioned).
    DELETE FROM change_events e USING gone
    WHERE e.tenant_id = $1 AND e.xid = gone.event_xid AND e.seq = gone.event_seq AND e.at = gone.at)
SELECT count(*) FROM gone"""

_COLUMNS = (
    "a.id, a.at, a.request_id, a.subject, a.agent_id, a.query_hash, a.query_text, a.returned_ids, "
    "a.packed_ids"
)
# $1 tenant, $2 subject (NULL: any), $3 since, $4 until, $5 viewer (NULL: any agent), $6 cursor's time,
# $7 cursor's id, $8 rows; $9 the memory (by_memory only).
_FILTERS = """a.tenant_id = $1
  AND ($2::text IS NULL OR a.subject = $2::text)
  AND ($5::text IS NULL OR a.agent_id = $5::text)"""
_BY_MEMORY = f"""
SELECT {_COLUMNS} FROM recall_audit_memories m
JOIN recall_audit a ON a.tenant_id = m.tenant_id AND a.id = m.audit_id
WHERE m.tenant_id = $1 AND m.memory_id = $9::uuid AND {_FILTERS}
  AND ($3::timestamptz IS NULL OR m.at >= $3::timestamptz)
  AND ($4::timestamptz IS NULL OR m.at < $4::timestamptz)
  AND ($6::timestamptz IS NULL OR (m.at, m.audit_id) < ($6::timestamptz, $7::uuid))
ORDER BY m.at DESC, m.audit_id DESC
LIMIT $8"""
_BY_TIME = f"""
SELECT {_COLUMNS} FROM recall_audit a
WHERE {_FILTERS}
  AND ($3::timestamptz IS NULL OR a.at >= $3::timestamptz)
  AND ($4::timestamptz IS NULL OR a.at < $4::timestamptz)
  AND ($6::timestamptz IS NULL OR (a.at, a.id) < ($6::timestamptz, $7::uuid))
ORDER BY a.at DESC, a.id DESC
LIMIT $8"""


async def scrub_audit_of_memories(
    connection: asyncpg.Connection, tenant_id: str, memory_ids: Sequence[object]
) -> int:
    """Erasure: every entry (and its event) of a recall that returned one of the erased memories: the
    query that found them may say what they said."""
    which = """a.id IN (SELECT audit_id FROM recall_audit_memories
                        WHERE tenant_id = $1 AND memory_id = ANY($2::uuid[]))"""
    removed: int = await connection.fetchval(_REMOVE.format(which=which), tenant_id, list(memory_ids))
    return removed


async def scrub_audit_of_subject(connection: asyncpg.Connection, tenant_id: str, subject: str | None) -> int:
    """Erasure: every entry (and its event) of the erased subject's recalls (None: the whole tenant's)."""
    if subject is None:
        removed: int = await connection.fetchval(_REMOVE.format(which="true"), tenant_id)
    else:
        removed = await connection.fetchval(_REMOVE.format(which="a.subject = $2"), tenant_id, subject)
    return removed


class AuditStore(OnPool):
    async def record(self, entries: Sequence[RecallServed]) -> None:
        """The entries and their recall.served events, in one statement (one transaction)."""
        if not entries:
            return
        async with translate_errors():
            await self._pool.execute(
                _RECORD,
                [e.id for e in entries],
                [e.tenant_id for e in entries],
                [e.at for e in entries],
                [e.request_id for e in entries],
                [e.subject for e in entries],
                [e.agent_id for e in entries],
                [e.query_hash for e in entries],
                [e.query_text for e in entries],
                [",".join(e.returned_ids) for e in entries],
                [",".join(e.packed_ids) for e in entries],
            )

    async def page(self, query: AuditQuery) -> AuditPage:
        """Up to page_size entries, newest first, after the query's position."""
        after = query.after
        args: list[object] = [
            query.tenant_id,
            query.subject,
            query.since,
            query.until,
            query.viewer,
            None if after is None else after.at,
            None if after is None else after.id,
            query.page_size + 1,  # one more tells whether another page follows
        ]
        statement = _BY_TIME
        if query.memory_id:
            statement = _BY_MEMORY
            args.append(query.memory_id)
        async with translate_errors():
            rows = await self._pool.fetch(statement, *args)
        entries = [_entry(query.tenant_id, row) for row in rows[: query.page_size]]
        more = len(rows) > query.page_size
        return AuditPage(entries, AuditCursor(entries[-1].at, entries[-1].id) if more else None)

    async def trim_batch(self, before: datetime, limit: int) -> int:
        """Deletes up to `limit` entries recorded before `before` (any tenant) with their rows per
        memory and their recall.served events (usually gone already with the feed's shorter retention),
        in one transaction; returns how many. An event never outlives its entry, so an erasure, which
        finds a recall's event through its entry, leaves no event naming an erased memory."""
        async with translate_errors():
            deleted: int = await self._pool.fetchval(
                """WITH due AS (
                       SELECT tenant_id, id FROM recall_audit WHERE at < $1 LIMIT $2 FOR UPDATE SKIP LOCKED),
                   gone AS (
                       DELETE FROM recall_audit a USING due
                       WHERE a.tenant_id = due.tenant_id AND a.id = due.id
                       RETURNING a.tenant_id, a.id, a.at, a.returned_ids, a.event_xid, a.event_seq),
                   per_memory AS (
                       DELETE FROM recall_audit_memories c
                       USING (SELECT tenant_id, id, at, unnest(returned_ids) AS memory_id FROM gone) g
                       WHERE c.tenant_id = g.tenant_id AND c.memory_id = g.memory_id AND c.at = g.at
                         AND c.audit_id = g.id),
                   events AS (
                       DELETE FROM change_events e USING gone
                       WHERE e.tenant_id = gone.tenant_id AND e.xid = gone.event_xid
                         AND e.seq = gone.event_seq AND e.at = gone.at)
                   SELECT count(*) FROM gone""",
                before,
                limit,
            )
        return deleted


def _entry(tenant_id: str, row: asyncpg.Record) -> RecallServed:
    return RecallServed(
        id=str(row["id"]),
        tenant_id=tenant_id,
        at=row["at"],
        request_id=row["request_id"],
        subject=row["subject"],
        agent_id=row["agent_id"],
        query_hash=row["query_hash"],
        query_text=row["query_text"],
        returned_ids=tuple(str(i) for i in row["returned_ids"]),
        packed_ids=tuple(str(i) for i in row["packed_ids"]),
    )
