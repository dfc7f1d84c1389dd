"""Write, WriteBatch, Get, Update, Delete and List over real gRPC against real PostgreSQL."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import grpc
import pytest

from hindsight.client import HindsightClient, memory_input
from hindsight.v1 import memory_pb2 as pb
from hindsight_server.process.running import RunningServer


async def test_write_then_get_round_trips_every_field(client: HindsightClient, tenant: str) -> None:
    valid_from = datetime(2025, 1, 8, 14, tzinfo=UTC)
    written = await client.write(
        tenant,
        "用户预订下周三下午A栋10人会议室",
        tier="episodic",
        kind="event",
        subject="user-7",
        agent_id="booking-agent",
        session_id="sess_20250101_001",
        intent="book_meeting_room",
        entities={"date": "2025-01-08", "capacity": 10, "building": "A", "slots": ["14:00", "16:00"]},
        confidence=0.9,
        valid_from=valid_from,
        valid_to=valid_from + timedelta(hours=2),
    )
    assert written.created
    got = await client.get(tenant, written.memory.id)
    assert got == written.memory
    assert got.tenant_id == tenant
    assert (got.subject, got.agent_id, got.session_id, got.intent) == (
        "user-7",
        "booking-agent",
        "sess_20250101_001",
        "book_meeting_room",
    )
    assert (got.tier, got.kind, got.status) == (pb.TIER_EPISODIC, pb.KIND_EVENT, pb.STATUS_ACTIVE)
    assert dict(got.entities) == {
        "date": "2025-01-08",
        "capacity": 10,
        "building": "A",
        "slots": ["14:00", "16:00"],
    }
    assert got.confidence == pytest.approx(0.9)
    assert got.valid_from.ToDatetime(UTC) == valid_from
    assert got.version == 1
    assert got.embedding_state == pb.EMBEDDING_STATE_DISABLED
    # docs/design.md: an event expires after 90 days unless told otherwise.
    assert got.expires_at.ToDatetime(UTC) - got.created_at.ToDatetime(UTC) == timedelta(days=90)


async def test_low_confidence_memories_wait_in_pending(client: HindsightClient, tenant: str) -> None:
    written = await client.write(
        tenant, "maybe likes jazz", tier="semantic", kind="preference", confidence=0.5
    )
    assert written.memory.status == pb.STATUS_PENDING


async def test_idempotency_key_returns_the_original_never_a_duplicate(
    client: HindsightClient, tenant: str
) -> None:
    first = await client.write(tenant, "likes tea", tier="semantic", kind="preference", idempotency_key="k1")
    again = await client.write(tenant, "likes tea", tier="semantic", kind="preference", idempotency_key="k1")
    assert first.created and not again.created
    assert again.memory == first.memory
    # Racing writers with one key still produce exactly one memory.
    racers = await asyncio.gather(
        *(
            client.write(tenant, "likes coffee", tier="semantic", kind="fact", idempotency_key="k2")
            for _ in range(8)
        )
    )
    assert len({r.memory.id for r in racers}) == 1
    assert sum(r.created for r in racers) == 1
    listed = [m async for m in client.list_all(tenant)]
    assert len(listed) == 2


async def test_write_batch_is_ordered_and_all_or_nothing(client: HindsightClient, tenant: str) -> None:
    items = [
        memory_input(f"fact {i}", tier="semantic", kind="fact", idempotency_key=f"b{i}") for i in range(5)
    ]
    response = await client.write_batch(tenant, items)
    assert [r.memory.content for r in response.results] == [f"fact {i}" for i in range(5)]
    assert all(r.created for r in response.results)
    replay = await client.write_batch(
        tenant, [*items[:2], memory_input("fact new", tier="semantic", kind="fact")]
    )
    assert [r.created for r in replay.results] == [False, False, True]
    assert replay.results[0].memory.id == response.results[0].memory.id

    bad = [memory_input("ok", tier="semantic", kind="fact"), memory_input("", tier="semantic", kind="fact")]
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await client.write_batch(tenant, bad)
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "memories[1].content" in (error.value.details() or "")
    assert len([m async for m in client.list_all(tenant)]) == 6  # nothing of the bad batch landed


async def test_update_changes_only_the_masked_fields(client: HindsightClient, tenant: str) -> None:
    written = await client.write(
        tenant, "会议在周三", tier="episodic", kind="event", intent="book", entities={"day": "Wed"}
    )
    updated = await client.update(tenant, written.memory.id, content="会议在周五", entities={"day": "Fri"})
    assert updated.content == "会议在周五"
    assert dict(updated.entities) == {"day": "Fri"}
    assert updated.intent == "book"
    assert updated.version == 2
    assert updated.updated_at.ToDatetime(UTC) >= written.memory.updated_at.ToDatetime(UTC)
    found = await client.recall(tenant, "周五", min_score=0)
    assert [h.memory.id for h in found.hits] == [written.memory.id]
    assert not (await client.recall(tenant, "周三", min_score=0)).hits


async def test_update_with_a_stale_version_is_aborted(client: HindsightClient, tenant: str) -> None:
    written = await client.write(tenant, "v1", tier="semantic", kind="fact")
    await client.update(tenant, written.memory.id, content="v2", expected_version=1)
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await client.update(tenant, written.memory.id, content="v3", expected_version=1)
    assert error.value.code() == grpc.StatusCode.ABORTED
    assert (await client.get(tenant, written.memory.id)).content == "v2"


async def test_delete_is_soft_idempotent_and_hides_from_recall(client: HindsightClient, tenant: str) -> None:
    written = await client.write(tenant, "prefers window seats", tier="semantic", kind="preference")
    deleted = await client.delete(tenant, written.memory.id)
    assert deleted.status == pb.STATUS_DELETED
    assert (await client.delete(tenant, written.memory.id)).status == pb.STATUS_DELETED
    assert (await client.get(tenant, written.memory.id)).status == pb.STATUS_DELETED
    assert not (await client.recall(tenant, "window seats", min_score=0)).hits
    assert not (await client.list(tenant)).memories
    assert len((await client.list(tenant, statuses=["deleted"])).memories) == 1
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await client.update(tenant, written.memory.id, content="again")
    assert error.value.code() == grpc.StatusCode.FAILED_PRECONDITION


async def test_unknown_ids_are_not_found(client: HindsightClient, tenant: str) -> None:
    missing = "01a22b18-e375-7426-afa1-f923854e099a"
    for call in (
        client.get(tenant, missing),
        client.delete(tenant, missing),
        client.update(tenant, missing, content="x"),
    ):
        with pytest.raises(grpc.aio.AioRpcError) as error:
            await call
        assert error.value.code() == grpc.StatusCode.NOT_FOUND
        assert missing in (error.value.details() or "")


async def test_list_filters_and_pages_newest_first(client: HindsightClient, tenant: str) -> None:
    base = datetime.now(UTC) - timedelta(hours=1)
    items = [
        memory_input(
            f"m{i}",
            tier="working" if i % 2 else "semantic",
            kind="fact",
            subject="u1" if i < 6 else "u2",
            session_id="s1",
            occurred_at=base + timedelta(minutes=i),
        )
        for i in range(9)
    ]
    await client.write_batch(tenant, items)
    page1 = await client.list(tenant, subject="u1", page_size=4)
    assert [m.content for m in page1.memories] == ["m5", "m4", "m3", "m2"]
    page2 = await client.list(tenant, subject="u1", page_size=4, page_token=page1.next_page_token)
    assert [m.content for m in page2.memories] == ["m1", "m0"]
    assert page2.next_page_token == ""
    working = await client.list(tenant, tiers=["working"])
    assert [m.content for m in working.memories] == ["m7", "m5", "m3", "m1"]
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await client.list(tenant, subject="u2", page_token=page1.next_page_token)
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "page_token" in (error.value.details() or "")


async def test_tenants_are_isolated(client: HindsightClient, tenant: str) -> None:
    written = await client.write(tenant, "secret plan for Acme", tier="semantic", kind="fact")
    other = f"{tenant}-other"
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await client.get(other, written.memory.id)
    assert error.value.code() == grpc.StatusCode.NOT_FOUND
    assert not (await client.list(other)).memories
    assert not (await client.recall(other, "secret plan", min_score=0)).hits
    with pytest.raises(grpc.aio.AioRpcError):
        await client.delete(other, written.memory.id)
    assert (await client.get(tenant, written.memory.id)).status == pb.STATUS_ACTIVE


async def test_health_and_reflection_are_served(server: RunningServer) -> None:
    from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

    async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        request = reflection_pb2.ServerReflectionRequest(list_services="")
        responses = [r async for r in stub.ServerReflectionInfo(iter([request]))]
    services = {s.name for s in responses[0].list_services_response.service}
    assert {"hindsight.v1.MemoryService", "grpc.health.v1.Health"} <= services
    async with HindsightClient(f"127.0.0.1:{server.port}") as client:
        assert await client.health() == "SERVING"
        assert await client.health("hindsight.v1.MemoryService") == "SERVING"
