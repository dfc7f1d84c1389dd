"""One item cannot stop a job: each item of a lifecycle job runs on its own, and one that fails is
recorded (job, tenant, item, exception class; never content), counted, logged, and left alone with a
growing backoff while the job goes on with the others.

A database that is away is not an item's fault: Unavailable and DeadlineExceeded end the run as before
(the scheduler logs one line and runs the job again at its next interval).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar

from hindsight_server.domain.errors import DeadlineExceeded, Unavailable
from hindsight_server.pipelines.ports import ItemFailures
from hindsight_server.telemetry.counters import count_failure

__all__ = ["ItemIsolation", "JobItem"]

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class JobItem:
    job: str
    tenant_id: str
    item: str  # the item's id within its tenant: a session id, a subject
    failures: int = 0  # how many times in a row it failed before this run (0: it never did)


class ItemIsolation:
    def __init__(self, failures: ItemFailures, *, backoff_s: float, max_backoff_s: float) -> None:
        self._failures = failures
        self._backoff = (backoff_s, max_backoff_s)

    async def run(self, item: JobItem, work: Callable[[], Awaitable[T]], now: datetime) -> T | None:
        """`work()`'s result, or None when it failed (then recorded as above)."""
        try:
            result = await work()
        except (asyncio.CancelledError, Unavailable, DeadlineExceeded):
            raise
        except Exception as exc:
            error = type(exc).__name__
            count_failure(item.job, exc)
            failures = await self._failures.failed(
                item.job, item.tenant_id, item.item, error, now, self._backoff
            )
            # The item and its tenant name what failed; the exception's text may quote content, so only
            # its class is logged (the traceback at debug level, for a developer's own stack).
            log.warning(
                "job %s: item %r of tenant %r failed (%s, %d in a row); the job goes on without it",
                item.job,
                item.item,
                item.tenant_id,
                error,
                failures,
            )
            log.debug("job %s item failure", item.job, exc_info=True)
            return None
        if item.failures:
            await self._failures.cleared(item.job, item.tenant_id, item.item)
        return result
