"""A server's stop is bounded: a background task that outlives a cancel, or a pool connection that is
never given back, costs the grace period and a second, not a stop that never ends (a deployment's
SIGTERM, a test session's teardown). The faults are made in-process: a lost cancel is a race of
Python 3.11's wait_for that no test can cause on demand."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

import asyncpg
import pytest

from hindsight_server.config import Settings
from hindsight_server.process.server import start_server

GRACE_S = 0.3
# The stop's own steps (health, the gRPC server, flushes) on a loaded CI machine, beyond the patience.
SLACK_S = 3.0


async def _deaf_to(cancels: int, ended: asyncio.Event, released: asyncio.Event) -> None:
    """Sleeps through its first `cancels` cancels; waits for `released` before it ends of itself."""
    ignored = 0
    try:
        while not released.is_set():
            try:
                await asyncio.sleep(0.05)
            except asyncio.CancelledError:
                ignored += 1
                if ignored > cancels:
                    raise
    finally:
        ended.set()


async def test_a_task_that_lost_its_first_cancel_is_cancelled_again(
    make_settings: Callable[..., Settings],
) -> None:
    running = await start_server(make_settings(server__grace_s=GRACE_S))
    ended, released = asyncio.Event(), asyncio.Event()
    running.spawn(_deaf_to(1, ended, released), "loses-a-cancel")
    await asyncio.sleep(0.1)  # running: a task cancelled before its first step never enters its body
    started = time.monotonic()
    await running.stop()
    assert ended.is_set()
    assert time.monotonic() - started < GRACE_S + 1.0 + SLACK_S


async def test_a_task_that_never_stops_is_named_and_left_behind(
    make_settings: Callable[..., Settings], caplog: pytest.LogCaptureFixture
) -> None:
    running = await start_server(make_settings(server__grace_s=GRACE_S))
    ended, released = asyncio.Event(), asyncio.Event()
    running.spawn(_deaf_to(10_000, ended, released), "deaf-to-cancels")
    await asyncio.sleep(0.1)
    started = time.monotonic()
    with caplog.at_level(logging.ERROR, logger="hindsight_server.process.running"):
        await running.stop()
    try:
        assert time.monotonic() - started < GRACE_S + 1.0 + SLACK_S
        assert not ended.is_set()
        (message,) = [r.getMessage() for r in caplog.records if "did not stop" in r.getMessage()]
        assert "deaf-to-cancels" in message and "test_shutdown.py" in message
    finally:
        released.set()
        await asyncio.wait_for(ended.wait(), 5)


async def test_a_connection_never_given_back_is_closed_by_force(
    make_settings: Callable[..., Settings], caplog: pytest.LogCaptureFixture
) -> None:
    running = await start_server(make_settings(server__grace_s=GRACE_S))
    held = await running.pool.acquire()
    started = time.monotonic()
    with caplog.at_level(logging.ERROR, logger="hindsight_server.store.pool"):
        await running.stop()
    assert time.monotonic() - started < GRACE_S + 1.0 + SLACK_S
    with pytest.raises(asyncpg.InterfaceError, match="released"):  # taken back from its holder
        await held.fetchval("SELECT 1")
    assert any("was not given back" in r.getMessage() for r in caplog.records)
