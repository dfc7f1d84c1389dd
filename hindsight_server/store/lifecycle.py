"""LifecycleStore: the SQL of the lifecycle jobs (expire, purge, demote, evict, read episodes).

These statements work across tenants (maintenance, not a tenant's request), each in bounded batches:
every call handles at most `limit` rows in one transaction and returns what it did, so a job killed
half-way leaves whole batches done or undone, and running it again finishes the rest. Rows are claimed
with FOR UPDATE SKIP LOCKED: a row a write holds is left for the next run instead of waited for.
"""

from __future__ import annotations

import contextlib
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from datetime import datetime
from typing import TypeVar

import asyncpg

from hindsight_server.domain.errors import Aborted
from hindsight_server.domain.model import Kind, Memory, Status, Subject
from hindsight_server.domain.retention import RetentionItem
from hindsight_server.store.errors import LOCK_CONFLICTS, translate_errors
from hindsight_server.store.feed import event_insert
from hindsight_server.store.rows import MEMORY_COLUMNS, memory_from_row
from hindsight_server.store.sql import LISTED_MEMORIES_LOCKED

# A purge and a write of the same tenant lock its BM25 rows (lexical_stats, lexical_df) and version
# links in different orders; PostgreSQL then aborts one of them (LOCK_CONFLICTS). The batch is retried
# whole.
_ATTEMPTS = 3

T = TypeVar("T")

# Set in a memory's provenance when the quota evicts it, so its purge says why it went.
EVICTED_BY_QUOTA = "quota"

# Memories that have stopped being believed or wanted, by status: what their purge grace counts from.
# A superseded version also goes once it was replaced at or before $3 (NULL: never for that reason).
_PURGEABLE = """(status IN ('expired', 'superseded') AND expires_at <= $1)
                OR (status = 'deleted' AND updated_at <= $1)
                OR (status = 'superseded' AND updated_at <= $3)"""


# Each change the jobs make records its change feed event in the same statement (store/feed.py).
_EXPIRED_EVENTS = event_insert("changed", "'expired'", "$1", "'{status}'::text[]", "false")
_EVICTED_EVENTS = event_insert("changed", "'deleted'", "$3", "'{status}'::text[]", "false", "'evicted'")


def _purge_reason(status: str, deleted_by: str | None) -> str:
    """Why a memory was purged, for its audit row (never its content)."""
    if status == Status.EXPIRED:
        return "ttl expired"
    if status == Status.SUPERSEDED:
        return "superseded version expired"
    return "evicted over quota" if deleted_by == EVICTED_BY_QUOTA else "deleted"


