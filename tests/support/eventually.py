"""Waiting in a test for what another process (or a background task) brings about: the one poll of the
suite. `eventually` in a coroutine, `eventually_blocking` in a plain (synchronous) test."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

TIMEOUT_S = 20.0
POLL_S = 0.05
NOT_WITHIN = "not within the time"


async def eventually(
    check: Callable[[], bool | Awaitable[bool]],
    timeout_s: float = TIMEOUT_S,
    poll_s: float = POLL_S,
    *,
    message: str | Callable[[], str] = NOT_WITHIN,
    ignoring: tuple[type[Exception], ...] = (),
) -> float:
    """Returns the seconds it took `check` (a function, or a coroutine function) to hold; fails after
    `timeout_s` with `message` (or what the function `message` says then). `ignoring`: errors `check`
    may raise while the condition does not hold yet (a service still down); any other error fails."""
    started = time.monotonic()
    while True:
        try:
            outcome = check()
            if outcome if isinstance(outcome, bool) else await outcome:
                return time.monotonic() - started
        except ignoring:
            pass
        assert time.monotonic() - started < timeout_s, message() if callable(message) else message
        await asyncio.sleep(poll_s)


def eventually_blocking(
    check: Callable[[], bool],
    timeout_s: float = TIMEOUT_S,
    poll_s: float = POLL_S,
    *,
    message: str | Callable[[], str] = NOT_WITHIN,
    ignoring: tuple[type[Exception], ...] = (),
) -> float:
    """`eventually` for a synchronous test: the same, sleeping the thread between checks."""
    started = time.monotonic()
    while True:
        try:
            if check():
                return time.monotonic() - started
        except ignoring:
            pass
        assert time.monotonic() - started < timeout_s, message() if callable(message) else message
        time.sleep(poll_s)
