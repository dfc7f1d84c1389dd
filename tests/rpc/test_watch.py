"""Watch, the change feed over real gRPC and PostgreSQL: order, filters, heartbeats, resumption (after a
cancel and after a server restart, by hand and by the client), old cursors, erasure, agent-bound keys
and bad input."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import TypedDict, Unpack

import grpc
import pytest

from hindsight.client import HindsightClient
from hindsight.v1 import memory_pb2 as pb
from hindsight_server.config import Settings
from hindsight_server.domain.feed import EventType, NewEvent
from hindsight_server.process.running import RunningServer
from hindsight_server.process.server import start_server
from hindsight_server.store.feed import FeedStore, record_events
from tests.support.memory_fields import MemoryFields
from tests.support.processes import create_key

FACT: MemoryFields = {"tier": "semantic", "kind": "fact"}


async def _take(stream: AsyncIterator[pb.WatchItem], count: int, timeout_s: float = 10) -> list[pb.WatchItem]:
    items: list[pb.WatchItem] = []

    async def take() -> None:
        async for item in stream:
            items.append(item)
            if len(items) == count:
                return

    await asyncio.wait_for(take(), timeout_s)
    return items


class Filters(TypedDict, total=False):
    """The filters of `HindsightClient.watch`."""

    subjects: Sequence[str]
    kinds: Sequence[str]
    event_types: Sequence[str]


async def _events(
    client: HindsightClient, tenant: str, cursor: str, count: int, **filters: Unpack[Filters]
) -> list[pb.ChangeEvent]:
    stream = client.watch(tenant, cursor, **filters)
    try:
        return [item.event for item in await _take(stream, count)]
    finally:
        await stream.aclose()


async def _start_cursor(client: HindsightClient, tenant: str) -> str:
    """The first heartbeat's cursor of a Watch from now."""
    stream = client.watch(tenant, heartbeats=True)
    try:
        (first,) = await _take(stream, 1)
    finally:
        await stream.aclose()
    return first.heartbeat.cursor


async def test_writes_stream_in_order_and_filters_select(client: HindsightClient, tenant: str) -> None:
    start = await _start_cursor(client, tenant)
    a = await client.write(tenant, "Ana likes green tea", subject="ana", tier="semantic", kind="preference")
    b = await client.write(tenant, "Bo lives in Porto", subject="bo", **FACT)
    await client.delete(tenant, a.memory.id)
    events = await _events(client, tenant, start, 3)
    assert [(e.type, e.memory_id) for e in events] == [
        ("created", a.memory.id),
        ("created", b.memory.id),
        ("deleted", a.memory.id),
    ]
    assert (
        events[0].subject == "ana"
        and events[0].kind == pb.KIND_PREFERENCE
        and not events[0].HasField("content")
    )
    assert [e.memory_id for e in await _events(client, tenant, start, 1, subjects=["bo"])] == [b.memory.id]
    assert [e.type for e in await _events(client, tenant, start, 1, event_types=["deleted"])] == ["deleted"]
    assert [e.memory_id for e in await _events(client, tenant, start, 1, kinds=["fact"])] == [b.memory.id]
    # Resumed from the first event's cursor: the rest, nothing again.
    assert [e.id for e in await _events(client, tenant, events[0].cursor, 2)] == [e.id for e in events[1:]]


async def test_oldest_starts_at_the_beginning(client: HindsightClient, tenant: str) -> None:
    first = await client.write(tenant, "the very first", **FACT)
    (event,) = await _events(client, tenant, "oldest", 1)
    assert event.memory_id == first.memory.id


@pytest.fixture(scope="module")
async def quick_server(make_settings: Callable[..., Settings]) -> AsyncIterator[RunningServer]:
    running = await start_server(
        make_settings(feed__heartbeat_s=0.2, feed__poll_s=0.05, feed__content_tenants=["t-content"])
    )
    yield running
    await running.stop()


async def test_an_idle_watch_sends_heartbeats_with_the_current_cursor(
    quick_server: RunningServer, tenant: str
) -> None:
    async with HindsightClient(f"127.0.0.1:{quick_server.port}") as client:
        stream = client.watch(tenant, heartbeats=True)
        try:
            beats = await _take(stream, 3, timeout_s=5)
            assert all(item.HasField("heartbeat") and item.heartbeat.cursor for item in beats)
            written = await client.write(tenant, "after the beats", **FACT)
            (item,) = [i for i in await _take(stream, 3, timeout_s=5) if i.HasField("event")][:1]
            assert item.event.memory_id == written.memory.id
        finally:
            await stream.aclose()


async def test_content_only_for_the_tenants_that_allow_it(quick_server: RunningServer) -> None:
    async with HindsightClient(f"127.0.0.1:{quick_server.port}") as client:
        start = await _start_cursor(client, "t-content")
        await client.write("t-content", "content travels here", **FACT)
        (event,) = await _events(client, "t-content", start, 1)
        assert event.content == "content travels here"


async def test_a_watch_resumed_after_a_restart_misses_nothing_and_repeats_nothing(
    make_settings: Callable[..., Settings], tenant: str
) -> None:
    first = await start_server(make_settings())
    port = first.port
    async with HindsightClient(f"127.0.0.1:{port}") as client:
        start = await _start_cursor(client, tenant)
        ids = [(await client.write(tenant, f"note {i}", **FACT)).memory.id for i in range(3)]
        seen = await _events(client, tenant, start, 2)  # cancelled after two
        await first.stop()
        second = await start_server(make_settings(server__port=port))
        try:
            ids.append((await client.write(tenant, "note 3", **FACT)).memory.id)
            rest = await _events(client, tenant, seen[-1].cursor, 2)
            assert [e.memory_id for e in seen + rest] == ids

            # The client resumes by itself after the server went away mid-stream.
            stream = client.watch(tenant, start)
            got = [item.event.memory_id for item in await _take(stream, 2)]
            await second.stop()
            second = await start_server(make_settings(server__port=port))
            await client.write(tenant, "note 4", **FACT)
            got += [item.event.memory_id for item in await _take(stream, 3, timeout_s=20)]
            await stream.aclose()
            assert got[:4] == ids and len(got) == 5 and len(set(got)) == 5
        finally:
            await second.stop()