class LifecycleStore:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    @contextlib.asynccontextmanager
    async def _transaction(self) -> AsyncIterator[asyncpg.Connection]:
        async with translate_errors(), self._pool.acquire() as connection, connection.transaction():
            yield connection

    # ------------------------------------------------------------------------------------------ expire

    async def expire_batch(self, now: datetime, limit: int) -> int:
        """Soft-expires up to `limit` active or pending memories whose expiry has come (working memory
        after its 24 h, episodes after 30 days); recall already hides them by expires_at, this makes it
        their status so purge can count its grace. Returns how many."""
        async with self._transaction() as connection:
            rows = await connection.fetch(
                f"""WITH due AS (
                       SELECT tenant_id, id FROM memories
                       WHERE expires_at <= $1 AND status IN ('active', 'pending')
                       LIMIT $2 FOR UPDATE SKIP LOCKED),
                   changed AS (
                       UPDATE memories m SET status = 'expired', updated_at = $1, version = m.version + 1
                       FROM due WHERE m.tenant_id = due.tenant_id AND m.id = due.id
                       RETURNING m.*),
                   feed AS ({_EXPIRED_EVENTS})
                   SELECT id FROM changed""",
                now,
                limit,
            )
        return len(rows)

    # ------------------------------------------------------------------------------------------- purge

    async def purge_batch(
        self, cutoff: datetime, superseded_before: datetime | None, now: datetime, limit: int
    ) -> int:
        """Hard-deletes up to `limit` memories that expired (or were superseded and expired, or were
        deleted) at or before `cutoff`, or were superseded at or before `superseded_before` (None: not
        for that), in one transaction with one purge_audit row each. Version links pointing at a purged
        memory are cleared; the tenants' BM25 statistics lose its terms."""
        return await retried_on_conflict(
            self._pool,
            lambda connection: _purge(connection, cutoff, superseded_before, now, limit),
            "purge",
        )

    async def purge_turns_batch(self, stored_before: datetime, limit: int) -> int:
        """Deletes up to `limit` session turns stored at or before `stored_before`, in one transaction;
        returns how many. A session left with no turn goes too, its stored summary with it. A session
        whose turns went before it was consolidated counts them as consolidated, so the idle job stops
        waiting for them (what is left of it is consolidated as usual)."""
        return await retried_on_conflict(
            self._pool, lambda connection: _purge_turns(connection, stored_before, limit), "purge"
        )

    # ------------------------------------------------------------------------------------------ demote

    async def demote_batch(
        self, unused_since: datetime, now: datetime, expires_at: datetime | None, limit: int
    ) -> int:
        """Moves up to `limit` active semantic memories last used (recalled, else recorded) at or before
        `unused_since` to the episodic tier, expiring at `expires_at` (or earlier if they already
        were to). Returns how many.

        No index serves this filter on purpose: one would make every recall's access update of a
        semantic memory a non-HOT update; a daily scan is cheaper."""
        async with self._transaction() as connection:
            rows = await connection.fetch(
                """WITH due AS (
                       SELECT tenant_id, id FROM memories
                       WHERE tier = 'semantic' AND status = 'active'
                         AND coalesce(last_accessed_at, created_at) <= $1
                       LIMIT $4 FOR UPDATE SKIP LOCKED)
                   UPDATE memories m
                   SET tier = 'episodic', expires_at = least(m.expires_at, $3::timestamptz),
                       updated_at = $2, version = m.version + 1,
                       provenance = m.provenance
                           || jsonb_build_object('demoted_from', 'semantic', 'demoted_at', $2::timestamptz)
                   FROM due WHERE m.tenant_id = due.tenant_id AND m.id = due.id
                   RETURNING m.id""",
                unused_since,
                now,
                expires_at,
                limit,
            )
        return len(rows)

    # ------------------------------------------------------------------------------------------- quota

    async def tenants_over(self, quota: int, after: str, limit: int) -> list[tuple[str, int]]:
        """(tenant, live memories) for up to `limit` tenants after `after` (in id order) holding more
        than `quota` live (active or pending) memories."""
        async with translate_errors():
            rows = await self._pool.fetch(
                """SELECT tenant_id, count(*) AS live FROM memories
                   WHERE status IN ('active', 'pending') AND tenant_id > $2
                   GROUP BY tenant_id HAVING count(*) > $1
                   ORDER BY tenant_id LIMIT $3""",
                quota,
                after,
                limit,
            )
        return [(row["tenant_id"], row["live"]) for row in rows]

    async def retention_items(self, tenant_id: str) -> list[RetentionItem]:
        """What retention scoring needs of a tenant's live memories (no content)."""
        async with translate_errors():
            rows = await self._pool.fetch(
                """SELECT id, kind, status, confidence, access_count, last_accessed_at, created_at
                   FROM memories WHERE tenant_id = $1 AND status IN ('active', 'pending')""",
                tenant_id,
            )
        return [
            RetentionItem(
                id=str(row["id"]),
                kind=Kind(row["kind"]),
                status=Status(row["status"]),
                confidence=row["confidence"],
                access_count=row["access_count"],
                last_accessed_at=row["last_accessed_at"],
                created_at=row["created_at"],
            )
            for row in rows
        ]

    async def evict(self, tenant_id: str, memory_ids: Sequence[str], now: datetime) -> int:
        """Soft-deletes those of the memories still live, marked as evicted by the quota; returns how
        many (one already gone or changed since it was scored is left alone)."""
        async with self._transaction() as connection:
            rows = await connection.fetch(
                f"""WITH {LISTED_MEMORIES_LOCKED},
                   changed AS (
                       UPDATE memories
                       SET status = 'deleted', updated_at = $3, version = version + 1,
                           provenance = provenance || jsonb_build_object('deleted_by', $4::text)
                       WHERE tenant_id = $1 AND id IN (SELECT id FROM locked)
                         AND status IN ('active', 'pending')
                       RETURNING *),
                   feed AS ({_EVICTED_EVENTS})
                   SELECT id FROM changed""",
                tenant_id,
                list(memory_ids),
                now,
                EVICTED_BY_QUOTA,
            )
        return len(rows)

    # ---------------------------------------------------------------------------------------- patterns

    async def subjects_with_episodes(
        self, after: Subject | None, min_episodes: int, now: datetime, limit: int
    ) -> list[Subject]:
        """Up to `limit` subjects, in (tenant, subject) order after `after`, with at least
        `min_episodes` live episodes that have an intent (fewer cannot hold a pattern)."""
        tenant, subject = (after.tenant_id, after.subject) if after else ("", "")
        async with translate_errors():
            rows = await self._pool.fetch(
                f"""SELECT tenant_id, subject FROM memories
                    WHERE {_live_episode(now="$4")} AND (tenant_id, subject) > ($1, $2)
                    GROUP BY tenant_id, subject HAVING count(*) >= $3
                    ORDER BY tenant_id, subject LIMIT $5""",
                tenant,
                subject,
                min_episodes,
                now,
                limit,
            )
        return [Subject(row["tenant_id"], row["subject"]) for row in rows]

    async def episodes(self, subject: Subject, now: datetime) -> list[Memory]:
        """A subject's live episodes that have an intent, oldest first."""
        async with translate_errors():
            rows = await self._pool.fetch(
                f"""SELECT {MEMORY_COLUMNS} FROM memories
                    WHERE {_live_episode(now="$3")} AND tenant_id = $1 AND subject = $2
                    ORDER BY created_at, id""",
                subject.tenant_id,
                subject.subject,
                now,
            )
        return [memory_from_row(row) for row in rows]


