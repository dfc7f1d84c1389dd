"""A started memory server, and its bounded stop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc
from grpc_health.v1._async import HealthServicer

from hindsight_server.domain.errors import HindsightError
from hindsight_server.inference.summarizer import LlmSummarizer
from hindsight_server.inference.tier import InferenceTier
from hindsight_server.outbound.webhook_http import WebhookSender
from hindsight_server.pipelines.access import AccessTracker
from hindsight_server.pipelines.audit import RecallAudit
from hindsight_server.pipelines.feed import FeedPipeline
from hindsight_server.pipelines.jobs import JobRunner
from hindsight_server.pipelines.vector_searches import VectorSearches
from hindsight_server.store.pool import BoundedPool
from hindsight_server.store.routing import ReadRouting
from hindsight_server.telemetry.status import StatusBoard

log = logging.getLogger(__name__)


@dataclass
class RunningServer:
    server: grpc.aio.Server
    port: int
    pool: BoundedPool
    health: HealthServicer
    grace_s: float
    inference: InferenceTier | None = None
    access: AccessTracker | None = None
    summarizer: LlmSummarizer | None = None
    jobs: JobRunner | None = None  # the lifecycle jobs (scheduled here when settings.jobs.enabled)
    status: StatusBoard | None = None  # the figures of `hindsight status` (Ops/Status)
    routing: ReadRouting | None = None  # which reads go to which replica
    feed: FeedPipeline | None = None  # the Watch streams, ended before the pool closes
    audit: RecallAudit | None = None  # the recall audit's buffer, written before the pool closes
    webhooks: WebhookSender | None = None  # closed after the deliveries (background tasks) stop
    vector_searches: VectorSearches | None = None  # its thread, ended once the calls have
    background: list[asyncio.Task[None]] = field(default_factory=list)

    def spawn(self, work: Coroutine[Any, Any, None], name: str) -> None:
        self.background.append(asyncio.create_task(work, name=name))

    async def stop(self) -> None:
        """Stops accepting calls, lets in-flight ones finish within the grace period, closes the pool.
        Bounded: each step that waits on others gets the grace period and a second more, then is forced."""
        patience_s = self.grace_s + 1.0
        await self.health.enter_graceful_shutdown()
        await cancel_all(self.background, patience_s)
        if self.feed is not None:
            self.feed.close()
        await self.server.stop(self.grace_s)
        if self.vector_searches is not None:
            self.vector_searches.close()
        if self.access is not None:
            with contextlib.suppress(HindsightError):
                await self.access.flush()  # what the last calls recalled
        if self.audit is not None:
            with contextlib.suppress(HindsightError):
                await self.audit.flush()  # the last recalls' audit entries
        await self.pool.close_within(patience_s)
        if self.routing is not None:
            await self.routing.close(patience_s)
        if self.inference is not None:
            await self.inference.close()
        if self.summarizer is not None:
            await self.summarizer.close()
        if self.status is not None:
            self.status.close()
        if self.webhooks is not None:
            await self.webhooks.close()


async def cancel_all(tasks: Sequence[asyncio.Task[None]], patience_s: float) -> None:
    """Cancels the tasks again and again until each has ended, for at most `patience_s`: one cancel can be
    lost (a library's wait_for on Python 3.11 returns a result that arrived with it), and a loop that lost
    it runs on. What is still running then is named in the log, with where it waits, and left behind."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + patience_s
    pending = {task for task in tasks if not task.done()}
    while pending and loop.time() < deadline:
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=min(0.5, max(deadline - loop.time(), 0.0)))
    for task in tasks:
        if task.done() and not task.cancelled():
            task.exception()  # retrieved: asyncio would otherwise log it again at exit
    for task in pending:
        frames = task.get_stack(limit=1)
        where = f"{frames[0].f_code.co_filename}:{frames[0].f_lineno}" if frames else "?"
        log.error("background task %s did not stop when cancelled (it waits at %s)", task.get_name(), where)
