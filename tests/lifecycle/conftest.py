"""Each lifecycle test gets its own database and server: the jobs work across tenants, so exact
outcomes (how many purged, which audit rows) need a database no other test writes into, and moving
the clock there cannot touch other tests' memories."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import asyncpg
import pytest

from hindsight.client import HindsightClient
from hindsight_server.config import Settings
from hindsight_server.pipelines.jobs import JobRunner
from hindsight_server.process.running import RunningServer
from hindsight_server.process.server import start_server
from tests.conftest import MovableClock

StartServer = Callable[..., Awaitable[RunningServer]]


@pytest.fixture
async def database_dsn(fresh_database: Callable[[], Awaitable[str]]) -> str:
    return await fresh_database()


@pytest.fixture
async def make_server(
    make_settings: Callable[..., Settings], database_dsn: str, session_clock: MovableClock
) -> AsyncIterator[StartServer]:
    """Starts servers on the test's database (settings overrides as keywords); stopped afterwards."""
    started: list[RunningServer] = []

    async def make(**overrides: Any) -> RunningServer:
        running = await start_server(
            make_settings(database__dsn=database_dsn, **overrides), clock=session_clock
        )
        started.append(running)
        return running

    yield make
    for running in started:
        await running.stop()


@pytest.fixture
async def server(make_server: StartServer) -> RunningServer:
    return await make_server()


@pytest.fixture
async def client(server: RunningServer) -> AsyncIterator[HindsightClient]:
    async with HindsightClient(f"127.0.0.1:{server.port}", timeout_s=10) as connected:
        yield connected


@pytest.fixture
def jobs(server: RunningServer) -> JobRunner:
    assert server.jobs is not None
    return server.jobs


@pytest.fixture
def pool(server: RunningServer) -> asyncpg.Pool:
    """For reading what the jobs left (status, audit rows, BM25 statistics); never for writing."""
    return server.pool
