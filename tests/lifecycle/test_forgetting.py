"""Forgetting over a real server and database: TTL soft-expiry, the purge after a grace period with its
audit rows, version chains and BM25 statistics through a purge."""

from __future__ import annotations

from datetime import timedelta

import asyncpg
import grpc
import pytest

from hindsight.client import HindsightClient
from hindsight.v1 import memory_pb2 as pb
from hindsight_server.pipelines.jobs import JobRunner
from tests.conftest import MovableClock
from tests.lifecycle.checks import audit_rows, bm25_statistics, statuses
from tests.support.memory_fields import MemoryFields


async def test_working_memory_leaves_recall_after_24_hours_while_its_episode_remains(
    client: HindsightClient, jobs: JobRunner, tenant: str, clock: MovableClock
) -> None:
    turn = await client.write(
        tenant, "I need the meeting room in building A for ten people", tier="working", kind="task",
        session_id="s1", subject="u1",
    )  # fmt: skip
    episode = await client.write(
        tenant, "Booked the meeting room in building A for ten people", tier="episodic", kind="event",
        session_id="s1", subject="u1", intent="book_meeting_room", entities={"building": "A"},
    )  # fmt: skip
    before = await client.recall(tenant, "meeting room building A", min_score=0)
    assert {h.memory.id for h in before.hits} == {turn.memory.id, episode.memory.id}

    clock.advance(timedelta(hours=23))
    assert (await jobs.run("expire")).processed == 0
    clock.advance(timedelta(hours=2))
    result = await jobs.run("expire")
    assert (result.processed, result.skipped) == (1, False)

    assert (await client.get(tenant, turn.memory.id)).status == pb.STATUS_EXPIRED
    assert (await client.get(tenant, episode.memory.id)).status == pb.STATUS_ACTIVE
    after = await client.recall(tenant, "meeting room building A", min_score=0)
    assert [h.memory.id for h in after.hits] == [episode.memory.id]
    assert (await jobs.run("expire")).processed == 0  # nothing left to do: a rerun changes nothing


async def test_purge_waits_out_the_grace_then_deletes_with_an_audit_row_without_content(
    client: HindsightClient, jobs: JobRunner, pool: asyncpg.Pool, tenant: str, clock: MovableClock
) -> None:
    secret = "the door code is 4711"
    working = await client.write(tenant, f"Remember: {secret}", tier="working", kind="fact")
    deleted = await client.write(tenant, f"Preference: {secret}", tier="semantic", kind="preference")
    kept = await client.write(tenant, "User lives in Berlin", tier="semantic", kind="fact")
    await client.delete(tenant, deleted.memory.id)

    clock.advance(timedelta(hours=25))
    assert (await jobs.run("expire")).processed == 1
    assert (await jobs.run("purge")).processed == 0  # within the 7-day grace: still there
    clock.advance(timedelta(days=6))  # deleted 7 days 1 hour ago; expired 6 days 1 hour ago
    first = await jobs.run("purge")
    assert first.processed == 1
    assert await statuses(pool, tenant) == {working.memory.id: "expired", kept.memory.id: "active"}
    clock.advance(timedelta(days=1))
    purged_at = clock()
    assert (await jobs.run("purge", purged_at)).processed == 1
    assert await statuses(pool, tenant) == {kept.memory.id: "active"}

    for gone in (working, deleted):
        with pytest.raises(grpc.aio.AioRpcError) as error:
            await client.get(tenant, gone.memory.id)
        assert error.value.code() == grpc.StatusCode.NOT_FOUND
    audit = await audit_rows(pool, tenant)
    assert {row["memory_id"]: (row["tier"], row["kind"], row["status"], row["reason"]) for row in audit} == {
        working.memory.id: ("working", "fact", "expired", "ttl expired"),
        deleted.memory.id: ("semantic", "preference", "deleted", "deleted"),
    }
    by_id = {row["memory_id"]: row for row in audit}
    assert by_id[working.memory.id]["created_at"] == working.memory.created_at.ToDatetime(
        tzinfo=purged_at.tzinfo
    )
    assert by_id[working.memory.id]["purged_at"] == purged_at
    assert set(audit[0]) == {
        "id", "tenant_id", "memory_id", "tier", "kind", "status", "reason", "created_at", "purged_at",
    }  # fmt: skip
    assert not any(secret in str(value) for row in audit for value in row.values())
    assert (await jobs.run("purge")).processed == 0
    assert len(await audit_rows(pool, tenant)) == 2  # one row per memory, never twice


