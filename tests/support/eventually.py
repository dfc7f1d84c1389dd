"""Waiting in a test for what another process (or a background task) brings about."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable


async def eventually(
    check: Callable[[], bool | Awaitable[bool]], timeout_s: float = 20.0, poll_s: float = 0.05
) -> None:
    """Returns once `check` (a function, or a coroutine function) holds; fails after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        outcome = check()
        if outcome if isinstance(outcome, bool) else await outcome:
            return
        assert time.monotonic() < deadline, "not within the time"
        await asyncio.sleep(poll_s)
