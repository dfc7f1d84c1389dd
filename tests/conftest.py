"""Session-wide real parts: PostgreSQL + pgvector and an in-process gRPC memory server on a free port."""

from __future__ import annotations

import os

# Before grpc is imported (hindsight_server/__init__.py says why): the tests start PostgreSQL, Triton and
# servers as subprocesses of a process that uses gRPC. `make test` sets it too.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

import sys
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from hindsight.client import HindsightClient
from hindsight_server.config import Settings, load_settings
from hindsight_server.process.running import RunningServer
from hindsight_server.process.server import start_server

pytest_plugins = ["tests.fixtures.postgres", "tests.fixtures.triton"]

REPO_ROOT = Path(__file__).resolve().parent.parent


class MovableClock:
    """System time plus an offset a test can move forward; reset after each test."""

    def __init__(self) -> None:
        self.offset = timedelta()

    def __call__(self) -> datetime:
        return datetime.now(UTC) + self.offset

    def advance(self, delta: timedelta) -> None:
        self.offset += delta


@pytest.fixture(scope="session")
def make_settings(postgres_dsn: str, tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Settings]:
    data_dir = tmp_path_factory.mktemp("data")

    def make(**overrides: Any) -> Settings:
        values: dict[str, Any] = {
            "data_dir": data_dir,
            "server__port": 0,
            "database__dsn": postgres_dsn,
            # The suite's callers carry no API key; tests/rpc/test_security.py turns the requirement on.
            "security__require_api_keys": False,
        }
        # No scheduled lifecycle jobs: a moved clock would make them expire, demote and abstract other
        # tests' memories mid-test. Tests run jobs explicitly (tests/lifecycle).
        values["jobs__enabled"] = False
        # No webhook deliveries either: a server would deliver (or, under its address policy, refuse and
        # retire) the endpoints of every other test on the database. tests/rpc/test_webhooks.py turns
        # them on for its own servers.
        values["webhooks__enabled"] = False
        values.update(overrides)
        return load_settings(None, **values)

    return make


@pytest.fixture(scope="session")
def session_clock() -> MovableClock:
    return MovableClock()


@pytest.fixture
def clock(session_clock: MovableClock) -> Iterator[MovableClock]:
    yield session_clock
    session_clock.offset = timedelta()


@pytest.fixture(scope="session")
async def server(
    make_settings: Callable[..., Settings], session_clock: MovableClock
) -> AsyncIterator[RunningServer]:
    running = await start_server(make_settings(), clock=session_clock)
    yield running
    await running.stop()


@pytest.fixture(scope="session")
async def client(server: RunningServer) -> AsyncIterator[HindsightClient]:
    async with HindsightClient(f"127.0.0.1:{server.port}", timeout_s=10) as shared:
        yield shared


@pytest.fixture
def tenant() -> str:
    """Each test writes into its own tenant: isolation without truncating tables."""
    return f"t-{uuid.uuid4().hex[:12]}"


_exit_status: list[int] = []


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    _exit_status.append(int(exitstatus))


@pytest.hookimpl(tryfirst=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """Ends the process with the session's status once its report is out. A gRPC server that a failed
    teardown left running is otherwise collected at exit, and its poller thread's join never returns:
    one test's error became a CI run that hung until it was killed."""
    if _exit_status:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(_exit_status[0])
