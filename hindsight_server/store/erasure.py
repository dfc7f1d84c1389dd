"""The SQL of erasure (pipelines/erasure.py): the audit record, and one batch of removal at a time.

A batch is one transaction under the erasure row's lock (two servers never run one erasure at once):
up to `limit` memories of the scope with everything linked to them (their versions, both ways, and every
memory derived from them, to any depth), their share of the tenant's BM25 statistics, the session turns
they came from, the answers kept for retries that name them, and the recall audit's entries of recalls
that returned them. When no memory is left, the scope's sessions (with their turns and summaries), the
answers kept for retries that carry the scope and the audit entries of the subject's recalls go, and
the record is marked done. Rerunning a batch after a crash finds only what is left.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime

import asyncpg

from hindsight_server.domain.errors import NotFound
from hindsight_server.domain.model import BatchRemoved, ErasureKind, ErasureRecord, ErasureScope
from hindsight_server.store.audit import scrub_audit_of_memories, scrub_audit_of_subject
from hindsight_server.store.errors import translate_errors
from hindsight_server.store.feed import scrub_events, scrub_subject
from hindsight_server.store.lifecycle import retried_on_conflict, uncount_documents

SESSIONS_PER_BATCH = 200


class ErasureStore:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def begin(
        self, scope: ErasureScope, reason: str, requested_by: str, request_id: str, now: datetime
    ) -> ErasureRecord:
        erasure_id = str(uuid.uuid4())
        async with translate_errors():
            await self._pool.execute(
                """INSERT INTO erasures (tenant_id, id, scope, subject, memory_ids, reason, requested_by,
                                         request_id, requested_at, state, heartbeat_at)
                   VALUES ($1, $2, $3, $4, $5::uuid[], $6, $7, $8, $9, 'running', $9)""",
                scope.tenant_id,
                erasure_id,
                scope.kind.value,
                scope.subject if scope.kind is ErasureKind.SUBJECT else None,
                list(scope.memory_ids) if scope.kind is ErasureKind.MEMORIES else None,
                reason,
                requested_by,
                request_id,
                now,
            )
        return ErasureRecord(erasure_id, scope, "running", now, None, 0, 0, 0, 0)

    async def get(self, tenant_id: str, erasure_id: str) -> ErasureRecord:
        async with translate_errors():
            row = await self._pool.fetchrow(
                f"SELECT {_RECORD_COLUMNS} FROM erasures WHERE tenant_id = $1 AND id = $2",
                tenant_id,
                erasure_id,
            )
        if row is None:
            raise NotFound("erasure", erasure_id)
        return _record(row)

    async def stale(self, heartbeat_before: datetime, limit: int) -> list[ErasureRecord]:
        """Erasures still running whose last batch is older than `heartbeat_before` (their server died)."""
        async with translate_errors():
            rows = await self._pool.fetch(
                f"""SELECT {_RECORD_COLUMNS} FROM erasures
                    WHERE state = 'running' AND heartbeat_at < $1 ORDER BY heartbeat_at LIMIT $2""",
                heartbeat_before,
                limit,
            )
        return [_record(row) for row in rows]

    async def finished_since(self, after: datetime | None) -> tuple[datetime | None, list[str]]:
        """When the latest erasure finished, and the tenants with one finished after `after` (servers
        drop those tenants' caches); with no `after`, only the time."""
        async with translate_errors():
            row = await self._pool.fetchrow(
                """SELECT max(finished_at) AS latest,
                          array_agg(DISTINCT tenant_id) FILTER (WHERE finished_at > $1) AS tenants
                   FROM erasures WHERE state = 'done' AND ($1::timestamptz IS NULL OR finished_at > $1)""",
                after,
            )
        return row["latest"], list(row["tenants"] or ())

    async def remove_batch(self, erasure: ErasureRecord, limit: int, now: datetime) -> BatchRemoved:
        # A concurrent write of the tenant may take its BM25 rows first: the batch runs again.
        return await retried_on_conflict(
            self._pool, lambda connection: _remove_batch(connection, erasure, limit, now), "the erasure"
        )


_RECORD_COLUMNS = (
    "id, tenant_id, scope, subject, memory_ids, state, requested_at, finished_at, memories, sessions, "
    "turns, replies"
)


def _record(row: asyncpg.Record) -> ErasureRecord:
    scope = ErasureScope(
        row["tenant_id"],
        ErasureKind(row["scope"]),
        row["subject"] or "",
        tuple(str(i) for i in row["memory_ids"] or ()),
    )
    return ErasureRecord(
        str(row["id"]),
        scope,
        row["state"],
        row["requested_at"],
        row["finished_at"],
        row["memories"],
        row["sessions"],
        row["turns"],
        row["replies"],
    )


# The scope's memories ($1 the tenant, $2 the batch size, $3 the subject or the ids).
_PICKED = {
    ErasureKind.SUBJECT: "SELECT id FROM memories WHERE tenant_id = $1 AND subject = $3 LIMIT $2",
    ErasureKind.TENANT: "SELECT id FROM memories WHERE tenant_id = $1 LIMIT $2",
    ErasureKind.MEMORIES: "SELECT id FROM memories WHERE tenant_id = $1 AND id = ANY($3::uuid[]) LIMIT $2",
}

_REMOVED_COLUMNS = """m.id, m.tenant_id, m.lexical_terms, tsvector_to_array(m.lexical) AS lexemes,
       m.provenance->>'session_id' AS turn_session, m.provenance->>'turn' AS turn"""

# Memories ($2) and everything linked to them: versions both ways and what was derived from them, to
# any depth (an episode of the subject's turns, a habit abstracted from those episodes); each link has
# its index (0012, 0014). Those in $3 are already taken.
_CLOSURE = f"""
WITH RECURSIVE linked(id) AS (
    SELECT unnest($2::uuid[])
    UNION
    SELECT next.id FROM linked l, LATERAL (
        SELECT m.id FROM memories m WHERE m.tenant_id = $1 AND m.supersedes = l.id
        UNION ALL
        SELECT m.id FROM memories m WHERE m.tenant_id = $1 AND m.superseded_by = l.id
        UNION ALL
        SELECT m.id FROM memories m
        WHERE m.tenant_id = $1 AND m.derived_from <> '{{}}' AND m.derived_from @> ARRAY[l.id]) AS next)
SELECT {_REMOVED_COLUMNS} FROM memories m JOIN linked USING (id)
WHERE m.tenant_id = $1 AND NOT (m.id = ANY($3::uuid[]))
FOR UPDATE OF m"""

# What the session kept of the turns a removed memory was taken from ($2, $3): the turn's words as said
# (its working memory), and the summaries and episodes whose span of turns includes it.
_FROM_THE_TURNS = """
SELECT DISTINCT m.id FROM memories m
JOIN unnest($2::text[], $3::bigint[]) AS said(session_id, turn) ON m.session_id = said.session_id
WHERE m.tenant_id = $1 AND m.tier IN ('working', 'episodic') AND NOT (m.id = ANY($4::uuid[]))
  AND (m.provenance->>'turn' = said.turn::text
       OR CASE WHEN jsonb_typeof(m.provenance->'turns'->0) = 'number'
                AND jsonb_typeof(m.provenance->'turns'->1) = 'number'
           THEN said.turn BETWEEN (m.provenance->'turns'->>0)::numeric
                              AND (m.provenance->'turns'->>1)::numeric
           ELSE false END)"""


async def _scope_rows(
    connection: asyncpg.Connection, scope: ErasureScope, limit: int
) -> list[asyncpg.Record]:
    args: list[object] = [scope.tenant_id, limit]
    if scope.kind is ErasureKind.SUBJECT:
        args.append(scope.subject)
    elif scope.kind is ErasureKind.MEMORIES:
        args.append(list(scope.memory_ids))
    picked = [row["id"] for row in await connection.fetch(_PICKED[scope.kind], *args)]
    rows = list(await connection.fetch(_CLOSURE, scope.tenant_id, picked, []))
    said = _turns_said(rows)
    if said:
        taken = [row["id"] for row in rows]
        kept_of_turns = await connection.fetch(
            _FROM_THE_TURNS, scope.tenant_id, [s for s, _ in said], [t for _, t in said], taken
        )
        if kept_of_turns:
            rows += await connection.fetch(
                _CLOSURE, scope.tenant_id, [row["id"] for row in kept_of_turns], taken
            )
    return rows


def _turns_said(rows: Sequence[asyncpg.Record]) -> list[tuple[str, int]]:
    """(session, turn) of each removed memory taken from a turn."""
    return [
        (row["turn_session"], int(row["turn"]))
        for row in rows
        if row["turn_session"] and row["turn"] is not None and row["turn"].isdigit()
    ]


async def _remove_batch(
    connection: asyncpg.Connection, erasure: ErasureRecord, limit: int, now: datetime
) -> BatchRemoved:
    scope = erasure.scope
    state = await connection.fetchval(
        "SELECT state FROM erasures WHERE tenant_id = $1 AND id = $2 FOR UPDATE", scope.tenant_id, erasure.id
    )
    if state == "done":
        return BatchRemoved(finished=True)
    rows = await _scope_rows(connection, scope, limit)
    removed = (
        await _remove_memories(connection, scope.tenant_id, rows, now)
        if rows
        else await _remove_sessions_and_replies(connection, scope)
    )
    # The last batch records the erasure's end in the feed; the event names no subject.
    await connection.execute(
        """WITH progress AS (
               UPDATE erasures SET heartbeat_at = $3, memories = memories + $4, sessions = sessions + $5,
                      turns = turns + $6, replies = replies + $7,
                      state = CASE WHEN $8 THEN 'done' ELSE state END,
                      finished_at = CASE WHEN $8 THEN $3 ELSE finished_at END
               WHERE tenant_id = $1 AND id = $2
               RETURNING tenant_id, id, scope)
           INSERT INTO change_events (tenant_id, type, at, resolution, erasure_id)
           SELECT tenant_id, 'erasure_finished', $3, scope, id::text FROM progress WHERE $8""",
        scope.tenant_id,
        erasure.id,
        now,
        removed.memories,
        removed.sessions,
        removed.turns,
        removed.replies,
        removed.finished,
    )
    return removed


async def _remove_memories(
    connection: asyncpg.Connection, tenant_id: str, rows: Sequence[asyncpg.Record], now: datetime
) -> BatchRemoved:
    ids = [row["id"] for row in rows]
    # The change feed keeps no trace of what they said (nor of the subject): an `erased` event each.
    await scrub_events(connection, tenant_id, ids, now)
    # The recall audit's entries of recalls that returned them, with their recall.served events.
    await scrub_audit_of_memories(connection, tenant_id, ids)
    # Links from memories that stay (none, for a whole chain) lose their target, as in a purge.
    for column in ("supersedes", "superseded_by"):
        await connection.execute(
            f"""UPDATE memories SET {column} = NULL
                WHERE tenant_id = $1 AND {column} = ANY($2::uuid[]) AND NOT (id = ANY($2::uuid[]))""",
            tenant_id,
            ids,
        )
    await connection.execute(
        "DELETE FROM memories WHERE tenant_id = $1 AND id = ANY($2::uuid[])", tenant_id, ids
    )
    await uncount_documents(connection, rows)
    # The turns the memories were made from: their text is what the memory says. The sessions' stored
    # summaries may repeat it: they are dropped, and made again from the turns that are left.
    said = _turns_said(rows)
    turns: int = await connection.fetchval(
        """WITH gone AS (
               DELETE FROM session_turns t USING unnest($2::text[], $3::bigint[]) AS said(session_id, turn)
               WHERE t.tenant_id = $1 AND t.session_id = said.session_id AND t.turn_index = said.turn
               RETURNING 1)
           SELECT count(*) FROM gone""",
        tenant_id,
        [session for session, _ in said],
        [turn for _, turn in said],
    )
    await connection.execute(
        """UPDATE sessions SET summary = NULL, summary_turn = 0, summary_updated_at = NULL,
                  summary_memory_id = NULL
           WHERE tenant_id = $1 AND session_id = ANY($2::text[])""",
        tenant_id,
        sorted({session for session, _ in said}),
    )
    replies = await _remove_replies(connection, tenant_id, [str(i).encode() for i in ids])
    return BatchRemoved(memories=len(rows), turns=turns, replies=replies)


async def _remove_sessions_and_replies(connection: asyncpg.Connection, scope: ErasureScope) -> BatchRemoved:
    """Once the scope's memories are gone: its sessions (turns and summaries with them), a batch at a
    time, then the answers kept for retries that carry it; finished when none is left."""
    if scope.kind is ErasureKind.MEMORIES:
        return BatchRemoved(finished=True)
    subject = scope.kind is ErasureKind.SUBJECT
    subject_filter, args = ("AND subject = $3", [scope.subject]) if subject else ("", [])
    row = await connection.fetchrow(
        f"""WITH picked AS (
                SELECT session_id FROM sessions WHERE tenant_id = $1 {subject_filter} LIMIT $2),
            turns AS (
                DELETE FROM session_turns t USING picked
                WHERE t.tenant_id = $1 AND t.session_id = picked.session_id RETURNING 1),
            gone AS (
                DELETE FROM sessions s USING picked
                WHERE s.tenant_id = $1 AND s.session_id = picked.session_id RETURNING 1)
            SELECT (SELECT count(*) FROM gone) AS sessions, (SELECT count(*) FROM turns) AS turns""",
        scope.tenant_id,
        SESSIONS_PER_BATCH,
        *args,
    )
    if row["sessions"]:
        return BatchRemoved(sessions=row["sessions"], turns=row["turns"])
    # Events that still name the subject (of memories written while the erasure ran and removed since).
    await scrub_subject(connection, scope.tenant_id, scope.subject if subject else None)
    # The subject's (or tenant's) recalls in the audit, whatever they returned.
    await scrub_audit_of_subject(connection, scope.tenant_id, scope.subject if subject else None)
    if scope.kind is ErasureKind.TENANT:
        replies = await connection.fetchval(
            "WITH gone AS (DELETE FROM request_replies WHERE tenant_id = $1 RETURNING 1) "
            "SELECT count(*) FROM gone",
            scope.tenant_id,
        )
    else:
        # An answer carries the subject's name in each memory or view it holds: protobuf keeps strings
        # as they are. A longer name that contains it matches too; losing that answer only means a
        # retry of its call runs again (its idempotency key in the memory still finds the memory).
        replies = await _remove_replies(connection, scope.tenant_id, [scope.subject.encode()])
    return BatchRemoved(replies=replies, finished=True)


async def _remove_replies(connection: asyncpg.Connection, tenant_id: str, needles: Sequence[bytes]) -> int:
    needles = [needle for needle in needles if needle]
    if not needles:
        return 0
    removed: int = await connection.fetchval(
        """WITH gone AS (
               DELETE FROM request_replies r WHERE tenant_id = $1 AND response IS NOT NULL
                 AND EXISTS (SELECT FROM unnest($2::bytea[]) AS n(needle)
                             WHERE position(n.needle IN r.response) > 0)
               RETURNING 1)
           SELECT count(*) FROM gone""",
        tenant_id,
        list(needles),
    )
    return removed


__all__ = ["ErasureStore"]
