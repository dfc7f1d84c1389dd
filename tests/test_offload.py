"""Where pure work runs (hindsight_server/offload.py): small inputs in place, larger ones on a thread, bulk
ones in a worker process at a lower CPU priority that holds neither the loop nor the GIL; a worker that
dies is replaced and its call still answered."""

from __future__ import annotations

import asyncio
import os
import threading
import time

from hindsight_server.offload import OFF_LOOP_FROM_CHARS, OFF_PROCESS_FROM_CHARS, run_pure, start_workers


def where() -> tuple[int, int, int]:
    """(process id, thread id, CPU niceness) of the caller."""
    return os.getpid(), threading.get_ident(), os.nice(0)


def exit_unless_in(pid: int) -> str:
    """Kills a worker process; answers when run in the process `pid` (the fallback thread)."""
    if os.getpid() != pid:
        os._exit(1)
    return "answered on a thread"


def spin(seconds: float) -> float:
    """Pure CPU work, holding the GIL of whichever interpreter runs it."""
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass
    return seconds


async def test_small_inputs_run_in_place_larger_on_a_thread_bulk_in_a_lower_priority_process() -> None:
    start_workers()
    here = where()
    assert await run_pure(OFF_LOOP_FROM_CHARS - 1, where) == here
    pid, thread, nice = await run_pure(OFF_LOOP_FROM_CHARS, where)
    assert (pid, nice) == (here[0], here[2]) and thread != here[1]
    pid, _, nice = await run_pure(OFF_PROCESS_FROM_CHARS, where)
    assert pid != here[0]
    assert nice == min(here[2] + 10, 19)


async def test_a_dead_worker_is_replaced_and_its_call_still_answered() -> None:
    first = (await run_pure(OFF_PROCESS_FROM_CHARS, where))[0]
    answer = await run_pure(OFF_PROCESS_FROM_CHARS, exit_unless_in, os.getpid())
    assert answer == "answered on a thread"
    replacement = (await run_pure(OFF_PROCESS_FROM_CHARS, where))[0]
    assert replacement not in (first, os.getpid())


async def test_bulk_work_leaves_the_loop_free() -> None:
    await run_pure(OFF_PROCESS_FROM_CHARS, where)  # the worker is up
    gaps: list[float] = []

    async def tick() -> None:
        last = time.perf_counter()
        while True:
            await asyncio.sleep(0.005)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    ticker = asyncio.create_task(tick())
    try:
        assert await run_pure(OFF_PROCESS_FROM_CHARS, spin, 0.4) == 0.4
    finally:
        ticker.cancel()
    # On a thread the loop would get the GIL back only between 5 ms slices; in another process it
    # never waits for it (the bound leaves room for a busy CI core).
    assert len(gaps) >= 20 and max(gaps) < 0.1, max(gaps)
