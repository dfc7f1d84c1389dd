"""JobItemFailures: the items a lifecycle job failed on, each left alone until its retry time
(job_item_failures). A job reads it to skip what is backing off and writes it when an item fails."""

from __future__ import annotations

from datetime import datetime

from hindsight_server.store.errors import translate_errors
from hindsight_server.store.sql import OnPool

__all__ = ["BACKING_OFF", "JobItemFailures"]

# A filter for a job's candidate query: the item ($job, tenant_id, $item) is not waiting out a failure
# at $now. Formatted with the placeholders of the query it goes into.
BACKING_OFF = """EXISTS (SELECT FROM job_item_failures f
                         WHERE f.job = {job} AND f.tenant_id = {tenant} AND f.item = {item}
                           AND f.retry_at > {now})"""


class JobItemFailures(OnPool):
    async def failed(
        self, job: str, tenant_id: str, item: str, error: str, now: datetime, backoff_s: tuple[float, float]
    ) -> int:
        """Records one more failure; the item waits base * 2^(failures - 1) seconds, at most max
        (`backoff_s` = (base, max)). Returns how many times it has failed in a row."""
        base_s, max_s = backoff_s
        async with translate_errors():
            failures: int = await self._pool.fetchval(
                """INSERT INTO job_item_failures AS f
                       (job, tenant_id, item, failures, error, failed_at, retry_at)
                   VALUES ($1, $2, $3, 1, $4, $5::timestamptz,
                           $5::timestamptz + make_interval(secs => $6::float8))
                   ON CONFLICT (job, tenant_id, item) DO UPDATE
                   SET failures = f.failures + 1, error = EXCLUDED.error,
                       failed_at = EXCLUDED.failed_at,
                       retry_at = EXCLUDED.failed_at
                           + make_interval(
                               secs => least($7::float8, $6::float8 * power(2, least(f.failures, 30))))
                   RETURNING failures""",
                job,
                tenant_id,
                item,
                error,
                now,
                base_s,
                max_s,
            )
        return failures

    async def cleared(self, job: str, tenant_id: str, item: str) -> None:
        """The item went through: its failures are forgotten."""
        async with translate_errors():
            await self._pool.execute(
                "DELETE FROM job_item_failures WHERE job = $1 AND tenant_id = $2 AND item = $3",
                job,
                tenant_id,
                item,
            )

    async def count(self, job: str) -> int:
        async with translate_errors():
            found: int = await self._pool.fetchval(
                "SELECT count(*) FROM job_item_failures WHERE job = $1", job
            )
        return found
