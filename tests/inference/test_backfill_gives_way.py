"""The backfill worker gives way to writes that embed inline, for a bounded time."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from hindsight_server.pipelines.activity import WriteActivity
from hindsight_server.pipelines.backfill import BackfillSettings, EmbeddingBackfill


def _worker(activity: WriteActivity) -> EmbeddingBackfill:
    settings = BackfillSettings(give_way_s=0.02, max_give_way_s=0.2)
    unused: Any = None  # giving way needs neither the store nor the tier
    return EmbeddingBackfill(unused, unused, settings, activity)


async def test_a_quiet_write_path_is_not_waited_for() -> None:
    started = time.monotonic()
    await _worker(WriteActivity())._give_way()
    assert time.monotonic() - started < 0.05


async def test_busy_writes_hold_the_worker_back_but_not_for_ever() -> None:
    activity = WriteActivity()
    worker = _worker(activity)

    async def writes() -> None:  # a write path embedding inline without a pause
        while True:
            activity.touch()
            await asyncio.sleep(0.005)

    writing = asyncio.create_task(writes())
    try:
        await asyncio.sleep(0.01)
        started = time.monotonic()
        await worker._give_way()
        waited = time.monotonic() - started
    finally:
        writing.cancel()
    assert 0.19 <= waited < 0.6  # the bound, not longer


async def test_the_worker_goes_on_soon_after_writes_stop() -> None:
    activity = WriteActivity()
    activity.touch()
    started = time.monotonic()
    await _worker(activity)._give_way()
    assert time.monotonic() - started < 0.1
