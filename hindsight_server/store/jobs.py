"""JobStore: who runs a lifecycle job (a PostgreSQL advisory lock) and when each last ran (job_runs)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from datetime import datetime

import asyncpg

from hindsight_server.domain.jobs import JobRun
from hindsight_server.store.errors import CONNECTION_FAILURES, translate_errors


def _lock_name(job: str) -> str:
    # Hashed into the advisory lock space shared with the writers' peer-group locks ("peers\x1f..."):
    # the prefix keeps the two apart.
    return f"job\x1f{job}"


async def _unlock(connection: asyncpg.Connection, job: str) -> None:
    """Releases the job's lock before the connection goes back to the pool (which keeps sessions as
    they are: store/pool.py). When the unlock cannot be sent (the run was cancelled, the connection
    broke), the session is ended instead, which frees the lock, so no pooled connection holds it."""
    try:
        await connection.execute("SELECT pg_advisory_unlock(hashtextextended($1, 0))", _lock_name(job))
    except BaseException as exc:
        connection.terminate()
        if not isinstance(exc, CONNECTION_FAILURES):
            raise  # a cancellation goes on


class JobStore:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    @contextlib.asynccontextmanager
    async def exclusive(self, job: str) -> AsyncIterator[bool]:
        """Holds the job's session-level advisory lock on a connection of its own for the block; yields
        False at once when another connection (any server) holds it. The lock goes with the connection:
        a server that dies mid-run frees the job for the others."""
        async with translate_errors(), self._pool.acquire() as connection:
            held = await connection.fetchval(
                "SELECT pg_try_advisory_lock(hashtextextended($1, 0))", _lock_name(job)
            )
            try:
                yield bool(held)
            finally:
                if held:
                    await _unlock(connection, job)

    async def started(self, job: str, at: datetime, server: str) -> None:
        async with translate_errors():
            await self._pool.execute(
                """INSERT INTO job_runs (job, started_at, finished_at, processed, server)
                   VALUES ($1, $2, NULL, 0, $3)
                   ON CONFLICT (job) DO UPDATE
                   SET started_at = EXCLUDED.started_at, finished_at = NULL, processed = 0,
                       server = EXCLUDED.server""",
                job,
                at,
                server,
            )

    async def finished(self, job: str, at: datetime, processed: int) -> None:
        async with translate_errors():
            await self._pool.execute(
                "UPDATE job_runs SET finished_at = $2, processed = $3 WHERE job = $1", job, at, processed
            )

    async def last_runs(self) -> dict[str, JobRun]:
        async with translate_errors():
            rows = await self._pool.fetch(
                "SELECT job, started_at, finished_at, processed, server FROM job_runs"
            )
        return {
            row["job"]: JobRun(
                row["job"], row["started_at"], row["finished_at"], row["processed"], row["server"]
            )
            for row in rows
        }


__all__ = ["JobStore"]
