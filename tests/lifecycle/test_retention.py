"""Retention as documented: session turns leave with the working-memory TTL (plus the purge grace),
superseded versions age out after ttl.superseded, and stored replies are cleaned up in bulk."""

from __future__ import annotations

import time
from datetime import timedelta

import asyncpg
import grpc
import pytest

from hindsight.client import HindsightClient
from hindsight_server.pipelines.jobs import JobRunner
from tests.conftest import MovableClock
from tests.lifecycle.checks import audit_rows, statuses
from tests.lifecycle.conftest import StartServer
from tests.support.figures import report
from tests.support.memory_fields import MemoryFields

# The working TTL (24 h) plus the purge grace (7 days): what a turn lives, from when it was stored.
TURN_LIFETIME = timedelta(hours=24) + timedelta(days=7)


async def _turn_counts(pool: asyncpg.Pool, tenant: str) -> dict[str, int]:
    rows = await pool.fetch(
        """SELECT s.session_id, count(t.turn_index) AS turns FROM sessions s
           LEFT JOIN session_turns t USING (tenant_id, session_id)
           WHERE s.tenant_id = $1 GROUP BY s.session_id""",
        tenant,
    )
    return {row["session_id"]: row["turns"] for row in rows}


async def test_turns_and_emptied_sessions_are_purged_with_the_working_ttl_and_its_grace(
    client: HindsightClient, jobs: JobRunner, pool: asyncpg.Pool, tenant: str, clock: MovableClock
) -> None:
    for text in ("I need a room for ten people", "building A, on Wednesday"):
        await client.append_turn(tenant, "ended", text, subject="u1")
    await client.end_session(tenant, "ended")  # consolidated into an episode
    await client.append_turn(tenant, "open", "my door code is 4711", subject="u1")  # never consolidated
    episode_ids = {m for m, status in (await statuses(pool, tenant)).items() if status == "active"}

    clock.advance(TURN_LIFETIME - timedelta(minutes=1))
    await jobs.run("expire")
    await jobs.run("purge")
    assert await _turn_counts(pool, tenant) == {"ended": 2, "open": 1}  # inside the grace: kept
    assert [t.text for t in (await client.summarize(tenant, "open")).recent_turns] == ["my door code is 4711"]

    await client.append_turn(tenant, "ended", "and a projector, please", subject="u1")  # a newer turn
    clock.advance(timedelta(minutes=2))
    result = await jobs.run("purge")
    assert result.processed >= 3  # the three old turns (and the memories made of them)
    assert await _turn_counts(pool, tenant) == {"ended": 1}  # "open" had no turn left: gone
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await client.summarize(tenant, "open")
    assert error.value.code() == grpc.StatusCode.NOT_FOUND
    kept = await client.summarize(tenant, "ended")
    assert [t.text for t in kept.recent_turns] == ["and a projector, please"]
    consolidated = await pool.fetchval(
        "SELECT consolidated_turn FROM sessions WHERE tenant_id = $1 AND session_id = 'ended'", tenant
    )
    assert consolidated == 2  # the purged turns count as consolidated; turn 3 still waits for it
    assert {m for m in episode_ids if m in await statuses(pool, tenant)}  # the episode outlives its turns
    assert (await jobs.run("purge")).processed == 0  # nothing left to do: a rerun changes nothing


async def test_turns_purge_in_bounded_batches(
    make_server: StartServer, tenant: str, clock: MovableClock
) -> None:
    server = await make_server(jobs__batch_size=2)
    assert server.jobs is not None
    async with HindsightClient(f"127.0.0.1:{server.port}", timeout_s=10) as client:
        for session in ("s1", "s2", "s3"):
            for text in ("first turn", "second turn"):
                await client.append_turn(tenant, session, text, subject="u1")
    clock.advance(TURN_LIFETIME + timedelta(minutes=1))
    await server.jobs.run("expire")
    await server.jobs.run("purge")
    assert await _turn_counts(server.pool, tenant) == {}