def _live_episode(*, now: str) -> str:
    """The episodes pattern finding reads; `now` names the statement's parameter holding the time. A
    demoted habit is episodic too, but it must not count as evidence for itself."""
    return f"""tier = 'episodic' AND status = 'active' AND intent <> ''
        AND (expires_at IS NULL OR expires_at > {now})
        AND coalesce(provenance->>'job', '') <> 'patterns'"""


async def _purge_turns(connection: asyncpg.Connection, stored_before: datetime, limit: int) -> int:
    # Turns stored before migration 0015 have no recorded_at: their age counts from occurred_at.
    purged = await connection.fetch(
        """WITH due AS (
               SELECT tenant_id, session_id, turn_index FROM session_turns
               WHERE coalesce(recorded_at, occurred_at) <= $1
               LIMIT $2 FOR UPDATE SKIP LOCKED),
           gone AS (
               DELETE FROM session_turns t USING due
               WHERE t.tenant_id = due.tenant_id AND t.session_id = due.session_id
                 AND t.turn_index = due.turn_index
               RETURNING t.tenant_id, t.session_id, t.turn_index)
           SELECT tenant_id, session_id, max(turn_index) AS last, count(*) AS turns
           FROM gone GROUP BY tenant_id, session_id""",
        stored_before,
        limit,
    )
    if not purged:
        return 0
    tenants = [row["tenant_id"] for row in purged]
    sessions = [row["session_id"] for row in purged]
    # This locks the sessions' rows: an append holding one (it numbers its turn under that lock) is
    # waited for, so its new turn is seen below and its session stays; a later append waits for the
    # purge and, if the session went, starts it afresh. A deadlock with an erasure retries the batch.
    await connection.execute(
        """UPDATE sessions s SET consolidated_turn = greatest(s.consolidated_turn, p.last)
           FROM unnest($1::text[], $2::text[], $3::bigint[]) AS p(tenant_id, session_id, last)
           WHERE s.tenant_id = p.tenant_id AND s.session_id = p.session_id""",
        tenants,
        sessions,
        [row["last"] for row in purged],
    )
    await connection.execute(
        """DELETE FROM sessions s USING unnest($1::text[], $2::text[]) AS p(tenant_id, session_id)
           WHERE s.tenant_id = p.tenant_id AND s.session_id = p.session_id
             AND NOT EXISTS (SELECT FROM session_turns t
                             WHERE t.tenant_id = s.tenant_id AND t.session_id = s.session_id)""",
        tenants,
        sessions,
    )
    return sum(row["turns"] for row in purged)


