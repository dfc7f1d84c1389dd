"""The SQL of webhook_endpoints (migration 0020 says what a row holds): registration, and the leases
under which one server at a time delivers an endpoint's events.

Leases are timed by the database's clock (`now()`), the one clock every server shares. Every change a
delivering server makes is fenced: it applies only while that server still holds the lease and the
endpoint's cursor is still the one it delivered from, so a lease that expired under a stalled server, or
a Replay that moved the cursor, makes its late writes no-ops instead of moving the cursor back.
"""

from __future__ import annotations

from datetime import datetime

import asyncpg

from hindsight_server.domain.feed import Cursor, EventType
from hindsight_server.domain.webhooks import Endpoint, EndpointFilters, EndpointState, Failure, Lease, Secrets
from hindsight_server.store.errors import translate_errors
from hindsight_server.store.sql import OnPool

__all__ = ["WebhookStore"]

_NAMES = (
    "id, tenant_id, url, event_types, subjects, viewer, state, cursor_seq, attempts, failing_since, "
    "next_attempt_at, last_error, delivered, created_at, dead_at, previous_secret_until"
)


def _columns(alias: str = "") -> str:
    """An endpoint's columns as _endpoint reads them, of the table named `alias` (when one is needed)."""
    prefix = f"{alias}." if alias else ""
    names = ", ".join(prefix + name for name in _NAMES.split(", "))
    return f"{names}, {prefix}cursor_xid::text AS cursor_xid"


_COLUMNS = _columns()


def _endpoint(row: asyncpg.Record) -> Endpoint:
    return Endpoint(
        id=str(row["id"]),
        tenant_id=row["tenant_id"],
        url=row["url"],
        filters=EndpointFilters(
            frozenset(EventType(name) for name in row["event_types"]), frozenset(row["subjects"])
        ),
        viewer=row["viewer"],
        state=EndpointState(row["state"]),
        cursor=Cursor(int(row["cursor_xid"]), row["cursor_seq"]),
        attempts=row["attempts"],
        failing_since=row["failing_since"],
        next_attempt_at=row["next_attempt_at"],
        last_error=row["last_error"],
        delivered=row["delivered"],
        created_at=row["created_at"],
        dead_at=row["dead_at"],
        previous_secret_until=row["previous_secret_until"],
    )


def _secrets(row: asyncpg.Record) -> Secrets:
    return Secrets(row["secret"], row["previous_secret"], row["previous_secret_until"])