async def test_a_superseded_version_ages_out_after_ttl_superseded_and_history_shows_what_is_left(
    client: HindsightClient, jobs: JobRunner, pool: asyncpg.Pool, tenant: str, clock: MovableClock
) -> None:
    home: MemoryFields = {"tier": "semantic", "kind": "fact", "subject": "u1", "intent": "home_address"}
    old = await client.write(
        tenant, "User lives at Hauptstrasse 1", entities={"street": "Hauptstrasse 1"}, **home
    )
    clock.advance(timedelta(days=1))
    new = await client.write(tenant, "User lives at Ringweg 9", entities={"street": "Ringweg 9"}, **home)
    assert new.resolution == "superseded"

    clock.advance(timedelta(days=89))
    assert (await jobs.run("purge")).processed == 0  # superseded 89 days ago: still in History
    assert [m.id for m in (await client.history(tenant, new.memory.id)).versions] == [
        old.memory.id,
        new.memory.id,
    ]
    clock.advance(timedelta(days=1, minutes=1))
    assert (await jobs.run("purge")).processed == 1
    assert await statuses(pool, tenant) == {new.memory.id: "active"}
    assert [(row["memory_id"], row["reason"]) for row in await audit_rows(pool, tenant)] == [
        (old.memory.id, "superseded version expired")
    ]
    assert [m.id for m in (await client.history(tenant, new.memory.id)).versions] == [new.memory.id]


async def test_superseded_versions_are_kept_for_good_when_ttl_superseded_is_zero(
    make_server: StartServer, tenant: str, clock: MovableClock
) -> None:
    server = await make_server(ttl__superseded="PT0S")
    assert server.jobs is not None
    home: MemoryFields = {"tier": "semantic", "kind": "fact", "subject": "u1", "intent": "home_address"}
    async with HindsightClient(f"127.0.0.1:{server.port}", timeout_s=10) as client:
        old = await client.write(
            tenant, "User lives at Hauptstrasse 1", entities={"street": "Hauptstrasse 1"}, **home
        )
        new = await client.write(tenant, "User lives at Ringweg 9", entities={"street": "Ringweg 9"}, **home)
        clock.advance(timedelta(days=3650))
        await server.jobs.run("purge")
        chain = await client.history(tenant, new.memory.id)
    assert [m.id for m in chain.versions] == [old.memory.id, new.memory.id]


async def test_one_replies_run_removes_every_expired_answer_and_keeps_the_fresh_ones(
    jobs: JobRunner, pool: asyncpg.Pool, tenant: str, clock: MovableClock
) -> None:
    expired, fresh = 40_000, 10  # eight cleanup batches: more than the old one-batch-an-hour ever could
    await pool.execute(
        """INSERT INTO request_replies (tenant_id, method, key, fingerprint, response, created_at)
           SELECT $1, 'Update', 'k' || n, '\\x00', repeat('x', 200)::bytea,
                  now() - interval '25 hours' - n * interval '1 second'
           FROM generate_series(1, $2) AS n""",
        tenant,
        expired,
    )
    await pool.execute(
        """INSERT INTO request_replies (tenant_id, method, key, fingerprint, response, created_at)
           SELECT $1, 'Delete', 'fresh' || n, '\\x00', '\\x01', now() FROM generate_series(1, $2) AS n""",
        tenant,
        fresh,
    )
    started = time.perf_counter()
    result = await jobs.run("replies", clock())
    elapsed = time.perf_counter() - started
    assert result.processed == expired
    left = await pool.fetchval("SELECT count(*) FROM request_replies WHERE tenant_id = $1", tenant)
    assert left == fresh
    report(
        "Retention",
        f"replies cleanup: {expired} expired answers in {elapsed:.2f} s ({expired / elapsed:,.0f}/s)",
    )
