"""CPU-heavy pure work off the event loop. A server is one asyncio loop: a call that analyses 8 MiB of
text on it (a WriteBatch's lexical analysis: seconds) makes every other call on the server wait. Such
work runs on a small pool of threads instead; the interpreter hands the loop the GIL back every few
milliseconds (sys.getswitchinterval), so other calls go on between slices of it. Small inputs run in
place: handing them to a thread costs more than it saves."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

__all__ = ["OFF_LOOP_FROM_CHARS", "run_pure"]

P = ParamSpec("P")
R = TypeVar("R")

# About 1 ms of analysis on these cores: below it, the hand-off to a thread is the larger cost.
OFF_LOOP_FROM_CHARS = 2_048
# Threads for it per server: each holds the GIL in turn with the loop, so more only queue.
_THREADS = 2


@functools.cache
def _executor() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=_THREADS, thread_name_prefix="hindsight-cpu")


async def run_pure(chars: int, function: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
    """`function(*args, **kwargs)`, on a worker thread when its input holds `chars` characters or more.
    `function` must not touch the loop, contextvars or shared mutable state."""
    if chars < OFF_LOOP_FROM_CHARS:
        return function(*args, **kwargs)
    call = functools.partial(function, *args, **kwargs)
    return await asyncio.get_running_loop().run_in_executor(_executor(), call)