class WebhookStore(OnPool):
    # ------------------------------------------------------------------------------------ registration

    async def add(
        self,
        tenant_id: str,
        url: str,
        filters: EndpointFilters,
        viewer: str | None,
        secret: str,
        cursor: Cursor,
        now: datetime,
        max_per_tenant: int,
    ) -> Endpoint | None:
        """A new endpoint delivering from `cursor`; None when the tenant has `max_per_tenant` already
        (counted under a per-tenant lock, so concurrent adds cannot pass the bound together)."""
        async with translate_errors(), self._pool.acquire() as connection, connection.transaction():
            await connection.execute("SELECT pg_advisory_xact_lock(hashtext('webhooks:' || $1))", tenant_id)
            count = await connection.fetchval(
                "SELECT count(*) FROM webhook_endpoints WHERE tenant_id = $1", tenant_id
            )
            if count >= max_per_tenant:
                return None
            row = await connection.fetchrow(
                f"""INSERT INTO webhook_endpoints (tenant_id, url, event_types, subjects, viewer, secret,
                                                   cursor_xid, cursor_seq, created_at, next_attempt_at)
                    VALUES ($1, $2, $3, $4, $5, $6, $7::text::xid8, $8, $9, $9)
                    RETURNING {_COLUMNS}""",
                tenant_id,
                url,
                sorted(filters.event_types),
                sorted(filters.subjects),
                viewer,
                secret,
                str(cursor.xid),
                cursor.seq,
                now,
            )
        return _endpoint(row)

    async def endpoints(self, tenant_id: str) -> list[Endpoint]:
        async with translate_errors():
            rows = await self._pool.fetch(
                f"SELECT {_COLUMNS} FROM webhook_endpoints WHERE tenant_id = $1 ORDER BY created_at, id",
                tenant_id,
            )
        return [_endpoint(row) for row in rows]

    async def get(self, tenant_id: str, endpoint_id: str) -> Endpoint | None:
        async with translate_errors():
            row = await self._pool.fetchrow(
                f"SELECT {_COLUMNS} FROM webhook_endpoints WHERE tenant_id = $1 AND id = $2::uuid",
                tenant_id,
                endpoint_id,
            )
        return None if row is None else _endpoint(row)

    async def remove(self, tenant_id: str, endpoint_id: str) -> bool:
        async with translate_errors():
            removed = await self._pool.fetchval(
                "DELETE FROM webhook_endpoints WHERE tenant_id = $1 AND id = $2::uuid RETURNING id",
                tenant_id,
                endpoint_id,
            )
        return removed is not None

    async def rotate(
        self, tenant_id: str, endpoint_id: str, secret: str, previous_until: datetime
    ) -> Endpoint | None:
        """`secret` signs from now on; the one it replaces signs beside it until `previous_until`."""
        async with translate_errors():
            row = await self._pool.fetchrow(
                f"""UPDATE webhook_endpoints
                    SET previous_secret = secret, previous_secret_until = $4, secret = $3
                    WHERE tenant_id = $1 AND id = $2::uuid
                    RETURNING {_COLUMNS}""",
                tenant_id,
                endpoint_id,
                secret,
                previous_until,
            )
        return None if row is None else _endpoint(row)

    async def replay(
        self, tenant_id: str, endpoint_id: str, cursor: Cursor, now: datetime
    ) -> Endpoint | None:
        """Delivers again from `cursor`, at once, with a clean retry state: a dead endpoint lives again.
        A delivery in flight under a lease finds the cursor moved and stops (its writes are fenced)."""
        async with translate_errors():
            row = await self._pool.fetchrow(
                f"""UPDATE webhook_endpoints
                    SET state = 'active', cursor_xid = $3::text::xid8, cursor_seq = $4, attempts = 0,
                        failing_since = NULL, next_attempt_at = $5, dead_at = NULL, last_error = ''
                    WHERE tenant_id = $1 AND id = $2::uuid
                    RETURNING {_COLUMNS}""",
                tenant_id,
                endpoint_id,
                str(cursor.xid),
                cursor.seq,
                now,
            )
        return None if row is None else _endpoint(row)

    # ------------------------------------------------------------------------------------------ leases

    async def claim(self, holder: str, lease_s: float, now: datetime, limit: int) -> list[Lease]:
        """Up to `limit` active endpoints that are due and whose lease has expired, leased to `holder`
        for `lease_s` (the most overdue first). Rows another server is claiming are skipped."""
        async with translate_errors():
            rows = await self._pool.fetch(
                f"""UPDATE webhook_endpoints e
                    SET lease_holder = $1, lease_until = now() + make_interval(secs => $2)
                    FROM (SELECT id FROM webhook_endpoints
                          WHERE state = 'active' AND next_attempt_at <= $3 AND lease_until < now()
                          ORDER BY next_attempt_at
                          LIMIT $4
                          FOR UPDATE SKIP LOCKED) due
                    WHERE e.id = due.id
                    RETURNING {_columns("e")}, e.secret, e.previous_secret""",
                holder,
                lease_s,
                now,
                limit,
            )
        return [Lease(_endpoint(row), _secrets(row)) for row in rows]

    async def renew(self, endpoint_id: str, holder: str, lease_s: float, cursor: Cursor) -> Secrets | None:
        """Extends the lease from the database's now by `lease_s`, if `holder` still holds it and the
        cursor is still `cursor`; the secrets in force (a rotation applies to the next attempt). None:
        the lease or the cursor is no longer this delivery's (expired and taken, removed, replayed)."""
        async with translate_errors():
            row = await self._pool.fetchrow(
                """UPDATE webhook_endpoints SET lease_until = now() + make_interval(secs => $3)
                   WHERE id = $1::uuid AND lease_holder = $2 AND lease_until > now() AND state = 'active'
                     AND cursor_xid = $4::text::xid8 AND cursor_seq = $5
                   RETURNING secret, previous_secret, previous_secret_until""",
                endpoint_id,
                holder,
                lease_s,
                str(cursor.xid),
                cursor.seq,
            )
        return None if row is None else _secrets(row)

    async def advance(
        self, endpoint_id: str, holder: str, expected: Cursor, cursor: Cursor, delivered: int
    ) -> bool:
        """The events up to `cursor` are delivered (or matched no filter): the cursor moves there and
        the retry state is cleared. False: no longer this holder's to move."""
        async with translate_errors():
            moved = await self._pool.fetchval(
                """UPDATE webhook_endpoints
                   SET cursor_xid = $5::text::xid8, cursor_seq = $6, attempts = 0, failing_since = NULL,
                       last_error = '', delivered = delivered + $7
                   WHERE id = $1::uuid AND lease_holder = $2
                     AND cursor_xid = $3::text::xid8 AND cursor_seq = $4
                   RETURNING id""",
                endpoint_id,
                holder,
                str(expected.xid),
                expected.seq,
                str(cursor.xid),
                cursor.seq,
                delivered,
            )
        return moved is not None

    async def failed(
        self, endpoint_id: str, holder: str, cursor: Cursor, failure: Failure, error: str
    ) -> None:
        """An attempt failed: its count and next time, or dead; the lease is given back, so whichever
        server is free when the next attempt is due makes it."""
        async with translate_errors():
            await self._pool.execute(
                """UPDATE webhook_endpoints
                   SET attempts = $5, failing_since = $6, next_attempt_at = $7, last_error = $8,
                       state = CASE WHEN $9 THEN 'dead' ELSE 'active' END,
                       dead_at = CASE WHEN $9 THEN now() END,
                       lease_holder = '', lease_until = '-infinity'
                   WHERE id = $1::uuid AND lease_holder = $2
                     AND cursor_xid = $3::text::xid8 AND cursor_seq = $4""",
                endpoint_id,
                holder,
                str(cursor.xid),
                cursor.seq,
                failure.attempts,
                failure.failing_since,
                failure.next_attempt_at,
                error,
                failure.dead,
            )

    async def release(self, endpoint_id: str, holder: str, next_attempt_at: datetime) -> None:
        """Nothing more to deliver now: the lease is given back, the endpoint looked at again then."""
        async with translate_errors():
            await self._pool.execute(
                """UPDATE webhook_endpoints
                   SET lease_holder = '', lease_until = '-infinity', next_attempt_at = $3
                   WHERE id = $1::uuid AND lease_holder = $2""",
                endpoint_id,
                holder,
                next_attempt_at,
            )
