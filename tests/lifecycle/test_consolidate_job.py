"""The consolidate job: a session idle for 120 s with turns not in an episode becomes one episodic record,
once however often the job runs."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import asyncpg

from hindsight.client import HindsightClient
from hindsight_server.pipelines.jobs import JobRunner
from tests.conftest import MovableClock
from tests.support.structs import list_of


async def test_an_idle_session_is_consolidated_once(
    client: HindsightClient, jobs: JobRunner, clock: MovableClock
) -> None:
    for text in ("I need a meeting room tomorrow afternoon", "for 6 people in building B"):
        await client.append_turn("acme", "idle-session", text, subject="u1")
    assert (await jobs.run("consolidate")).processed == 0  # not idle yet

    clock.advance(timedelta(seconds=121))
    assert (await jobs.run("consolidate")).processed == 1
    episodes = await client.list("acme", session_id="idle-session", tiers=["episodic"])
    (episode,) = episodes.memories
    assert episode.entities["building"] == "B"
    assert episode.provenance["trigger"] == "idle"
    assert list_of(episode.provenance["turns"]) == [1, 2]

    clock.advance(timedelta(seconds=121))
    assert (await jobs.run("consolidate")).processed == 0
    assert not (await client.end_session("acme", "idle-session")).HasField("episode")
    assert len((await client.list("acme", tiers=["episodic"])).memories) == 1
    assert (await client.summarize("acme", "idle-session")).turn_count == 2


async def test_the_audit_poison_turn_neither_breaks_its_session_nor_the_job(
    client: HindsightClient, jobs: JobRunner, clock: MovableClock
) -> None:
    """A run of 4,400 digits before 人, dated in the year 1000 (the oldest idle session, so the first
    the job takes): it was INTERNAL, broke its session and stopped every tenant's consolidation."""
    poison = "9" * 4400 + "人"
    appended = await client.append_turn(
        "mallory", "poisoned", poison, occurred_at=datetime(1000, 1, 2, tzinfo=UTC)
    )
    assert appended.turn.index == 1
    assert (await client.append_turn("mallory", "poisoned", "hello again")).turn.index == 2
    for text in ("I need a meeting room tomorrow afternoon", "for 6 people in building B"):
        await client.append_turn("acme", "quiet", text, subject="u1")
    clock.advance(timedelta(seconds=121))
    assert (await jobs.run("consolidate")).processed == 2
    (episode,) = (await client.list("acme", session_id="quiet", tiers=["episodic"])).memories
    assert episode.entities["building"] == "B"
    assert not (await client.end_session("mallory", "poisoned")).HasField("episode")  # already in one


async def failures(pool: asyncpg.Pool) -> list[asyncpg.Record]:
    rows: list[asyncpg.Record] = await pool.fetch(
        "SELECT tenant_id, item, failures, error, retry_at FROM job_item_failures WHERE job = 'consolidate'"
    )
    return rows


async def test_a_session_that_fails_is_set_aside_and_every_other_tenant_is_still_consolidated(
    client: HindsightClient, jobs: JobRunner, clock: MovableClock, pool: asyncpg.Pool
) -> None:
    # A stored summary this version cannot read (a real row, as a bad migration or disk could leave it):
    # consolidating that session raises, however often it is tried.
    await client.append_turn("mallory", "broken", "I want a room for 4 people", subject="m")
    unreadable = json.dumps({"turn_count": {"not": "a number"}})
    await pool.execute("UPDATE sessions SET summary = $1::jsonb WHERE session_id = 'broken'", unreadable)
    for tenant in ("acme", "globex"):
        await client.append_turn(tenant, "quiet", "I need a meeting room in building B", subject="u1")
    clock.advance(timedelta(seconds=121))

    run = await jobs.run("consolidate")
    assert (run.skipped, run.processed) == (False, 2)
    for tenant in ("acme", "globex"):
        assert len((await client.list(tenant, session_id="quiet", tiers=["episodic"])).memories) == 1
    ((tenant, item, count, error, retry_at),) = await failures(pool)
    assert (tenant, item, count) == ("mallory", "broken", 1)
    assert error and "room" not in error  # the exception's class, never content
    assert retry_at > clock() + timedelta(seconds=50)

    # Backing off: a run within the wait leaves it alone; past it, it is tried again (and fails again),
    # and the next wait is twice as long.
    clock.advance(timedelta(seconds=30))
    assert (await jobs.run("consolidate")).processed == 0
    assert [row["failures"] for row in await failures(pool)] == [1]
    clock.advance(timedelta(seconds=31))
    assert (await jobs.run("consolidate")).processed == 0
    assert [row["failures"] for row in await failures(pool)] == [2]
    clock.advance(timedelta(seconds=60))
    await pool.execute("UPDATE sessions SET summary = NULL WHERE session_id = 'broken'")
    assert (await jobs.run("consolidate")).processed == 0  # repaired, but still waiting
    assert [row["failures"] for row in await failures(pool)] == [2]

    # Repaired, and past its (doubled) wait: consolidated, and its failures forgotten.
    clock.advance(timedelta(seconds=61))
    assert (await jobs.run("consolidate")).processed == 1
    assert await failures(pool) == []
    assert len((await client.list("mallory", session_id="broken", tiers=["episodic"])).memories) == 1
