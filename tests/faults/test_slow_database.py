"""A slow database: another session holds a lock (a row `FOR UPDATE`, then the whole table `ACCESS
EXCLUSIVE`) in an open transaction. Calls waiting on it end at their deadline (DEADLINE_EXCEEDED, in
bounded time: the caller's deadline, or the server's statement timeout when that is shorter); calls the
lock does not concern keep answering; and the waiting statements are cancelled, not left holding the
pool's connections."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
import grpc
import pytest

from hindsight.client import HindsightClient
from hindsight_server.config import Settings
from hindsight_server.process.running import RunningServer
from hindsight_server.process.server import start_server
from tests.faults.conftest import SECTION
from tests.support.figures import by_code, report

DEADLINE_S = 1.0
SLACK_S = 1.0  # what a loaded CI machine may add to a deadline before the answer arrives
POOL = 6


async def _timed(call: Awaitable[Any]) -> tuple[str, float]:
    started = time.monotonic()
    try:
        await call
        code = "OK"
    except grpc.aio.AioRpcError as error:
        code = error.code().name
    return code, time.monotonic() - started


@asynccontextmanager
async def _held(dsn: str, statement: str, *args: Any) -> AsyncIterator[None]:
    """`statement` run in a transaction of another session, open until the block ends."""
    connection = await asyncpg.connect(dsn)
    try:
        async with connection.transaction():
            await connection.execute(statement, *args)
            yield
    finally:
        await connection.close()


@pytest.fixture
async def database(fresh_database: Callable[[], Awaitable[str]]) -> str:
    return await fresh_database()


@asynccontextmanager
async def _server(settings: Settings) -> AsyncIterator[tuple[RunningServer, HindsightClient]]:
    running = await start_server(settings)
    try:
        async with HindsightClient(f"127.0.0.1:{running.port}", timeout_s=5) as client:
            yield running, client
    finally:
        await running.stop()


async def test_a_locked_row_costs_its_callers_their_deadline_and_nobody_else_anything(
    database: str, make_settings: Callable[..., Settings], tenant: str
) -> None:
    settings = make_settings(database__dsn=database, database__pool_max=POOL, server__grace_s=1.0)
    async with _server(settings) as (_, client):
        locked = (await client.write(tenant, "the locked memory", tier="semantic", kind="fact")).memory.id
        free = (await client.write(tenant, "a free memory", tier="semantic", kind="fact")).memory.id
        async with _held(database, "SELECT 1 FROM memories WHERE id = $1::uuid FOR UPDATE", locked):
            # Half the pool waits on the lock; meanwhile the calls it does not concern answer.
            waiting = [
                asyncio.create_task(
                    _timed(client.update(tenant, locked, content=f"v{n}", timeout_s=DEADLINE_S))
                )
                for n in range(POOL // 2)
            ]
            await asyncio.sleep(0.2)  # let them reach the lock: a deadline is what is measured here
            meanwhile = {
                "health": await _timed(client.health(timeout_s=DEADLINE_S)),
                "get": await _timed(client.get(tenant, free, timeout_s=DEADLINE_S)),
                "write": await _timed(
                    client.write(tenant, "new", tier="semantic", kind="fact", timeout_s=DEADLINE_S)
                ),
                "recall": await _timed(client.recall(tenant, "free memory", timeout_s=DEADLINE_S)),
                "list": await _timed(client.list(tenant, timeout_s=DEADLINE_S)),
            }
            blocked = await asyncio.gather(*waiting)
            # Twice the pool waits on the lock: their statements must be cancelled at the deadline, or
            # the pool stays empty and the next call waits for the lock too.
            flood = await asyncio.gather(
                *(
                    _timed(client.update(tenant, locked, content=f"w{n}", timeout_s=DEADLINE_S))
                    for n in range(POOL * 2)
                )
            )
            after = await _timed(client.get(tenant, free, timeout_s=DEADLINE_S))
        released = await _timed(client.update(tenant, locked, content="after the lock", timeout_s=5))

    codes = Counter(code for code, _ in blocked + flood)
    slowest = max(elapsed for _, elapsed in blocked + flood)
    report(
        SECTION,
        f"row lock held: {len(blocked) + len(flood)} updates of the locked row with a {DEADLINE_S:.0f}s "
        f"deadline -> {by_code(codes)}, slowest answer {slowest:.2f}s; meanwhile "
        + ", ".join(f"{name} {code} {elapsed * 1000:.0f}ms" for name, (code, elapsed) in meanwhile.items())
        + f"; after {len(flood)} cancelled: get {after[0]} {after[1] * 1000:.0f}ms",
    )
    # The first ones wait out their deadline; of the flood, what finds the server or its pool full is
    # shed at once (admission control, a bounded wait for a connection) instead of queueing.
    assert {code for code, _ in blocked} == {"DEADLINE_EXCEEDED"}
    assert set(codes) <= {"DEADLINE_EXCEEDED", "RESOURCE_EXHAUSTED"}
    assert slowest < DEADLINE_S + SLACK_S
    for name, (code, elapsed) in meanwhile.items():
        assert code == "OK" and elapsed < DEADLINE_S, (name, code, elapsed)
    assert after[0] == "OK" and after[1] < DEADLINE_S
    assert released[0] == "OK"


async def test_a_locked_table_answers_at_the_deadline_or_the_statement_timeout(
    database: str, make_settings: Callable[..., Settings], tenant: str
) -> None:
    timeout_ms = 300
    settings = make_settings(database__dsn=database, server__grace_s=1.0)
    short = make_settings(
        database__dsn=database,
        server__grace_s=1.0,
        database__statement_timeout_ms=timeout_ms,
        database__max_statement_timeout_ms=timeout_ms,
    )
    async with _server(settings) as (_, client), _server(short) as (_, impatient):
        await client.write(tenant, "before the lock", tier="semantic", kind="fact")
        async with _held(database, "LOCK TABLE memories IN ACCESS EXCLUSIVE MODE"):
            by_deadline = await _timed(
                client.write(tenant, "waits", tier="semantic", kind="fact", timeout_s=DEADLINE_S)
            )
            health = await _timed(client.health(timeout_s=DEADLINE_S))
            # The server's own bound: its longest statement answers before a caller's long deadline.
            by_timeout = await _timed(
                impatient.write(tenant, "waits", tier="semantic", kind="fact", timeout_s=30)
            )
            read_timeout = await _timed(impatient.recall(tenant, "before", timeout_s=30))
        after = await _timed(
            client.write(tenant, "after the lock", tier="semantic", kind="fact", timeout_s=5)
        )

    report(
        SECTION,
        f"table lock held: write with a {DEADLINE_S:.0f}s deadline -> {by_deadline[0]} in "
        f"{by_deadline[1]:.2f}s; health {health[0]} in {health[1] * 1000:.0f}ms; "
        f"with a {timeout_ms}ms statement timeout and a 30s "
        f"deadline: write -> {by_timeout[0]} in {by_timeout[1]:.2f}s, recall -> {read_timeout[0]} in "
        f"{read_timeout[1]:.2f}s; after the lock: write {after[0]}",
    )
    assert by_deadline[0] == "DEADLINE_EXCEEDED" and by_deadline[1] < DEADLINE_S + SLACK_S
    assert health[0] == "OK" and health[1] < DEADLINE_S  # SERVING: _timed calls any answer OK
    assert by_timeout[0] == "DEADLINE_EXCEEDED" and by_timeout[1] < timeout_ms / 1000 + SLACK_S
    assert read_timeout[0] in ("DEADLINE_EXCEEDED", "OK") and read_timeout[1] < timeout_ms / 1000 + SLACK_S
    assert after[0] == "OK"


async def test_a_statement_gets_the_time_its_caller_allows_not_a_fixed_timeout(
    database: str, make_settings: Callable[..., Settings], tenant: str
) -> None:
    """The statement timeout follows the call's deadline: a write that waits 1.5 s on a lock succeeds
    for a caller that allows 10 s, on a server whose default (for work outside a call) is 300 ms; a
    caller that allows 400 ms gets DEADLINE_EXCEEDED from the server at its deadline."""
    settings = make_settings(database__dsn=database, server__grace_s=1.0, database__statement_timeout_ms=300)
    async with _server(settings) as (_, client):
        await client.write(tenant, "before the lock", tier="semantic", kind="fact")
        async with _held(database, "LOCK TABLE memories IN ACCESS EXCLUSIVE MODE"):
            patient = asyncio.ensure_future(
                _timed(client.write(tenant, "waits", tier="semantic", kind="fact", timeout_s=10))
            )
            hurried = await _timed(
                client.write(tenant, "hurries", tier="semantic", kind="fact", timeout_s=0.4)
            )
            await asyncio.sleep(1.5)
        waited = await patient
    assert hurried[0] == "DEADLINE_EXCEEDED" and hurried[1] < 0.4 + SLACK_S
    assert waited[0] == "OK" and waited[1] >= 1.0  # past the 300 ms default: the caller's 10 s applied
