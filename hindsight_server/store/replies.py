"""ReplyStore: the SQL of `request_replies`, the answers kept for mutating requests that carried an
idempotency key (so a retried Update, Delete, EndSession ... changes nothing twice)."""

from __future__ import annotations

from datetime import datetime, timedelta

import asyncpg

from hindsight_server.store.errors import translate_errors

__all__ = ["ReplyStore"]


class ReplyStore:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def claim(
        self,
        tenant_id: str,
        method: str,
        key: str,
        fingerprint: bytes,
        now: datetime,
        abandoned_after: timedelta,
    ) -> tuple[bool, bytes | None, bytes]:
        """(claimed, stored answer, stored fingerprint). Claimed: this call is the first with the key, or
        the first one's claim was abandoned (no answer after `abandoned_after`: its server died, or could
        not release the key because the database was away), and must run. Not claimed: the answer of the
        first (None while it still runs)."""
        async with translate_errors(), self._pool.acquire() as connection, connection.transaction():
            claimed = await connection.fetchval(
                """INSERT INTO request_replies AS r (tenant_id, method, key, fingerprint, created_at)
                   VALUES ($1, $2, $3, $4, $5)
                   ON CONFLICT (tenant_id, method, key) DO UPDATE
                   SET created_at = EXCLUDED.created_at, fingerprint = EXCLUDED.fingerprint
                   WHERE r.response IS NULL AND r.created_at < $6
                   RETURNING true""",
                tenant_id,
                method,
                key,
                fingerprint,
                now,
                now - abandoned_after,
            )
            if claimed:
                return True, None, fingerprint
            row = await connection.fetchrow(
                """SELECT response, fingerprint FROM request_replies
                   WHERE tenant_id = $1 AND method = $2 AND key = $3""",
                tenant_id,
                method,
                key,
            )
        return False, row["response"], row["fingerprint"]

    async def complete(self, tenant_id: str, method: str, key: str, response: bytes) -> None:
        async with translate_errors():
            await self._pool.execute(
                """UPDATE request_replies SET response = $4
                   WHERE tenant_id = $1 AND method = $2 AND key = $3""",
                tenant_id,
                method,
                key,
                response,
            )

    async def release(self, tenant_id: str, method: str, key: str) -> None:
        """The first call failed: the key is free again, so a retry runs instead of waiting forever."""
        async with translate_errors():
            await self._pool.execute(
                """DELETE FROM request_replies
                   WHERE tenant_id = $1 AND method = $2 AND key = $3 AND response IS NULL""",
                tenant_id,
                method,
                key,
            )

    async def forget_older_than(self, before: datetime, limit: int) -> int:
        """Drops up to `limit` answers kept past their retry window (a job); returns how many. Rows a
        claim holds are left for the next batch rather than waited for."""
        async with translate_errors():
            deleted = await self._pool.fetchval(
                """WITH old AS (SELECT tenant_id, method, key FROM request_replies
                                WHERE created_at < $1 LIMIT $2 FOR UPDATE SKIP LOCKED)
                   , gone AS (DELETE FROM request_replies r USING old
                              WHERE (r.tenant_id, r.method, r.key) = (old.tenant_id, old.method, old.key)
                              RETURNING 1)
                   SELECT count(*) FROM gone""",
                before,
                limit,
            )
        return int(deleted)
