"""Jobs: one runner at a time however many servers, a schedule shared through job_runs, and a job
killed half-way that finishes on its next run as if it had never been interrupted."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from hindsight.client import HindsightClient
from hindsight.v1 import memory_pb2 as pb
from hindsight_server.domain.jobs import JobRun
from hindsight_server.domain.policy import Limits, TtlPolicy, WritePolicy
from hindsight_server.pipelines.item_isolation import ItemIsolation
from hindsight_server.pipelines.jobs import (
    RAN_RECENTLY,
    RUNNING_ELSEWHERE,
    JobRegistry,
    JobRunner,
    JobScheduler,
    due,
)
from hindsight_server.pipelines.lifecycle import LifecycleJobs, LifecycleSettings
from hindsight_server.pipelines.write import WritePipeline, WriteSettings
from hindsight_server.process.running import RunningServer
from hindsight_server.store.job_failures import JobItemFailures
from hindsight_server.store.jobs import JobStore
from hindsight_server.store.lifecycle import LifecycleStore
from hindsight_server.store.memories import MemoryStore
from hindsight_server.store.pool import create_pool
from tests.conftest import MovableClock
from tests.lifecycle.checks import audit_rows, bm25_statistics, statuses
from tests.lifecycle.conftest import StartServer
from tests.support.eventually import eventually


class Gate:
    """A job body that waits, mid-run, until the test lets it finish."""

    def __init__(self, processed: int) -> None:
        self.entered = asyncio.Event()
        self.release = asyncio.Event()
        self.processed = processed
        self.runs = 0

    async def __call__(self, now: datetime) -> int:
        self.runs += 1
        self.entered.set()
        await self.release.wait()
        return self.processed


async def test_two_servers_running_the_same_job_at_once_run_it_once(
    server: RunningServer, database_dsn: str, clock: MovableClock
) -> None:
    gate = Gate(processed=7)
    registry = JobRegistry()
    registry.add("gated", gate)
    # Two servers: each its own pool (its own database sessions), the same job.
    other_pool = await create_pool(
        database_dsn,
        min_size=1,
        max_size=2,
        statement_timeout_ms=5_000,
        max_statement_timeout_ms=60_000,
        connect_timeout_s=5,
    )
    try:
        first = JobRunner(registry, JobStore(server.pool), clock, "server-a")
        second = JobRunner(registry, JobStore(other_pool), clock, "server-b")
        running = asyncio.create_task(first.run("gated"))
        await asyncio.wait_for(gate.entered.wait(), 10)

        skipped = await second.run("gated")
        assert (skipped.skipped, skipped.reason, skipped.processed) == (True, RUNNING_ELSEWHERE, 0)
        gate.release.set()
        done = await asyncio.wait_for(running, 10)
        assert (done.skipped, done.processed) == (False, 7)
        assert gate.runs == 1
        last = (await second.last_runs())["gated"]
        assert (last.server, last.processed) == ("server-a", 7) and last.finished_at is not None

        again = await second.run("gated")  # the lock went with the first run
        assert (again.skipped, again.processed, gate.runs) == (False, 7, 2)
    finally:
        await other_pool.close()


@pytest.mark.parametrize("cancels", [1, 2], ids=["cancelled", "cancelled-during-unlock"])
async def test_a_cancelled_run_leaves_no_pooled_connection_holding_its_lock(
    server: RunningServer, database_dsn: str, clock: MovableClock, cancels: int
) -> None:
    # The pool keeps sessions as they are (no reset round trip): the job must free its
    # session-level lock itself, or end the session, however the run ends.
    gate = Gate(processed=1)
    registry = JobRegistry()
    registry.add("gated", gate)
    running = asyncio.create_task(JobRunner(registry, JobStore(server.pool), clock, "server-a").run("gated"))
    await asyncio.wait_for(gate.entered.wait(), 10)
    for _ in range(cancels):  # a second cancel lands while the unlock is in flight
        running.cancel()
        await asyncio.sleep(0)
    with pytest.raises(asyncio.CancelledError):
        await running

    async def no_lock_held() -> bool:
        held = await server.pool.fetchval("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'")
        return bool(held == 0)

    # An unlock cut short ends its session instead; the backend frees the lock as it exits, a moment
    # after the socket closes, so the lock is gone soon, not at once.
    await eventually(no_lock_held, timeout_s=5, message="a cancelled run's session still holds the lock")
    other_pool = await create_pool(  # a run takes two connections: its lock's and the bookkeeping's
        database_dsn,
        min_size=1,
        max_size=2,
        statement_timeout_ms=5_000,
        max_statement_timeout_ms=60_000,
        connect_timeout_s=5,
    )
    try:
        gate.release.set()
        again = await JobRunner(registry, JobStore(other_pool), clock, "server-b").run("gated")
        assert (again.skipped, again.processed, gate.runs) == (False, 1, 2)
    finally:
        await other_pool.close()


async def test_the_schedule_is_shared_each_job_runs_once_per_interval_across_servers(
    server: RunningServer, clock: MovableClock
) -> None:
    counted = {"runs": 0}

    async def count(now: datetime) -> int:
        counted["runs"] += 1
        return 0

    registry = JobRegistry({"counted": timedelta(minutes=10)})
    registry.add("counted", count)
    schedulers = [
        JobScheduler(JobRunner(registry, JobStore(server.pool), clock, name), clock, poll_s=1)
        for name in ("server-a", "server-b")
    ]
    assert [r.job for r in await schedulers[0].tick()] == ["counted"]
    assert await schedulers[1].tick() == []  # the other server sees the run in job_runs
    clock.advance(timedelta(minutes=9))
    assert await schedulers[0].tick() == [] and await schedulers[1].tick() == []
    clock.advance(timedelta(minutes=1))
    assert [r.job for r in await schedulers[1].tick()] == ["counted"]
    assert counted["runs"] == 2
    # Two servers that both found it due: the second re-checks under the lock and stands down.
    runner = JobRunner(registry, JobStore(server.pool), clock, "server-c")
    late = await runner.run("counted", unless_ran_within=timedelta(minutes=10))
    assert (late.skipped, late.reason, counted["runs"]) == (True, RAN_RECENTLY, 2)


def test_a_job_is_due_an_interval_after_its_last_start() -> None:
    now = datetime(2026, 3, 1, 12, tzinfo=UTC)
    hour = timedelta(hours=1)
    assert due(None, now, hour)
    assert not due(JobRun("j", now - timedelta(minutes=59), None, 0, "s"), now, hour)
    assert due(JobRun("j", now - hour, now - timedelta(minutes=50), 3, "s"), now, hour)


async def test_a_server_with_jobs_enabled_runs_them_on_schedule_by_its_clock(
    make_server: StartServer, pool: asyncpg.Pool, tenant: str, clock: MovableClock
) -> None:
    scheduled = await make_server(jobs__enabled=True, jobs__poll_s=0.05)
    async with HindsightClient(f"127.0.0.1:{scheduled.port}", timeout_s=10) as client:
        turn = await client.write(tenant, "I need a room for ten people", tier="working", kind="task")

        async def every_job_ran() -> bool:
            runs = await pool.fetch("SELECT job FROM job_runs WHERE finished_at IS NOT NULL")
            return {row["job"] for row in runs} >= {"expire", "purge", "demote", "evict", "patterns"}

        # A fresh database: every job is due at once.
        await eventually(every_job_ran, timeout_s=10, poll_s=0.02)
        assert (await client.get(tenant, turn.memory.id)).status == pb.STATUS_ACTIVE
        clock.advance(timedelta(hours=25))  # the working memory's 24 h are over, and so is expire's interval

        async def expired() -> bool:
            return bool((await client.get(tenant, turn.memory.id)).status == pb.STATUS_EXPIRED)

        await eventually(expired, timeout_s=10, poll_s=0.02)


class StopsAfterFirstBatch(LifecycleStore):
    """Purges one batch, then hangs until the run is killed."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        super().__init__(pool)
        self.first_batch_done = asyncio.Event()

    async def purge_batch(
        self, cutoff: datetime, superseded_before: datetime | None, now: datetime, limit: int
    ) -> int:
        purged = await super().purge_batch(cutoff, superseded_before, now, limit)
        self.first_batch_done.set()
        await asyncio.Event().wait()  # never set: the kill comes here
        return purged


