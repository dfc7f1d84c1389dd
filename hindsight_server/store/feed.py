"""The change feed's SQL: recording events in the writing transaction, reading them in a resumable
order, trimming them by age, and scrubbing them on erasure (migration 0019 says why an outbox).

Why a reader misses none and sees none twice. An event row gets its transaction's id (`xid`, xid8: no
wraparound) and a sequence value (`seq`) when it is inserted. Neither is the order of commits: a
transaction that took a smaller seq (or xid) may commit after one with a larger, so a reader that served
"every committed event up to seq 6" could later find a seq 5 commit and a resumed reader would skip it.
So a reader serves only events whose xid is below `pg_snapshot_xmin(pg_current_snapshot())` of its own
statement: every transaction with a smaller xid has ended (committed, so its rows are in that snapshot,
or rolled back, so they never will be). It serves them in (xid, seq) order and hands out the position
of the last one (or, when it served everything below the horizon, the position just before the
horizon). Every event served later belongs to a transaction with xid at or above that horizon, hence
after the position: a reader resuming from any position it was given misses nothing and repeats
nothing. A transaction still in flight holds the horizon back (the feed lags by the longest write
transaction, milliseconds for a Write, one batch for a lifecycle job); read-only transactions take no
xid and hold nothing back.

The order is the xids' order, not the commits': two transactions touching the same memory may appear
in the order they began. Each event carries the memory's version, which does follow the row's changes.

Retention drops whole days (migration 0019): the job makes each UTC day's partition ahead of time and
drops a day's partition once the whole day is past the retention, so an event is kept between the
retention and a day more. Dropping a partition, like a batched DELETE of the default partition, first
moves each tenant's trimmed position past the events it removes: a cursor at or before that position
may have missed events, and Watch answers it OUT_OF_RANGE. The DDL waits at most `_DDL_LOCK_TIMEOUT`
for its lock (a waiting ALTER or DROP would hold every write to the feed behind it) and otherwise
runs again at the job's next round.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, date, datetime, time, timedelta

import asyncpg

from hindsight_server.domain.feed import ChangeEvent, Cursor, EventType, FeedQuery, NewEvent
from hindsight_server.store.errors import MAINTENANCE_DEFERRED, translate_errors
from hindsight_server.store.sql import OnPool

__all__ = ["FeedStore", "event_insert", "record_events", "scrub_events", "scrub_subject"]

_PARTITION = re.compile(r"change_events_p(\d{8})")
_DDL_LOCK_TIMEOUT = "200ms"

# The columns of change_events a write sets, in the order of record_events' arrays.
_COLUMNS = (
    "tenant_id, type, at, memory_id, subject, kind, visibility, agent_id, resolution, version, fields, "
    "content"
)


async def record_events(connection: asyncpg.Connection, events: Sequence[NewEvent]) -> None:
    """The events of a transaction's changes, in one statement, in that transaction."""
    if not events:
        return
    await connection.execute(
        f"""INSERT INTO change_events ({_COLUMNS})
            SELECT u.tenant_id, u.type, u.at, u.memory_id, u.subject, u.kind, u.visibility, u.agent_id,
                   u.resolution, u.version, coalesce(string_to_array(nullif(u.fields, ''), ','), '{{}}'),
                   u.content
            FROM unnest($1::text[], $2::text[], $3::timestamptz[], $4::uuid[], $5::text[], $6::text[],
                        $7::text[], $8::text[], $9::text[], $10::bigint[], $11::text[], $12::text[])
                 WITH ORDINALITY AS u({_COLUMNS}, n)
            ORDER BY u.n""",
        [e.tenant_id for e in events],
        [e.type.value for e in events],
        [e.at for e in events],
        [e.memory_id for e in events],
        [e.subject for e in events],
        [e.kind for e in events],
        [e.visibility for e in events],
        [e.agent_id for e in events],
        [e.resolution for e in events],
        [e.version for e in events],
        [",".join(e.fields) for e in events],
        [e.content for e in events],
    )


def event_insert(
    source: str, event_type: str, at: str, fields: str, with_content: str, resolution: str = "''"
) -> str:
    """An `INSERT INTO change_events ... SELECT ... FROM <source>` for folding into a statement as a
    CTE over the rows it changed (RETURNING the memory's columns): no extra round trip."""
    return f"""INSERT INTO change_events ({_COLUMNS})
               SELECT r.tenant_id, {event_type}, {at}, r.id, r.subject, r.kind, r.visibility, r.agent_id,
                      {resolution}, r.version, {fields}, CASE WHEN {with_content} THEN r.content END
               FROM {source} r"""


