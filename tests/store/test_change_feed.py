"""The change feed's outbox: each write records its events in its own transaction, and a reader that
resumes from any position it was given misses none and sees none twice, also when transactions commit
in another order than they took their positions (store/feed.py)."""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta

import asyncpg

from hindsight.client import HindsightClient
from hindsight_server.domain.feed import START, ChangeEvent, Cursor, EventType, FeedQuery, NewEvent
from hindsight_server.pipelines.feed import FeedPipeline, FeedSettings
from hindsight_server.process.running import RunningServer
from hindsight_server.store.feed import FeedStore, record_events
from hindsight_server.store.lifecycle import LifecycleStore
from tests.support.memory_fields import MemoryFields

FACT: MemoryFields = {"tier": "semantic", "kind": "fact", "subject": "u1"}


async def _all(feed: FeedStore, tenant: str, after: Cursor = START) -> tuple[list[ChangeEvent], Cursor]:
    events: list[ChangeEvent] = []
    while True:
        batch, after = await feed.read(FeedQuery(tenant, after), after, 2)
        events += batch
        if len(batch) < 2:
            return events, after


async def test_writes_record_their_events_in_order(
    client: HindsightClient, server: RunningServer, tenant: str
) -> None:
    first = await client.write(
        tenant, "Ana lives in Lisbon", intent="home", entities={"city": "Lisbon"}, **FACT
    )
    again = await client.write(
        tenant, "Ana lives in Lisbon", intent="home", entities={"city": "Lisbon"}, **FACT
    )
    moved = await client.write(
        tenant, "Ana lives in Porto", intent="home", entities={"city": "Porto"}, **FACT
    )
    assert again.resolution == "merged" and moved.resolution == "superseded"
    pending = await client.write(
        tenant, "Ana may like tea", confidence=0.4, tier="semantic", kind="preference"
    )
    await client.confirm_pending(tenant, pending.memory.id)
    await client.update(tenant, moved.memory.id, content="Ana lives in Porto, Ribeira")
    await client.delete(tenant, moved.memory.id)

    events, _ = await _all(FeedStore(server.pool), tenant)
    assert [(e.type, e.memory_id) for e in events] == [
        (EventType.CREATED, first.memory.id),
        (EventType.MERGED, first.memory.id),
        (EventType.CREATED, moved.memory.id),
        (EventType.SUPERSEDED, first.memory.id),
        (EventType.CREATED, pending.memory.id),
        (EventType.CONFIRMED, pending.memory.id),
        (EventType.UPDATED, moved.memory.id),
        (EventType.DELETED, moved.memory.id),
    ]
    assert events[2].resolution == "superseded"
    assert events[6].fields == ("content",)
    assert all(e.content is None for e in events)  # the default: no content in the feed
    assert all(e.subject == "u1" for e in events[:4])
    assert [e.cursor for e in events] == sorted(e.cursor for e in events)
    assert len({e.id for e in events}) == len(events)


def _event(tenant: str, subject: str) -> NewEvent:
    return NewEvent(
        tenant, EventType.CREATED, datetime.now(UTC), "00000000-0000-0000-0000-000000000001", subject
    )


async def test_transactions_committing_out_of_order_are_not_skipped(
    server: RunningServer, tenant: str
) -> None:
    """T1 takes its xid first, T2 then takes a smaller seq than T1 will; T1 commits first. A reader
    between the commits must not hand out a position past T2's event."""
    feed = FeedStore(server.pool)
    start = await feed.horizon()
    async with server.pool.acquire() as one, server.pool.acquire() as two:
        t1, t2 = one.transaction(), two.transaction()
        await t1.start()
        await t2.start()
        await one.execute("SELECT pg_current_xact_id()")  # T1's xid, the smaller
        await two.execute("SELECT pg_current_xact_id()")
        await record_events(two, [_event(tenant, "second")])  # T2: the smaller seq
        await record_events(one, [_event(tenant, "first")])
        await t1.commit()

        seen, position = await _all(feed, tenant, start)
        assert [e.subject for e in seen] == ["first"]  # T1 ended: below the horizon; T2 is not
        await t2.commit()
    later, _ = await _all(feed, tenant, position)
    assert [e.subject for e in seen + later] == ["first", "second"]


async def test_a_reader_never_passes_an_uncommitted_transaction(server: RunningServer, tenant: str) -> None:
    feed = FeedStore(server.pool)
    start = await feed.horizon()
    async with server.pool.acquire() as early, server.pool.acquire() as late:
        t_early, t_late = early.transaction(), late.transaction()
        await t_early.start()
        await t_late.start()
        await record_events(early, [_event(tenant, "early")])
        await record_events(late, [_event(tenant, "late")])
        await t_late.commit()  # committed first, but later in the feed's order
        seen, position = await _all(feed, tenant, start)
        assert seen == []  # the early transaction still runs: nothing past it is served
        await t_early.commit()
    later, end = await _all(feed, tenant, position)
    assert [e.subject for e in later] == ["early", "late"]
    again, _ = await _all(feed, tenant, end)
    assert again == []


