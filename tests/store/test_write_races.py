"""No acknowledged write lost to a race: a merge or a supersede re-checks its target under the row lock
that Delete and the expire job take, so a target deleted or expired meanwhile leaves the new memory
stored as created, and a Delete is never overwritten by `superseded`."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import asyncpg

from hindsight.client import HindsightClient
from hindsight.v1 import memory_pb2 as pb
from hindsight_server.process.running import RunningServer
from tests.conftest import MovableClock
from tests.support.eventually import eventually
from tests.support.memory_fields import MemoryFields

FACT: MemoryFields = {"tier": "semantic", "kind": "fact", "subject": "u1"}
HOME: MemoryFields = {"tier": "semantic", "kind": "fact", "subject": "u1", "intent": "home_address"}


async def _status(pool: asyncpg.Pool, tenant: str, memory_id: str) -> str:
    return str(
        await pool.fetchval("SELECT status FROM memories WHERE tenant_id = $1 AND id = $2", tenant, memory_id)
    )


async def _while_deleting(server: RunningServer, tenant: str, memory_id: str, write: Any) -> pb.WriteResponse:
    """Runs `write` while a Delete of `memory_id` holds the row (updated, not committed); the Delete
    commits once the write waits for that row lock, so the write has read its peers before the Delete."""
    async with server.pool.acquire() as connection:
        transaction = connection.transaction()
        await transaction.start()
        await connection.execute(
            "UPDATE memories SET status = 'deleted', version = version + 1 WHERE tenant_id = $1 AND id = $2",
            tenant,
            memory_id,
        )
        pending = asyncio.create_task(write)

        async def write_waits_for_the_row() -> bool:
            waiting = await server.pool.fetchval(
                """SELECT count(*) FROM pg_stat_activity
                   WHERE datname = current_database() AND wait_event_type = 'Lock'"""
            )
            return bool(waiting)

        await eventually(write_waits_for_the_row, timeout_s=10)
        await transaction.commit()
    response: pb.WriteResponse = await pending
    return response


async def test_a_write_like_an_expired_but_unmarked_memory_is_created_and_found(
    client: HindsightClient, tenant: str, clock: MovableClock
) -> None:
    content = "Dinner with Ana at the harbour restaurant"
    first = await client.write(
        tenant,
        content,
        tier="episodic",
        kind="event",
        subject="u1",
        expires_at=clock() + timedelta(seconds=2),
    )
    clock.advance(timedelta(seconds=3))  # past its expiry; the expire job has not marked it
    again = await client.write(tenant, content, tier="episodic", kind="event", subject="u1")
    assert again.resolution == "created" and again.memory.id != first.memory.id
    found = await client.recall(tenant, "dinner harbour restaurant", now=clock(), min_score=0)
    assert [hit.memory.id for hit in found.hits] == [again.memory.id]


async def test_a_merge_into_a_memory_deleted_meanwhile_stores_the_new_memory(
    server: RunningServer, client: HindsightClient, tenant: str
) -> None:
    target = await client.write(tenant, "User drinks oat milk", **FACT)
    written = await _while_deleting(
        server, tenant, target.memory.id, client.write(tenant, "User drinks oat milk", **FACT)
    )
    assert written.resolution == "created" and written.memory.status == pb.STATUS_ACTIVE
    assert await _status(server.pool, tenant, target.memory.id) == "deleted"
    assert (await client.get(tenant, written.memory.id)).status == pb.STATUS_ACTIVE


async def test_a_supersede_racing_a_delete_leaves_the_delete_and_stores_the_new_memory(
    server: RunningServer, client: HindsightClient, tenant: str
) -> None:
    old = await client.write(
        tenant, "User lives at Hauptstrasse 1", entities={"street": "Hauptstrasse 1"}, **HOME
    )
    new = client.write(tenant, "User lives at Ringweg 9", entities={"street": "Ringweg 9"}, **HOME)
    written = await _while_deleting(server, tenant, old.memory.id, new)
    assert written.resolution == "created" and not written.memory.supersedes
    assert await _status(server.pool, tenant, old.memory.id) == "deleted"
    assert (await client.get(tenant, written.memory.id)).status == pb.STATUS_ACTIVE


async def test_a_retried_merged_write_is_replayed_not_merged_again(
    client: HindsightClient, tenant: str
) -> None:
    first = await client.write(tenant, "User prefers window seats", idempotency_key="k1", **FACT)
    merged = await client.write(tenant, "User prefers window seats", idempotency_key="k2", **FACT)
    retried = await client.write(tenant, "User prefers window seats", idempotency_key="k2", **FACT)
    assert (merged.resolution, retried.resolution) == ("merged", "replayed")
    assert retried.memory.id == first.memory.id
    assert (await client.get(tenant, first.memory.id)).seen_count == 2


async def test_deletes_racing_merges_and_supersedes_lose_no_acknowledged_write(
    server: RunningServer, client: HindsightClient, tenant: str
) -> None:
    rounds, outcomes = 30, {"merged": 0, "superseded": 0, "created": 0}
    for index in range(rounds):
        subject = f"u{index}"
        fact: MemoryFields = {**FACT, "subject": subject}
        home: MemoryFields = {**HOME, "subject": subject}
        target = await client.write(tenant, "User drinks oat milk", **fact)
        old = await client.write(
            tenant,
            "User lives at Hauptstrasse 1",
            entities={"street": "Hauptstrasse 1"},
            **home,
        )
        results = await asyncio.gather(
            client.delete(tenant, target.memory.id),
            client.write(tenant, "User drinks oat milk", **fact),
            client.delete(tenant, old.memory.id),
            client.write(
                tenant,
                "User lives at Ringweg 9",
                entities={"street": "Ringweg 9"},
                **home,
            ),
        )
        merge, supersede = results[1], results[3]
        for written in (merge, supersede):
            outcomes[written.resolution] += 1
            assert written.memory.status == pb.STATUS_ACTIVE  # never a deleted memory acknowledged
            if written.resolution == "created":  # a new memory: it must be there and live
                assert await _status(server.pool, tenant, written.memory.id) == "active"
        # Both Deletes were acknowledged: whatever the order, both targets end deleted, never superseded.
        assert await _status(server.pool, tenant, target.memory.id) == "deleted"
        assert await _status(server.pool, tenant, old.memory.id) == "deleted"
    assert sum(outcomes.values()) == 2 * rounds
