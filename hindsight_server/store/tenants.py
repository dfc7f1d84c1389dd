"""ApiKeyStore: the SQL of `api_keys`. Only the SHA-256 of a key's secret is stored."""

from __future__ import annotations

from datetime import datetime

import asyncpg

from hindsight_server.domain.principal import ApiKeyRecord, Scope
from hindsight_server.store.errors import translate_errors

__all__ = ["ApiKeyStore"]

_COLUMNS = "key_id, tenant_id, key_hash, label, created_at, revoked_at, scopes, agent_id"


def _record(row: asyncpg.Record) -> ApiKeyRecord:
    values = dict(row)
    return ApiKeyRecord(**{**values, "scopes": frozenset(Scope(name) for name in values["scopes"])})


class ApiKeyStore:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def add(
        self,
        key_id: str,
        tenant_id: str,
        key_hash: bytes,
        label: str,
        now: datetime,
        *,
        scopes: frozenset[Scope],
        agent_id: str,
    ) -> None:
        async with translate_errors():
            await self._pool.execute(
                """INSERT INTO api_keys (key_id, tenant_id, key_hash, label, created_at, scopes, agent_id)
                   VALUES ($1, $2, $3, $4, $5, $6, $7)""",
                key_id,
                tenant_id,
                key_hash,
                label,
                now,
                sorted(scopes),
                agent_id,
            )

    async def find(self, key_id: str) -> ApiKeyRecord | None:
        async with translate_errors():
            row = await self._pool.fetchrow(
                f"SELECT {_COLUMNS} FROM api_keys WHERE key_id = $1",
                key_id,
            )
        return None if row is None else _record(row)

    async def list(self, tenant_id: str = "") -> list[ApiKeyRecord]:
        async with translate_errors():
            rows = await self._pool.fetch(
                f"""SELECT {_COLUMNS} FROM api_keys
                    WHERE $1 = '' OR tenant_id = $1 ORDER BY tenant_id, created_at""",
                tenant_id,
            )
        return [_record(row) for row in rows]

    async def revoke(self, key_id: str, now: datetime) -> bool:
        async with translate_errors():
            done = await self._pool.fetchval(
                "UPDATE api_keys SET revoked_at = $2 WHERE key_id = $1 AND revoked_at IS NULL RETURNING true",
                key_id,
                now,
            )
        return bool(done)
