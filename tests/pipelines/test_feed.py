"""The change feed pipeline on the in-memory feed (tests/support/fakes): where a stream starts, what it
streams and in which order, heartbeats, the bounds on streams, its end when the server stops, and the
retention job's partitions and trims. The SQL behind the same calls runs against PostgreSQL in
tests/store/test_change_feed.py and tests/rpc/test_watch.py."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from hindsight_server.domain.errors import OutOfRange, ResourceExhausted, Unavailable
from hindsight_server.domain.feed import (
    MAX_SEQ,
    START,
    ChangeEvent,
    Cursor,
    EventType,
    FeedQuery,
    Heartbeat,
    NewEvent,
)
from hindsight_server.pipelines.feed import FeedPipeline, FeedSettings
from tests.support.fakes.feed_log import InMemoryFeedLog

NOW = datetime(2024, 5, 10, 12, tzinfo=UTC)
DAY = timedelta(days=1)
FAST = {"poll_s": 0.001, "heartbeat_s": 3600.0}  # no wait between reads, no heartbeat unless asked


def new(memory_id: str, tenant_id: str = "acme", at: datetime = NOW, **fields: Any) -> NewEvent:
    return NewEvent(tenant_id, fields.pop("type", EventType.CREATED), at, memory_id, **fields)


def feed(log: InMemoryFeedLog | None = None, **settings: Any) -> tuple[FeedPipeline, InMemoryFeedLog]:
    log = log or InMemoryFeedLog()
    return FeedPipeline(log, FeedSettings(**FAST | settings)), log


def watching(pipeline: FeedPipeline, query: FeedQuery) -> AsyncGenerator[ChangeEvent | Heartbeat, None]:
    """The stream, as the generator it is: a test closes it as the transport does when a call ends."""
    stream = pipeline.watch(query)
    assert isinstance(stream, AsyncGenerator)
    return stream


async def take(stream: AsyncIterator[ChangeEvent | Heartbeat], n: int) -> list[ChangeEvent | Heartbeat]:
    items = []
    async for item in stream:
        items.append(item)
        if len(items) == n:
            break
    return items


def ids(items: list[ChangeEvent | Heartbeat]) -> list[str]:
    return [item.memory_id for item in items if isinstance(item, ChangeEvent)]


@pytest.mark.parametrize(
    ("trimmed", "after", "oldest", "start"),
    [
        (None, None, True, START),  # nothing trimmed yet: from the very first event
        (Cursor(5, 9), None, True, Cursor(5, 9)),  # just after what retention dropped
        (None, None, False, Cursor(1, MAX_SEQ)),  # now: past the one transaction committed
        (Cursor(5, 9), Cursor(5, 9), False, Cursor(5, 9)),  # exactly at the trim: nothing was missed
        (Cursor(5, 9), Cursor(7, 1), False, Cursor(7, 1)),
    ],
)
async def test_a_stream_starts_at_the_cursor_asked_for(
    trimmed: Cursor | None, after: Cursor | None, oldest: bool, start: Cursor
) -> None:
    pipeline, log = feed()
    log.record([new("m1")])
    if trimmed is not None:
        log.trimmed_to["acme"] = trimmed
    assert await pipeline.start(FeedQuery("acme", after, oldest=oldest)) == start


async def test_a_cursor_older_than_the_retention_is_out_of_range() -> None:
    pipeline, log = feed(retention=timedelta(days=7))
    log.trimmed_to["acme"] = Cursor(5, 9)
    with pytest.raises(
        OutOfRange, match=r"cursor: 5\.8 is older than the feed keeps \(7 days\).* 5\.9"
    ) as err:
        await pipeline.start(FeedQuery("acme", Cursor(5, 8)))
    assert err.value.cause == "CURSOR_EXPIRED"
    log.trimmed_to.clear()  # another tenant's trim is not this one's
    log.trimmed_to["globex"] = Cursor(5, 9)
    assert await pipeline.start(FeedQuery("acme", Cursor(5, 8))) == Cursor(5, 8)


async def test_a_stream_opens_with_a_heartbeat_then_the_events_in_feed_order_across_batches() -> None:
    pipeline, log = feed(batch_size=2)
    log.record([new("m1"), new("m2")])
    log.record([new("m3")])
    log.record([new("m4"), new("m5")])
    items = await take(pipeline.watch(FeedQuery("acme", None, oldest=True)), 6)
    assert items[0] == Heartbeat(START)
    assert ids(items) == ["m1", "m2", "m3", "m4", "m5"]


async def test_a_stream_from_now_sees_only_what_comes_after() -> None:
    pipeline, log = feed()
    log.record([new("before")])
    stream = watching(pipeline, FeedQuery("acme", None))
    (beat,) = await take(stream, 1)
    log.record([new("after")])
    assert ids(await take(stream, 1)) == ["after"]
    assert isinstance(beat, Heartbeat) and beat.cursor == Cursor(1, MAX_SEQ)
    await stream.aclose()


@pytest.mark.parametrize(
    ("query", "seen"),
    [
        ({"subjects": frozenset({"user-7"})}, ["mine", "private"]),
        ({"kinds": frozenset({"fact"})}, ["mine"]),
        ({"types": frozenset({EventType.DELETED})}, ["private"]),
        ({"viewer": "agent-a"}, ["mine", "other", "own-private"]),  # no other agent's private memory
    ],
)
async def test_a_stream_carries_only_the_events_its_filters_let_through(
    query: dict[str, Any], seen: list[str]
) -> None:
    pipeline, log = feed()
    log.record(
        [
            new("mine", subject="user-7", kind="fact"),
            new("other", subject="user-8", kind="preference"),
            new(
                "private", subject="user-7", visibility="private", agent_id="agent-b", type=EventType.DELETED
            ),
            new("own-private", visibility="private", agent_id="agent-a"),
            new("elsewhere", tenant_id="globex", subject="user-7", kind="fact"),
        ]
    )
    stream = watching(pipeline, FeedQuery("acme", None, oldest=True, **query))
    items = await take(stream, 1 + len(seen))
    assert ids(items) == seen


async def test_an_event_of_a_transaction_in_flight_waits_and_is_not_skipped() -> None:
    """A transaction that began first but commits last is streamed once it commits, not lost behind the
    events of the later transaction the reader already passed."""
    pipeline, log = feed()
    slow = log.begin()
    log.record([new("quick")])
    stream = watching(pipeline, FeedQuery("acme", None, oldest=True))
    (beat,) = await take(stream, 1)
    assert beat == Heartbeat(START)
    log.record([new("slow")], xid=slow)
    assert ids(await take(stream, 2)) == ["slow", "quick"]
    await stream.aclose()


async def test_an_idle_stream_beats_with_the_position_it_reached() -> None:
    pipeline, log = feed(heartbeat_s=0.0)
    log.record([new("m1")])
    items = await take(pipeline.watch(FeedQuery("acme", None, oldest=True)), 3)
    assert items[0] == Heartbeat(START) and ids(items) == ["m1"]
    assert items[2] == Heartbeat(Cursor(1, MAX_SEQ))


async def test_a_stopping_server_ends_each_stream_with_the_cursor_to_resume_from() -> None:
    pipeline, log = feed()
    log.record([new("m1")])
    stream = watching(pipeline, FeedQuery("acme", None, oldest=True))
    await take(stream, 2)
    pipeline.close()
    with pytest.raises(
        Unavailable, match=rf"this server is stopping; resume the feed from cursor 1\.{MAX_SEQ}$"
    ):
        await take(stream, 1)


@pytest.mark.parametrize(
    ("tenants", "message"),
    [
        (["acme", "acme"], "tenant 'acme' has 2 Watch streams open on this server already"),
        (["acme", "globex", "initech"], "this server streams 3 Watch calls already; retry later"),
    ],
)
async def test_streams_are_bounded_per_tenant_and_per_server(tenants: list[str], message: str) -> None:
    pipeline, _ = feed(max_streams=3, max_streams_per_tenant=2)
    open_streams = [watching(pipeline, FeedQuery(tenant, None)) for tenant in tenants]
    for stream in open_streams:
        await take(stream, 1)
    refused = pipeline.watch(FeedQuery("acme", None))
    with pytest.raises(ResourceExhausted, match=message) as err:
        await take(refused, 1)
    assert err.value.retry_after_s == 1.0
    await open_streams[0].aclose()  # a closed stream gives its slot back
    assert await take(pipeline.watch(FeedQuery("acme", None)), 1) == [Heartbeat(Cursor(0, MAX_SEQ))]
    for stream in open_streams[1:]:
        await stream.aclose()


async def test_trim_makes_the_coming_days_partitions_and_drops_the_days_past_the_retention() -> None:
    today = NOW.date()
    log = InMemoryFeedLog(days={today - 9 * DAY, today - 8 * DAY, today - 7 * DAY, today + DAY})
    pipeline, _ = feed(log, retention=timedelta(days=7), partitions_ahead=2)
    log.record([new("old", at=NOW - 9 * DAY), new("older", at=NOW - 8 * DAY, tenant_id="globex")])
    kept = log.record([new("kept", at=NOW - 7 * DAY)])  # its day ends within the retention
    assert await pipeline.trim(NOW) == 2
    assert await log.partitions() == [today - 7 * DAY, today, today + DAY, today + 2 * DAY]
    assert [e.memory_id for e in log.events_of("acme")] == ["kept"]
    assert log.trimmed_to == {"acme": Cursor(1, 1), "globex": Cursor(1, 2)}
    assert kept[0].cursor > log.trimmed_to["acme"]
    assert await pipeline.trim(NOW) == 0  # a rerun finds nothing more


async def test_trim_deletes_the_default_partitions_old_events_a_batch_at_a_time() -> None:
    pipeline, log = feed(retention=timedelta(days=7), trim_batch=2, partitions_ahead=0)
    log.record([new(f"old-{n}", at=NOW - 8 * DAY) for n in range(5)])  # no partition: the default's
    log.record([new("recent", at=NOW - 6 * DAY)])
    assert await pipeline.trim(NOW) == 5
    assert [e.memory_id for e in log.events_of("acme")] == ["recent"]
    with pytest.raises(OutOfRange):  # a reader that had not seen them cannot go on unaware
        await pipeline.start(FeedQuery("acme", START))


async def test_a_partition_whose_lock_is_busy_waits_for_the_next_round() -> None:
    today = NOW.date()
    old = today - 10 * DAY
    log = InMemoryFeedLog(days={old}, busy={old, today})
    pipeline, _ = feed(log, partitions_ahead=1)
    log.record([new("old", at=NOW - 10 * DAY)])
    assert await pipeline.trim(NOW) == 0
    assert await log.partitions() == [old, today + DAY]
    log.busy.clear()
    assert await pipeline.trim(NOW) == 1
    assert await log.partitions() == [today, today + DAY]