async def _purge(
    connection: asyncpg.Connection,
    cutoff: datetime,
    superseded_before: datetime | None,
    now: datetime,
    limit: int,
) -> int:
    rows = await connection.fetch(
        f"""SELECT id, tenant_id, tier, kind, status, created_at, lexical_terms,
                   tsvector_to_array(lexical) AS lexemes, provenance->>'deleted_by' AS deleted_by
            FROM memories WHERE {_PURGEABLE}
            LIMIT $2 FOR UPDATE SKIP LOCKED""",
        cutoff,
        limit,
        superseded_before,
    )
    if not rows:
        return 0
    ids = [row["id"] for row in rows]
    tenants = [row["tenant_id"] for row in rows]
    # The chain outlives a purged version: what it replaced, or what replaced it, just loses the link
    # (History then starts or ends there). Links inside the batch go with their rows.
    for column in ("supersedes", "superseded_by"):
        await connection.execute(
            f"""UPDATE memories m SET {column} = NULL
                FROM unnest($1::text[], $2::uuid[]) AS purged(tenant_id, id)
                WHERE m.tenant_id = purged.tenant_id AND m.{column} = purged.id
                  AND NOT (m.id = ANY($2::uuid[]))""",
            tenants,
            ids,
        )
    await connection.execute(
        """INSERT INTO purge_audit (tenant_id, memory_id, tier, kind, status, reason, created_at, purged_at)
           SELECT a.tenant_id, a.memory_id, a.tier, a.kind, a.status, a.reason, a.created_at, $8
           FROM unnest($1::text[], $2::uuid[], $3::text[], $4::text[], $5::text[], $6::text[],
                       $7::timestamptz[])
                AS a(tenant_id, memory_id, tier, kind, status, reason, created_at)""",
        tenants,
        ids,
        [row["tier"] for row in rows],
        [row["kind"] for row in rows],
        [row["status"] for row in rows],
        [_purge_reason(row["status"], row["deleted_by"]) for row in rows],
        [row["created_at"] for row in rows],
        now,
    )
    await connection.execute(
        f"""WITH gone AS (
                DELETE FROM memories m USING unnest($1::text[], $2::uuid[]) AS purged(tenant_id, id)
                WHERE m.tenant_id = purged.tenant_id AND m.id = purged.id
                RETURNING m.*)
            {event_insert("gone", "'purged'", "$3", "'{}'::text[]", "false")}""",
        tenants,
        ids,
        now,
    )
    await uncount_documents(connection, rows)
    return len(rows)


async def retried_on_conflict(
    pool: asyncpg.Pool, work: Callable[[asyncpg.Connection], Awaitable[T]], what: str
) -> T:
    """`work` in one transaction, run again (up to _ATTEMPTS times) when it lost a deadlock or a
    serialization conflict to a concurrent write of the same tenant; then Aborted naming `what`."""
    attempt = 1
    async with translate_errors():  # around the retries, which must see PostgreSQL's own lock conflicts
        while True:
            try:
                async with pool.acquire() as connection, connection.transaction():
                    return await work(connection)
            except LOCK_CONFLICTS as exc:
                if attempt == _ATTEMPTS:
                    raise Aborted(f"{what} kept colliding with concurrent writes; run it again") from exc
                attempt += 1


async def uncount_documents(connection: asyncpg.Connection, rows: Sequence[asyncpg.Record]) -> None:
    """Takes purged rows out of their tenants' BM25 statistics, as the writes put them in
    (store/writes.py: _insert, _adjust_df): documents and total length, then each distinct
    term's document frequency. Tenants, then terms, are locked in sorted order, like the writers do."""
    documents: Counter[str] = Counter()
    lengths: Counter[str] = Counter()
    frequencies: defaultdict[str, Counter[str]] = defaultdict(Counter)
    for row in rows:
        documents[row["tenant_id"]] += 1
        lengths[row["tenant_id"]] += row["lexical_terms"]
        frequencies[row["tenant_id"]].update(row["lexemes"])
    for tenant_id in sorted(documents):
        await connection.execute(
            "UPDATE lexical_stats SET documents = documents - $2, terms = terms - $3 WHERE tenant_id = $1",
            tenant_id,
            documents[tenant_id],
            lengths[tenant_id],
        )
        await _lower_df(connection, tenant_id, frequencies[tenant_id])


async def _lower_df(connection: asyncpg.Connection, tenant_id: str, removed: Mapping[str, int]) -> None:
    terms = sorted(removed)
    if not terms:
        return
    # The writers' statement with negative changes: its rows are locked in term order like theirs.
    await connection.execute(
        """INSERT INTO lexical_df AS d (tenant_id, term, df)
           SELECT $1, c.term, -c.removed FROM unnest($2::text[], $3::bigint[]) AS c(term, removed)
           ORDER BY c.term
           ON CONFLICT (tenant_id, term) DO UPDATE SET df = d.df + EXCLUDED.df""",
        tenant_id,
        terms,
        [removed[term] for term in terms],
    )
    # Terms no memory holds any more leave the table, as if they had never been written.
    await connection.execute(
        "DELETE FROM lexical_df WHERE tenant_id = $1 AND term = ANY($2::text[]) AND df <= 0",
        tenant_id,
        terms,
    )


__all__ = ["EVICTED_BY_QUOTA", "LifecycleStore", "Subject", "retried_on_conflict", "uncount_documents"]
