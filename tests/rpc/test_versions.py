"""Memory that stays true over time, over real gRPC: duplicates merge, new values supersede old ones,
History returns the chain, `as_of` answers what was believed then, and the pending area."""

from __future__ import annotations

from datetime import timedelta

import grpc
import pytest
from google.rpc import error_details_pb2

from hindsight.client import HindsightClient, memory_input
from hindsight.v1 import memory_pb2 as pb
from tests.conftest import MovableClock
from tests.support.memory_fields import MemoryFields
from tests.support.rich_errors import detail


async def test_the_same_fact_written_five_times_is_one_memory_seen_five_times(
    client: HindsightClient, tenant: str
) -> None:
    said = [
        "The user prefers a window seat.",
        "the user prefers a window seat",
        "The user prefers a WINDOW seat!",
    ]
    results = [
        await client.write(tenant, text, tier="semantic", kind="preference", subject="u1")
        for text in [*said, said[0], said[1]]
    ]
    assert [r.resolution for r in results] == ["created", "merged", "merged", "merged", "merged"]
    assert {r.memory.id for r in results} == {results[0].memory.id}
    stored = await client.get(tenant, results[0].memory.id)
    assert stored.seen_count == 5
    assert stored.content == said[0]  # the first wording stays
    assert stored.last_seen_at.ToDatetime() >= stored.created_at.ToDatetime()
    listed = await client.list(tenant)
    assert len(listed.memories) == 1


async def test_merging_needs_the_same_subject_and_kind(client: HindsightClient, tenant: str) -> None:
    first = await client.write(tenant, "likes green tea", tier="semantic", kind="preference", subject="u1")
    other_subject = await client.write(
        tenant, "likes green tea", tier="semantic", kind="preference", subject="u2"
    )
    other_kind = await client.write(tenant, "likes green tea", tier="semantic", kind="fact", subject="u1")
    assert other_subject.resolution == other_kind.resolution == "created"
    assert len({first.memory.id, other_subject.memory.id, other_kind.memory.id}) == 3


async def test_a_verbatim_batch_keeps_every_item(client: HindsightClient, tenant: str) -> None:
    items = [memory_input("thanks!", tier="episodic", kind="event", subject="u1") for _ in range(3)]
    merged = await client.write_batch(tenant, items)
    assert [r.resolution for r in merged.results] == ["created", "merged", "merged"]
    kept = await client.write_batch(f"{tenant}-import", items, verbatim=True)
    assert [r.resolution for r in kept.results] == ["created"] * 3
    assert len({r.memory.id for r in kept.results}) == 3


async def test_a_new_value_supersedes_the_old_version(
    client: HindsightClient, tenant: str, clock: MovableClock
) -> None:
    booking = MemoryFields(tier="episodic", kind="task", subject="u1", intent="book_meeting_room")
    wednesday = await client.write(
        tenant,
        "Book meeting room, building A, Wednesday",
        entities={"date": "2026-12-02", "building": "A"},
        **booking,
    )
    clock.advance(timedelta(minutes=5))
    before_change = clock()
    clock.advance(timedelta(minutes=5))
    friday = await client.write(
        tenant,
        "Book meeting room, building A, Friday",
        entities={"date": "2026-12-04", "building": "A"},
        **booking,
    )
    assert friday.resolution == "superseded"
    assert "date" in friday.resolution_reason
    assert friday.memory.supersedes == wednesday.memory.id

    old = await client.get(tenant, wednesday.memory.id)
    assert old.status == pb.STATUS_SUPERSEDED
    assert old.superseded_by == friday.memory.id
    assert old.valid_to.ToDatetime() == friday.memory.created_at.ToDatetime()

    chain = await client.history(tenant, wednesday.memory.id)
    assert [m.id for m in chain.versions] == [wednesday.memory.id, friday.memory.id]
    assert [m.id for m in (await client.history(tenant, friday.memory.id)).versions] == [
        wednesday.memory.id,
        friday.memory.id,
    ]

    now = await client.recall(tenant, "book meeting room", now=clock(), min_score=0)
    assert [h.memory.id for h in now.hits] == [friday.memory.id]
    everything = await client.recall(
        tenant, "book meeting room", include_superseded=True, now=clock(), min_score=0
    )
    assert {h.memory.id for h in everything.hits} == {wednesday.memory.id, friday.memory.id}
    then = await client.recall(tenant, "book meeting room", as_of=before_change, now=clock(), min_score=0)
    assert [h.memory.id for h in then.hits] == [wednesday.memory.id]


async def test_a_pending_memory_waits_for_a_decision(client: HindsightClient, tenant: str) -> None:
    unsure = await client.write(tenant, "might like jazz", tier="semantic", kind="preference", confidence=0.5)
    assert unsure.memory.status == pb.STATUS_PENDING
    assert not (await client.recall(tenant, "jazz", min_score=0)).hits

    confirmed = await client.confirm_pending(tenant, unsure.memory.id)
    assert confirmed.status == pb.STATUS_ACTIVE
    assert [h.memory.id for h in (await client.recall(tenant, "jazz", min_score=0)).hits] == [
        unsure.memory.id
    ]

    with pytest.raises(grpc.aio.AioRpcError) as again:
        await client.confirm_pending(tenant, unsure.memory.id)
    assert again.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "is active, not pending" in (again.value.details() or "")
    failure = detail(again.value, error_details_pb2.PreconditionFailure)  # which state forbade it
    assert failure is not None
    assert [(v.type, v.subject) for v in failure.violations] == [("STATUS", f"memories/{unsure.memory.id}")]
    info = detail(again.value, error_details_pb2.ErrorInfo)
    assert info is not None and info.reason == "MEMORY_NOT_PENDING"

    other = await client.write(tenant, "maybe vegetarian", tier="semantic", kind="fact", confidence=0.4)
    rejected = await client.reject_pending(tenant, other.memory.id)
    assert rejected.status == pb.STATUS_DELETED
    with pytest.raises(grpc.aio.AioRpcError) as gone:
        await client.reject_pending(tenant, other.memory.id)
    assert gone.value.code() == grpc.StatusCode.FAILED_PRECONDITION


@pytest.mark.parametrize("call", ["confirm_pending", "reject_pending", "history"])
async def test_unknown_or_malformed_ids_are_named(client: HindsightClient, tenant: str, call: str) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as missing:
        await getattr(client, call)(tenant, "01a22b8a-0000-7000-8000-000000000000")
    assert missing.value.code() == grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.aio.AioRpcError) as malformed:
        await getattr(client, call)(tenant, "not-an-id")
    assert malformed.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "id" in (malformed.value.details() or "")