async def test_a_cursor_older_than_the_retention_is_out_of_range(
    client: HindsightClient, server: RunningServer, tenant: str
) -> None:
    store = FeedStore(server.pool)
    old_at = datetime.now(UTC) - timedelta(days=30)
    async with server.pool.acquire() as connection:
        await record_events(
            connection, [NewEvent(tenant, EventType.CREATED, old_at, "00000000-0000-0000-0000-000000000002")]
        )
    (old,) = await _events(client, tenant, "oldest", 1)
    await client.write(tenant, "a newer one", **FACT)
    await client.write(tenant, "and another", **FACT)
    (_, newer, _) = await _events(client, tenant, "oldest", 3)
    while await store.trim_default(datetime.now(UTC) - timedelta(days=7), 1000):
        pass
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await _events(client, tenant, "0.0", 1)
    assert refused.value.code() == grpc.StatusCode.OUT_OF_RANGE
    assert old.cursor in (refused.value.details() or "")  # the oldest cursor still served
    (first,) = await _events(client, tenant, old.cursor, 1)
    assert first.id == newer.id


async def test_erasure_scrubs_the_feed(client: HindsightClient, server: RunningServer, tenant: str) -> None:
    start = await _start_cursor(client, tenant)
    erased = await client.write(tenant, "Ana's secret address", subject="ana", **FACT)
    await client.write(tenant, "Bo's note", subject="bo", **FACT)
    await client.erase(tenant, subject="ana")
    events = await _events(client, tenant, start, 2)
    assert [(e.type, e.memory_id, e.subject) for e in events][1] == ("erased", erased.memory.id, "")
    rows = await server.pool.fetch(
        """SELECT subject, content FROM change_events
           WHERE tenant_id = $1 AND type NOT IN ('erased', 'erasure_finished')""",
        tenant,
    )
    assert [row["subject"] for row in rows] == ["bo"]


async def test_a_consolidated_session_and_a_finished_erasure_are_events(
    client: HindsightClient, tenant: str
) -> None:
    start = await _start_cursor(client, tenant)
    await client.append_turn(tenant, "s-1", "I moved to Porto last week", subject="ana")
    await client.append_turn(tenant, "s-1", "Noted: you live in Porto now", role="assistant", subject="ana")
    ended = await client.end_session(tenant, "s-1", reason="task_done")
    assert ended.HasField("episode")
    types = ["consolidated", "erasure_finished"]
    (consolidated,) = await _events(client, tenant, start, 1, event_types=types)
    assert (consolidated.type, consolidated.memory_id) == ("consolidated", ended.episode.id)
    assert consolidated.session_id == "s-1" and list(consolidated.fields) == ["consolidated_turn"]
    erased = await client.erase(tenant, subject="ana")
    (finished,) = await _events(client, tenant, start, 1, event_types=types)
    assert (finished.type, finished.erasure_id, finished.resolution) == (
        "erasure_finished",
        erased.erasure_id,
        "subject",
    )
    # An erased subject is never named: its consolidated event went with its memories' events.
    assert finished.subject == "" and finished.memory_id == ""


async def test_bad_input_names_the_field(client: HindsightClient, tenant: str) -> None:
    cases: list[tuple[str, Filters, str]] = [
        ("not-a-cursor", {}, "cursor"),
        ("", {"event_types": ["exploded"]}, "event_types[0]"),
    ]
    for cursor, kwargs, field in cases:
        with pytest.raises(grpc.aio.AioRpcError) as bad:
            await _events(client, tenant, cursor, 1, **kwargs)
        assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert (bad.value.details() or "").startswith(f"{field}:")


@pytest.fixture(scope="module")
async def keyed_server(make_settings: Callable[..., Settings]) -> AsyncIterator[RunningServer]:
    running = await start_server(make_settings(security__require_api_keys=True, security__api_key_cache_s=0))
    yield running
    await running.stop()


async def test_an_agent_bound_key_sees_shared_and_its_own_private_events(
    keyed_server: RunningServer, postgres_dsn: str, tenant: str
) -> None:
    admin = await create_key(postgres_dsn, tenant)
    travel = await create_key(postgres_dsn, tenant, "--agent", "travel")
    target = f"127.0.0.1:{keyed_server.port}"
    async with (
        HindsightClient(target, api_key=admin["api_key"]) as owner,
        HindsightClient(target, api_key=travel["api_key"]) as agent,
    ):
        start = await _start_cursor(owner, tenant)
        await owner.write(tenant, "calendar's own", visibility="private", agent_id="calendar", **FACT)
        mine = await agent.write(tenant, "travel's own", visibility="private", **FACT)
        shared = await owner.write(tenant, "for everyone", **FACT)
        assert [e.memory_id for e in await _events(agent, tenant, start, 2)] == [
            mine.memory.id,
            shared.memory.id,
        ]
        assert len(await _events(owner, tenant, start, 3)) == 3
        with pytest.raises(grpc.aio.AioRpcError) as elsewhere:
            await _events(agent, f"{tenant}-other", "", 1)
        assert elsewhere.value.code() == grpc.StatusCode.PERMISSION_DENIED