async def test_a_rolled_back_write_leaves_no_event(server: RunningServer, tenant: str) -> None:
    feed = FeedStore(server.pool)
    start = await feed.horizon()
    connection: asyncpg.Connection
    async with server.pool.acquire() as connection:
        transaction = connection.transaction()
        await transaction.start()
        await record_events(connection, [_event(tenant, "phantom")])
        await transaction.rollback()
    seen, _ = await _all(feed, tenant, start)
    assert seen == []


async def test_retention_trims_by_age_and_remembers_how_far(server: RunningServer, tenant: str) -> None:
    feed = FeedStore(server.pool)
    old = NewEvent(
        tenant, EventType.CREATED, datetime.now(UTC) - timedelta(days=30), _event(tenant, "").memory_id
    )
    async with server.pool.acquire() as connection:
        await record_events(connection, [old])
        await record_events(connection, [_event(tenant, "new")])
    while await feed.trim_default(datetime.now(UTC) - timedelta(days=7), 1000):
        pass
    events, _ = await _all(feed, tenant)
    assert [e.subject for e in events] == ["new"]
    trimmed = await feed.trimmed(tenant)
    assert trimmed is not None and trimmed < events[0].cursor


async def test_retention_drops_a_past_day_whole_and_remembers_how_far(
    server: RunningServer, tenant: str
) -> None:
    feed = FeedStore(server.pool)
    day = date(2001, 1, 1) + timedelta(days=int(tenant[-4:], 16) % 3000)  # a day of this test's own
    assert await feed.add_partition(day)
    assert day in await feed.partitions()
    at = datetime.combine(day, time(12), UTC)
    old = NewEvent(tenant, EventType.CREATED, at, _event(tenant, "").memory_id, subject="old")
    async with server.pool.acquire() as connection:
        await record_events(connection, [old])
        await record_events(connection, [_event(tenant, "new")])
    in_day = await server.pool.fetchval(
        f"SELECT count(*) FROM change_events_p{day:%Y%m%d} WHERE tenant_id = $1", tenant
    )
    assert in_day == 1  # routed to its day, not to the default partition
    before = await _all(feed, tenant)
    assert await feed.drop_partition(day) is not None
    assert day not in await feed.partitions()
    events, _ = await _all(feed, tenant)
    assert [e.subject for e in events] == ["new"]
    trimmed = await feed.trimmed(tenant)
    assert trimmed is not None and before[0][0].cursor <= trimmed < events[0].cursor


async def test_a_day_whose_events_sit_in_the_default_partition_waits(
    server: RunningServer, tenant: str
) -> None:
    feed = FeedStore(server.pool)
    day = date(1990, 1, 1) + timedelta(days=int(tenant[-4:], 16) % 3000)
    stray = NewEvent(
        tenant, EventType.CREATED, datetime.combine(day, time(1), UTC), _event(tenant, "").memory_id
    )
    async with server.pool.acquire() as connection:
        await record_events(connection, [stray])
    assert not await feed.add_partition(day)  # the default partition holds one of its events
    assert day not in await feed.partitions()
    while await feed.trim_default(datetime.now(UTC) - timedelta(days=7), 1000):
        pass
    events, _ = await _all(feed, tenant)
    assert events == []
    assert await feed.add_partition(day)  # nothing of the day is left there
    assert await feed.drop_partition(day) is not None


async def test_the_retention_job_makes_the_coming_days_and_drops_the_past_ones(
    server: RunningServer, tenant: str
) -> None:
    feed = FeedStore(server.pool)
    past = date(2010, 1, 1) + timedelta(days=int(tenant[-4:], 16) % 3000)
    assert await feed.add_partition(past)
    now = datetime.now(UTC)
    await FeedPipeline(feed, FeedSettings(retention=timedelta(days=7), partitions_ahead=3)).trim(now)
    days = await feed.partitions()
    assert past not in days
    for ahead in range(4):
        day = now.date() + timedelta(days=ahead)
        # Made, unless events of that day sit in the default partition already (other tests move their
        # clocks ahead): then it waits for them to age out, and no write ever failed for it.
        start = datetime.combine(day, time(), UTC)
        waiting = await server.pool.fetchval(
            "SELECT count(*) FROM change_events_default WHERE at >= $1 AND at < $2",
            start,
            start + timedelta(days=1),
        )
        assert day in days or waiting > 0, day


async def test_the_expire_and_purge_jobs_record_their_events(
    client: HindsightClient, server: RunningServer, tenant: str
) -> None:
    feed = FeedStore(server.pool)
    start = await feed.horizon()
    written = await client.write(tenant, "a short-lived note", **FACT)
    past = datetime.now(UTC) - timedelta(days=60)
    await server.pool.execute(
        "UPDATE memories SET expires_at = $3 WHERE tenant_id = $1 AND id = $2",
        tenant,
        written.memory.id,
        past,
    )
    jobs = LifecycleStore(server.pool)
    now = datetime.now(UTC)
    while await jobs.expire_batch(now, 500) == 500:
        pass
    while await jobs.purge_batch(now - timedelta(days=7), None, now, 500) == 500:
        pass
    events, _ = await _all(feed, tenant, start)
    assert [e.type for e in events] == [EventType.CREATED, EventType.EXPIRED, EventType.PURGED]
    assert {e.memory_id for e in events} == {written.memory.id}