async def scrub_events(
    connection: asyncpg.Connection, tenant_id: str, memory_ids: Sequence[object], now: datetime
) -> None:
    """Erasure: the erased memories' events go, in the erasing transaction (they may hold content and
    the subject's name); one `erased` event each takes their place, with neither."""
    await connection.execute(
        """WITH gone AS (
               DELETE FROM change_events WHERE tenant_id = $1 AND memory_id = ANY($2::uuid[]))
           INSERT INTO change_events (tenant_id, type, at, memory_id)
           SELECT $1, 'erased', $3, m FROM unnest($2::uuid[]) AS m""",
        tenant_id,
        list(memory_ids),
        now,
    )


async def scrub_subject(connection: asyncpg.Connection, tenant_id: str, subject: str | None) -> None:
    """Whatever events still name an erased subject (None: every event of an erased tenant)."""
    if subject is None:
        await connection.execute(
            "DELETE FROM change_events WHERE tenant_id = $1 AND type <> 'erased'", tenant_id
        )
    else:
        await connection.execute(
            "DELETE FROM change_events WHERE tenant_id = $1 AND subject = $2", tenant_id, subject
        )


class FeedStore(OnPool):
    async def read(self, query: FeedQuery, after: Cursor, limit: int) -> tuple[list[ChangeEvent], Cursor]:
        """Up to `limit` events after `after` that match the query, below the horizon (see the module
        comment), and the position to continue from: the last event's when the batch is full, else the
        horizon's (every event below it was looked at), never before `after`."""
        async with translate_errors():
            rows = await self._pool.fetch(
                """SELECT h.xmin::text AS horizon, e.* FROM
                       (SELECT pg_snapshot_xmin(pg_current_snapshot()) AS xmin) AS h
                   LEFT JOIN LATERAL (
                       SELECT e.id, e.xid::text AS xid, e.seq, e.at, e.type, e.memory_id, e.subject,
                              e.kind, e.resolution, e.version, e.fields, e.content, e.session_id,
                              e.erasure_id, e.memory_ids, e.packed_ids
                       FROM change_events e
                       WHERE e.tenant_id = $1 AND (e.xid, e.seq) > ($2::text::xid8, $3::bigint)
                         AND e.xid < h.xmin
                         AND (cardinality($5::text[]) = 0 OR e.subject = ANY($5::text[]))
                         AND (cardinality($6::text[]) = 0 OR e.kind = ANY($6::text[]))
                         AND (cardinality($7::text[]) = 0 OR e.type = ANY($7::text[]))
                         AND ($8::text IS NULL OR e.visibility = 'shared' OR e.agent_id = $8::text)
                       ORDER BY e.xid, e.seq
                       LIMIT $4) AS e ON true""",
                query.tenant_id,
                str(after.xid),
                after.seq,
                limit,
                sorted(query.subjects),
                sorted(query.kinds),
                sorted(query.types),
                query.viewer,
            )
        events = [_event(query.tenant_id, row) for row in rows if row["id"] is not None]
        if len(events) >= limit:
            return events, events[-1].cursor
        return events, max(after, Cursor.before(int(rows[0]["horizon"])))

    async def horizon(self) -> Cursor:
        """Now: the position before every event not yet servable."""
        async with translate_errors():
            xmin = await self._pool.fetchval("SELECT pg_snapshot_xmin(pg_current_snapshot())::text")
        return Cursor.before(int(xmin))

    async def trimmed(self, tenant_id: str) -> Cursor | None:
        """The last position retention dropped for the tenant (None: none dropped)."""
        async with translate_errors():
            row = await self._pool.fetchrow(
                "SELECT xid::text AS xid, seq FROM change_feed_trimmed WHERE tenant_id = $1", tenant_id
            )
        return None if row is None else Cursor(int(row["xid"]), row["seq"])

    async def partitions(self) -> list[date]:
        """The days that have a partition, oldest first."""
        async with translate_errors():
            names = await self._pool.fetch(
                """SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
                   WHERE i.inhparent = 'change_events'::regclass"""
            )
        days = (_PARTITION.fullmatch(row["relname"]) for row in names)
        return sorted(datetime.strptime(m[1], "%Y%m%d").date() for m in days if m is not None)

    async def add_partition(self, day: date) -> bool:
        """Makes the day's partition (empty, attached without a long lock); False when it must wait
        for a later round: its lock was busy, or the default partition holds events of that day (they
        stay there and are trimmed by age)."""
        name, start = _partition_name(day), datetime.combine(day, time(), UTC)
        end = start + timedelta(days=1)
        async with translate_errors():
            try:
                async with self._pool.acquire() as connection, connection.transaction():
                    await connection.execute(f"SET LOCAL lock_timeout = '{_DDL_LOCK_TIMEOUT}'")
                    await connection.execute(f"CREATE TABLE {name} (LIKE change_events INCLUDING DEFAULTS)")
                    await connection.execute(
                        f"""ALTER TABLE change_events ATTACH PARTITION {name}
                            FOR VALUES FROM ('{start.isoformat()}') TO ('{end.isoformat()}')"""
                    )
            except MAINTENANCE_DEFERRED:
                return False
        return True

    async def drop_partition(self, day: date) -> int | None:
        """Drops the day's partition after moving each tenant's trimmed position past its events; how
        many events went, or None when its lock was busy."""
        name = _partition_name(day)
        async with translate_errors():
            try:
                async with self._pool.acquire() as connection, connection.transaction():
                    await connection.execute(f"SET LOCAL lock_timeout = '{_DDL_LOCK_TIMEOUT}'")
                    # No event can enter the day between the positions and the drop (readers go on); the
                    # parent's exclusive lock is taken by the DROP alone, for an instant.
                    await connection.execute(f"LOCK TABLE {name} IN SHARE MODE")
                    # Each tenant's last position, by a walk over the key's distinct tenants (a few index
                    # probes a tenant, not a read of the day's events).
                    await connection.execute(
                        f"""WITH RECURSIVE tenants AS (
                                SELECT min(tenant_id) AS tenant_id FROM {name}
                                UNION ALL
                                SELECT (SELECT min(tenant_id) FROM {name} e WHERE e.tenant_id > t.tenant_id)
                                FROM tenants t WHERE t.tenant_id IS NOT NULL),
                            last AS (
                                SELECT t.tenant_id, l.xid, l.seq FROM tenants t
                                CROSS JOIN LATERAL (
                                    SELECT xid, seq FROM {name} e WHERE e.tenant_id = t.tenant_id
                                    ORDER BY xid DESC, seq DESC LIMIT 1) AS l
                                WHERE t.tenant_id IS NOT NULL)
                            {_MOVE_TRIMMED.format(source="last")}"""
                    )
                    # The job's count (job_runs): one read of the day's key, still no row deleted.
                    dropped = await connection.fetchval(f"SELECT count(*) FROM {name}")
                    await connection.execute(f"DROP TABLE {name}")
            except MAINTENANCE_DEFERRED:
                return None
        return int(dropped)

    async def trim_default(self, before: datetime, limit: int) -> int:
        """Deletes up to `limit` events of the default partition recorded before `before`, in one
        transaction, and moves each tenant's trimmed position past them; returns how many."""
        async with translate_errors(), self._pool.acquire() as connection, connection.transaction():
            deleted: int = await connection.fetchval(
                f"""WITH due AS (
                        SELECT tenant_id, xid, seq, at FROM change_events_default WHERE at < $1
                        LIMIT $2 FOR UPDATE SKIP LOCKED),
                    gone AS (
                        DELETE FROM change_events_default e USING due
                        WHERE (e.tenant_id, e.xid, e.seq, e.at) = (due.tenant_id, due.xid, due.seq, due.at)
                        RETURNING e.tenant_id, e.xid, e.seq),
                    top AS (
                        SELECT DISTINCT ON (tenant_id) tenant_id, xid, seq FROM gone
                        ORDER BY tenant_id, xid DESC, seq DESC),
                    moved AS ({_MOVE_TRIMMED.format(source="top")})
                    SELECT count(*) FROM gone""",
                before,
                limit,
            )
        return deleted


