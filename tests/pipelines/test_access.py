"""Access tracking (pipelines/access.py) on the in-memory store (tests/support/fakes): recalls' accesses
coalesced per memory and written at a flush, never lost to a failed or cancelled write nor counted twice
after it, one flush at a time, and the background loop that goes on past a database that is away."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest

from hindsight_server.domain.errors import Unavailable
from hindsight_server.pipelines.access import AccessTracker
from tests.domain.builders import numbered
from tests.support.fakes.memory_store import InMemoryMemoryStore

NOW = datetime(2024, 5, 1, 12, tzinfo=UTC)
HOUR = timedelta(hours=1)
ONE, TWO = numbered(1).id, numbered(2).id


def tracked(*, interval_s: float = 1.0) -> tuple[AccessTracker, InMemoryMemoryStore]:
    store = InMemoryMemoryStore()
    for n in (1, 2):
        store.add(numbered(n))
        store.add(numbered(n, tenant_id="globex"))
    return AccessTracker(store, lambda: NOW, interval_s), store


def counters(
    store: InMemoryMemoryStore, memory_id: str, tenant_id: str = "acme"
) -> tuple[int, datetime | None]:
    memory = store.get(tenant_id, memory_id)
    return memory.access_count, memory.last_accessed_at


async def test_accesses_are_coalesced_per_memory_and_written_at_the_flush() -> None:
    tracker, store = tracked()
    tracker.record("acme", [ONE, TWO, ONE], NOW - HOUR)
    tracker.record("acme", [ONE], NOW - 2 * HOUR)  # an earlier access never moves the last one back
    tracker.record("globex", [ONE])  # at the clock's time
    assert counters(store, ONE) == (0, None)  # nothing is written before the flush

    assert await tracker.flush() == 3  # (acme, one), (acme, two), (globex, one)

    assert counters(store, ONE) == (3, NOW - HOUR)
    assert counters(store, TWO) == (1, NOW - HOUR)
    assert counters(store, ONE, "globex") == (1, NOW)
    assert counters(store, TWO, "globex") == (0, None)
    assert await tracker.flush() == 0  # written once: a second flush has nothing
    assert counters(store, ONE) == (3, NOW - HOUR)


@pytest.mark.parametrize(
    ("stored_last", "accessed", "last"),
    [
        (None, NOW, NOW),
        (NOW - HOUR, NOW, NOW),
        (NOW + HOUR, NOW, NOW + HOUR),  # the stored one is later: it stays
    ],
)
async def test_a_flush_moves_the_last_access_forward_only(
    stored_last: datetime | None, accessed: datetime, last: datetime
) -> None:
    tracker, store = tracked()
    store.add(numbered(1, access_count=4, last_accessed_at=stored_last))
    tracker.record("acme", [ONE], accessed)
    await tracker.flush()
    assert counters(store, ONE) == (5, last)


async def test_a_memory_gone_before_the_flush_is_skipped_and_the_others_written() -> None:
    tracker, store = tracked()
    tracker.record("acme", [ONE, numbered(9).id])
    await tracker.flush()
    assert counters(store, ONE) == (1, NOW)
    assert numbered(9).id not in store.memories["acme"]


async def test_a_failed_flush_keeps_the_accesses_for_the_next_without_counting_twice() -> None:
    tracker, store = tracked()
    tracker.record("acme", [ONE, ONE], NOW - HOUR)
    store.failing = Unavailable("the database is unavailable; retry later")
    with pytest.raises(Unavailable):
        await tracker.flush()
    tracker.record("acme", [ONE], NOW)  # recorded while the database was away
    store.failing = None

    assert await tracker.flush() == 1
    assert counters(store, ONE) == (3, NOW)


@dataclass
class HeldStore:
    """AccessCounts whose writes wait until `released` is set: a slow database."""

    store: InMemoryMemoryStore
    released: asyncio.Event = field(default_factory=asyncio.Event)
    writing: asyncio.Event = field(default_factory=asyncio.Event)

    async def record_access(self, accesses: Sequence[tuple[str, str, int, datetime]]) -> None:
        self.writing.set()
        await self.released.wait()
        await self.store.record_access(accesses)


async def test_a_flush_called_during_another_returns_with_everything_recorded_before_it_written() -> None:
    _, store = tracked()
    held = HeldStore(store)
    tracker = AccessTracker(held, lambda: NOW)
    tracker.record("acme", [ONE])
    first = asyncio.create_task(tracker.flush())
    await held.writing.wait()
    tracker.record("acme", [TWO])  # after the first flush took its batch
    second = asyncio.create_task(tracker.flush())
    await asyncio.sleep(0)
    assert not second.done()  # it waits for the first one
    held.released.set()

    assert (await first, await second) == (1, 1)
    assert (counters(store, ONE)[0], counters(store, TWO)[0]) == (1, 1)


async def test_a_cancelled_flush_keeps_its_accesses() -> None:
    _, store = tracked()
    held = HeldStore(store)
    tracker = AccessTracker(held, lambda: NOW)
    tracker.record("acme", [ONE, ONE])
    flush = asyncio.create_task(tracker.flush())
    await held.writing.wait()
    flush.cancel()
    with pytest.raises(asyncio.CancelledError):
        await flush
    held.released.set()

    assert await tracker.flush() == 1
    assert counters(store, ONE) == (2, NOW)


async def test_the_loop_writes_every_interval_and_goes_on_past_a_database_that_is_away(
    caplog: pytest.LogCaptureFixture,
) -> None:
    tracker, store = tracked(interval_s=0)
    loop = asyncio.create_task(tracker.run_forever())
    try:
        store.failing = Unavailable("the database is unavailable; retry later")
        tracker.record("acme", [ONE])
        with caplog.at_level(logging.WARNING):
            for _ in range(3):
                await asyncio.sleep(0)
        assert "access tracking paused" in caplog.text
        store.failing = None
        for _ in range(3):
            await asyncio.sleep(0)
        assert counters(store, ONE) == (1, NOW)
    finally:
        loop.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await loop
