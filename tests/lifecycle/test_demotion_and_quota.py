"""Active forgetting: semantic memories nobody uses are demoted to episodic, and a tenant over its quota
loses its lowest-retention memories first."""

from __future__ import annotations

from datetime import timedelta

import asyncpg

from hindsight.client import HindsightClient
from hindsight.v1 import memory_pb2 as pb
from hindsight_server.pipelines.jobs import JobRunner
from hindsight_server.process.running import RunningServer
from tests.conftest import MovableClock
from tests.lifecycle.checks import audit_rows, statuses
from tests.lifecycle.conftest import StartServer


async def test_semantic_memory_unused_for_90_days_is_demoted_unless_recalled_recently(
    server: RunningServer, client: HindsightClient, jobs: JobRunner, tenant: str, clock: MovableClock
) -> None:
    unused = await client.write(tenant, "The user's dentist is in Hamburg", tier="semantic", kind="fact")
    recalled = await client.write(tenant, "The user's manager is Alice Zhang", tier="semantic", kind="fact")
    clock.advance(timedelta(days=80))
    found = await client.recall(tenant, "Alice Zhang manager", min_score=0, top_k=1)
    assert [hit.memory.id for hit in found.hits] == [recalled.memory.id]
    assert server.access is not None
    await server.access.flush()  # the access counters the recall recorded

    clock.advance(timedelta(days=9))  # 89 days unused
    assert (await jobs.run("demote")).processed == 0
    clock.advance(timedelta(days=2))
    now = clock()
    assert (await jobs.run("demote", now)).processed == 1

    demoted = await client.get(tenant, unused.memory.id)
    assert demoted.tier == pb.TIER_EPISODIC and demoted.status == pb.STATUS_ACTIVE
    # From now on it fades like an episode: the episodic TTL (30 days) from the demotion.
    assert demoted.expires_at.ToDatetime(tzinfo=now.tzinfo) == now + timedelta(days=30)
    assert demoted.provenance["demoted_from"] == "semantic"
    assert (await client.get(tenant, recalled.memory.id)).tier == pb.TIER_SEMANTIC
    assert (await jobs.run("demote", now)).processed == 0


async def test_a_tenant_over_its_quota_loses_its_lowest_retention_memories_first(
    make_server: StartServer, pool: asyncpg.Pool, tenant: str, clock: MovableClock
) -> None:
    limited = await make_server(jobs__quota=3)
    assert limited.jobs is not None
    other = f"{tenant}-small"
    async with HindsightClient(f"127.0.0.1:{limited.port}", timeout_s=10) as client:
        rule = await client.write(
            tenant, "Always answer in German", tier="semantic", kind="instruction", confidence=0.7
        )
        old_doubtful = await client.write(
            tenant, "The user might like jazz", tier="semantic", kind="fact", confidence=0.75
        )
        old_used = await client.write(
            tenant, "The user's manager is Alice Zhang", tier="semantic", kind="fact", confidence=0.75
        )
        pending = await client.write(
            tenant, "The user may own a bike", tier="semantic", kind="fact", confidence=0.5
        )
        assert pending.memory.status == pb.STATUS_PENDING
        for text in ("one", "two", "three"):  # another tenant, at its quota: untouched
            await client.write(other, f"Memory number {text}", tier="semantic", kind="fact")
        clock.advance(timedelta(days=20))
        recent = await client.write(tenant, "The user lives in Berlin", tier="semantic", kind="fact")
        for _ in range(5):
            found = await client.recall(tenant, "Alice Zhang manager", min_score=0, top_k=1)
            assert [hit.memory.id for hit in found.hits] == [old_used.memory.id]
        assert limited.access is not None
        await limited.access.flush()

        # 5 live memories, quota 3: the pending one goes first, then the active one worth least
        # (old, doubtful, never used); the rule the user set goes last of all.
        assert (await limited.jobs.run("evict")).processed == 2
        assert await statuses(pool, tenant) == {
            rule.memory.id: "active",
            old_doubtful.memory.id: "deleted",
            old_used.memory.id: "active",
            pending.memory.id: "deleted",
            recent.memory.id: "active",
        }
        assert set((await statuses(pool, other)).values()) == {"active"}
        assert (await limited.jobs.run("evict")).processed == 0

        clock.advance(timedelta(days=8))
        assert (await limited.jobs.run("purge")).processed == 2
        reasons = {row["memory_id"]: row["reason"] for row in await audit_rows(pool, tenant)}
        assert reasons == {
            old_doubtful.memory.id: "evicted over quota",
            pending.memory.id: "evicted over quota",
        }


async def test_no_quota_evicts_nothing(client: HindsightClient, jobs: JobRunner, tenant: str) -> None:
    for text in ("one", "two", "three", "four"):
        await client.write(tenant, f"Memory number {text}", tier="semantic", kind="fact")
    assert (await jobs.run("evict")).processed == 0