async def test_a_purge_killed_half_way_finishes_on_the_next_run_as_if_never_interrupted(
    server: RunningServer, client: HindsightClient, jobs: JobRunner, tenant: str, clock: MovableClock
) -> None:
    pool = server.pool
    doomed = []
    for text in ("first note about Lisbon", "second note about Porto", "third note about Faro"):
        written = await client.write(tenant, text, tier="semantic", kind="fact")
        await client.delete(tenant, written.memory.id)
        doomed.append(written.memory.id)
    kept = await client.write(tenant, "a note about Lisbon to keep", tier="semantic", kind="fact")
    clock.advance(timedelta(days=8))

    hanging = StopsAfterFirstBatch(pool)
    writes = WritePipeline(MemoryStore(pool), WriteSettings(Limits(), TtlPolicy(), WritePolicy()), clock)
    isolation = ItemIsolation(JobItemFailures(pool), backoff_s=60, max_backoff_s=3600)
    bodies = LifecycleJobs(hanging, writes, LifecycleSettings(batch_size=1), TtlPolicy(), isolation).bodies()
    registry = JobRegistry()
    registry.add("purge", bodies["purge"])
    killed_run = asyncio.create_task(JobRunner(registry, JobStore(pool), clock, "doomed").run("purge"))
    await asyncio.wait_for(hanging.first_batch_done.wait(), 10)
    killed_run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await killed_run

    # Half-way: one whole batch done (the memory gone and its audit row written), nothing else.
    purged = {row["memory_id"] for row in await audit_rows(pool, tenant)}
    assert len(purged) == 1 and purged < set(doomed)
    assert set(await statuses(pool, tenant)) == {kept.memory.id, *(set(doomed) - purged)}
    kept_stats, recounted = await bm25_statistics(pool, tenant)
    assert kept_stats == recounted
    assert (await jobs.last_runs())["purge"].finished_at is None  # the killed run never finished

    again = await jobs.run("purge")  # the lock went with the killed run
    assert (again.skipped, again.processed) == (False, 2)
    assert await statuses(pool, tenant) == {kept.memory.id: "active"}
    audit = await audit_rows(pool, tenant)
    assert sorted(row["memory_id"] for row in audit) == sorted(doomed)  # each exactly once
    assert {row["reason"] for row in audit} == {"deleted"}
    kept_stats, recounted = await bm25_statistics(pool, tenant)
    assert kept_stats == recounted and kept_stats[0][0] == 1
    found = await client.recall(tenant, "Lisbon", min_score=0)
    assert [hit.memory.id for hit in found.hits] == [kept.memory.id]
