"""The change feed (Watch): streams a tenant's events from a cursor, polling the outbox while idle, with
heartbeats, bounded reads and a bounded number of streams; and the retention job that trims it.

A stream holds no connection between reads (each read is one pooled statement), so an idle Watch costs
a poll every `poll_s`; the caller's writes are awaited one at a time (the transport bounds each), so a
slow reader slows its own stream only. LISTEN/NOTIFY could wake streams sooner; polling alone is the
fallback it would need anyway, and at 200 ms it is within the feed's lag budget.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from datetime import time as clock_time

from hindsight_server.domain.errors import OutOfRange, ResourceExhausted, Unavailable
from hindsight_server.domain.feed import START, ChangeEvent, Cursor, FeedQuery, Heartbeat
from hindsight_server.pipelines.ports import FeedLog

__all__ = ["FeedPipeline", "FeedSettings"]


@dataclass(frozen=True, slots=True)
class FeedSettings:
    retention: timedelta = timedelta(days=7)
    poll_s: float = 0.2
    heartbeat_s: float = 5.0
    batch_size: int = 200
    max_streams: int = 64
    max_streams_per_tenant: int = 4
    trim_batch: int = 5_000
    partitions_ahead: int = 2  # days after today whose partitions the retention job makes


class FeedPipeline:
    def __init__(self, store: FeedLog, settings: FeedSettings) -> None:
        self._store = store
        self._settings = settings
        self._streams: Counter[str] = Counter()
        self._closing = asyncio.Event()

    def close(self) -> None:
        """The server is stopping: every stream ends with UNAVAILABLE at its next poll (the client
        resumes from its last cursor on another server), before the pool it reads from closes."""
        self._closing.set()

    @contextmanager
    def _slot(self, tenant_id: str) -> Iterator[None]:
        settings = self._settings
        if sum(self._streams.values()) >= settings.max_streams:
            raise ResourceExhausted(
                f"this server streams {settings.max_streams} Watch calls already; retry later",
                retry_after_s=1.0,
            )
        if self._streams[tenant_id] >= settings.max_streams_per_tenant:
            raise ResourceExhausted(
                f"tenant {tenant_id!r} has {settings.max_streams_per_tenant} Watch streams open on this "
                "server already; close one or retry later",
                retry_after_s=1.0,
            )
        self._streams[tenant_id] += 1
        try:
            yield
        finally:
            self._streams[tenant_id] -= 1
            if not self._streams[tenant_id]:
                del self._streams[tenant_id]

    async def start(self, query: FeedQuery) -> Cursor:
        """Where the stream starts; OutOfRange for a cursor older than the retention."""
        trimmed = await self._store.trimmed(query.tenant_id)
        if query.oldest:
            return trimmed or START
        if query.after is None:
            return await self._store.horizon()
        if trimmed is not None and query.after < trimmed:
            days = self._settings.retention / timedelta(days=1)
            raise OutOfRange(
                f"cursor: {query.after} is older than the feed keeps ({days:g} days); the oldest cursor "
                f"still served is {trimmed} (or start from 'oldest')",
                cause="CURSOR_EXPIRED",
            )
        return query.after

    async def watch(self, query: FeedQuery) -> AsyncIterator[ChangeEvent | Heartbeat]:
        """A heartbeat with the starting cursor first, then the events as they come, a heartbeat after
        each `heartbeat_s` without one; until the caller stops taking them."""
        settings = self._settings
        with self._slot(query.tenant_id):
            after = await self.start(query)
            yield Heartbeat(after)
            beat = time.monotonic()
            while True:
                events, after = await self._store.read(query, after, settings.batch_size)
                for event in events:
                    yield event
                if events:
                    beat = time.monotonic()
                    if len(events) >= settings.batch_size:
                        continue  # more is waiting: read on at once
                elif time.monotonic() - beat >= settings.heartbeat_s:
                    yield Heartbeat(after)
                    beat = time.monotonic()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(settings.poll_s):
                        await self._closing.wait()
                if self._closing.is_set():
                    raise Unavailable(f"this server is stopping; resume the feed from cursor {after}")

    async def trim(self, now: datetime) -> int:
        """The retention job (store/feed.py): the coming days' partitions made, the days wholly past
        the retention dropped, and the default partition's old events deleted a batch a transaction;
        how many events went. A step whose lock is busy waits for the next round."""
        before, today = now - self._settings.retention, now.astimezone(UTC).date()
        days = await self._store.partitions()
        for ahead in range(self._settings.partitions_ahead + 1):
            if today + timedelta(days=ahead) not in days:
                await self._store.add_partition(today + timedelta(days=ahead))
        total = 0
        for day in days:
            if datetime.combine(day + timedelta(days=1), clock_time(), UTC) <= before:
                total += await self._store.drop_partition(day) or 0
        while True:
            deleted = await self._store.trim_default(before, self._settings.trim_batch)
            total += deleted
            if deleted < self._settings.trim_batch:
                return total