async def test_purging_a_version_keeps_the_rest_of_its_chain(
    client: HindsightClient, jobs: JobRunner, pool: asyncpg.Pool, tenant: str, clock: MovableClock
) -> None:
    booking: MemoryFields = {"tier": "episodic", "kind": "task", "intent": "book_meeting_room"}
    # u1: the newer version is deleted, the older one stays (superseded, expiring in 30 days).
    monday = await client.write(
        tenant, "Book a meeting room, Monday", subject="u1", entities={"date": "2026-12-07"}, **booking
    )
    tuesday = await client.write(
        tenant, "Book a meeting room, Tuesday", subject="u1", entities={"date": "2026-12-08"}, **booking
    )
    # u2: the older version goes when it expires; the newer one was told to last a year.
    wednesday = await client.write(
        tenant, "Book a meeting room, Wednesday", subject="u2", entities={"date": "2026-12-09"}, **booking
    )
    friday = await client.write(
        tenant, "Book a meeting room, Friday", subject="u2", entities={"date": "2026-12-11"},
        expires_at=clock() + timedelta(days=365), **booking,
    )  # fmt: skip
    assert tuesday.memory.supersedes == monday.memory.id
    assert friday.memory.supersedes == wednesday.memory.id
    await client.delete(tenant, tuesday.memory.id)

    clock.advance(timedelta(days=8))
    assert (await jobs.run("purge")).processed == 1
    older = await client.get(tenant, monday.memory.id)
    assert older.status == pb.STATUS_SUPERSEDED and older.superseded_by == ""
    assert [m.id for m in (await client.history(tenant, monday.memory.id)).versions] == [monday.memory.id]

    clock.advance(timedelta(days=30))  # the superseded versions expired 8 days ago
    assert (await jobs.run("purge")).processed == 2
    newest = await client.get(tenant, friday.memory.id)
    assert newest.status == pb.STATUS_ACTIVE and newest.supersedes == ""
    assert [m.id for m in (await client.history(tenant, friday.memory.id)).versions] == [friday.memory.id]
    reasons = {row["memory_id"]: row["reason"] for row in await audit_rows(pool, tenant)}
    assert reasons == {
        tuesday.memory.id: "deleted",
        monday.memory.id: "superseded version expired",
        wednesday.memory.id: "superseded version expired",
    }


def _lexical_scores(response: pb.RecallResponse) -> list[tuple[str, float]]:
    return [
        (hit.memory.content, round(channel.score, 9))
        for hit in response.hits
        for channel in hit.channels
        if channel.channel == pb.CHANNEL_LEXICAL
    ]


async def test_bm25_statistics_after_a_purge_are_as_if_the_purged_memories_never_existed(
    client: HindsightClient, jobs: JobRunner, pool: asyncpg.Pool, tenant: str, clock: MovableClock
) -> None:
    live = [
        "Quarterly report exported as CSV",
        "The CSV file of the quarterly budget",
        "Berlin office budget",
    ]
    gone = [
        "quarterly quarterly numbers for the board",
        "CSV export settings of the report",
        "budget 预算 notes",
    ]
    twin = f"{tenant}-twin"  # holds only the live memories, never the purged ones
    for text in live:
        await client.write(tenant, text, tier="semantic", kind="fact")
        await client.write(twin, text, tier="semantic", kind="fact")
    for text in gone:
        written = await client.write(tenant, text, tier="semantic", kind="fact")
        await client.delete(tenant, written.memory.id)
    query = "quarterly CSV budget"
    twin_scores = _lexical_scores(await client.recall(twin, query, min_score=0, top_k=10))
    assert _lexical_scores(await client.recall(tenant, query, min_score=0, top_k=10)) != twin_scores

    clock.advance(timedelta(days=8))
    assert (await jobs.run("purge")).processed == 3
    kept, recounted = await bm25_statistics(pool, tenant)
    assert kept == recounted
    assert kept == (await bm25_statistics(pool, twin))[0]
    assert kept[0][0] == 3  # documents
    assert all(df > 0 for df in kept[1].values())  # terms no memory holds any more are gone
    assert _lexical_scores(await client.recall(tenant, query, min_score=0, top_k=10)) == twin_scores