# Moves tenants' trimmed positions forward to (tenant_id, xid, seq) rows of `source`; never back.
_MOVE_TRIMMED = """INSERT INTO change_feed_trimmed AS t (tenant_id, xid, seq)
                   SELECT tenant_id, xid, seq FROM {source}
                   ON CONFLICT (tenant_id) DO UPDATE SET xid = EXCLUDED.xid, seq = EXCLUDED.seq
                   WHERE (t.xid, t.seq) < (EXCLUDED.xid, EXCLUDED.seq)"""


def _partition_name(day: date) -> str:
    return f"change_events_p{day:%Y%m%d}"


def _event(tenant_id: str, row: asyncpg.Record) -> ChangeEvent:
    return ChangeEvent(
        id=str(row["id"]),
        cursor=Cursor(int(row["xid"]), row["seq"]),
        tenant_id=tenant_id,
        type=EventType(row["type"]),
        at=row["at"],
        memory_id="" if row["memory_id"] is None else str(row["memory_id"]),
        subject=row["subject"],
        kind=row["kind"],
        resolution=row["resolution"],
        version=row["version"],
        fields=tuple(row["fields"]),
        content=row["content"],
        session_id=row["session_id"],
        erasure_id=row["erasure_id"],
        memory_ids=tuple(str(i) for i in row["memory_ids"] or ()),
        packed_ids=tuple(str(i) for i in row["packed_ids"] or ()),
    )
