"""CPU-heavy pure work off the event loop. A server is one asyncio loop: a call that analyses 8 MiB of
text on it (a WriteBatch's lexical analysis: seconds) makes every other call on the server wait. Such
work runs on a small pool of threads instead; the interpreter hands the loop the GIL back every few
milliseconds (sys.getswitchinterval), so other calls go on between slices of it. Small inputs run in
place: handing them to a thread costs more than it saves.

Bulk inputs (a large WriteBatch's analysis: tenths of a second and more) go further, to a worker
process at a lower CPU priority: they then hold neither the server's GIL, which every other call's
loop work waits for, nor a core that the loop, the database or the inference tier wants (BENCHMARKS.md,
"One tenant cannot slow another"). Their functions and arguments must pickle; a worker that dies is
replaced, and the call it held runs on a thread instead."""

from __future__ import annotations

import asyncio
import ctypes
import functools
import logging
import multiprocessing
import os
import signal
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import ParamSpec, TypeVar

__all__ = ["OFF_LOOP_FROM_CHARS", "OFF_PROCESS_FROM_CHARS", "run_pure", "start_workers"]

log = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")

# About 1 ms of analysis on these cores: below it, the hand-off to a thread is the larger cost.
OFF_LOOP_FROM_CHARS = 2_048
# Threads for it per server: each holds the GIL in turn with the loop, so more only queue.
_THREADS = 2
# About 0.1 s of analysis: past it the hand-off to a process (pickling both ways, ~1 ms a 100 KB) is
# small beside the GIL and the core it frees.
OFF_PROCESS_FROM_CHARS = 256 * 1024
_PROCESSES = 1  # bulk work is the background's: one core's worth at most, at a lower priority
_WORKER_NICE = 10
_PR_SET_PDEATHSIG = 1  # linux/prctl.h


@functools.cache
def _executor() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=_THREADS, thread_name_prefix="hindsight-cpu")


def _start_worker(parent: int) -> None:
    """In the worker: a lower CPU priority, and death with its server. A killed server would otherwise
    leave it behind (it holds its own queue's write end, so it never sees end of file), holding the
    server's stdout and stderr open for whoever waits on them."""
    os.nice(_WORKER_NICE)
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the server died before the line above
        os._exit(1)


@functools.cache
def _processes() -> ProcessPoolExecutor:
    # spawn, not fork: a forked child of a process running gRPC's threads may inherit held locks.
    return ProcessPoolExecutor(
        max_workers=_PROCESSES,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=_start_worker,
        initargs=(os.getpid(),),
    )


def start_workers() -> None:
    """Starts the bulk worker process now (a server's start), not at the first large batch, which would
    wait for its interpreter to import the server's modules."""
    _processes().submit(os.getpid)


async def run_pure(chars: int, function: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
    """`function(*args, **kwargs)`, on a worker thread when its input holds `chars` characters or more,
    in the bulk worker process past OFF_PROCESS_FROM_CHARS. `function` must not touch the loop,
    contextvars or shared mutable state."""
    if chars < OFF_LOOP_FROM_CHARS:
        return function(*args, **kwargs)
    call = functools.partial(function, *args, **kwargs)
    loop = asyncio.get_running_loop()
    if chars >= OFF_PROCESS_FROM_CHARS:
        try:
            return await loop.run_in_executor(_processes(), call)
        except BrokenProcessPool:
            log.warning("the bulk worker process died; a new one is started, this call runs on a thread")
            _processes.cache_clear()
    return await loop.run_in_executor(_executor(), call)
