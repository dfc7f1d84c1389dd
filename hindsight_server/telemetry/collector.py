"""Python's cyclic garbage collector as a server sees it. A collection holds the GIL, so the event loop
and every call on the server wait it out: its pauses are recorded like the loop's own lag. A started
server's own objects (modules, message descriptors, settings, pools: ~90,000) are frozen out of the
collector's reach (`freeze_started`): a full collection walked them all, 50-80 ms of a held loop every
few seconds under load on these cores, and after the freeze it walks what the calls left, 5-9 ms
(BENCHMARKS.md, "The collector's pauses")."""

from __future__ import annotations

import gc
import time
from typing import Any

from hindsight_server.telemetry.window import LatencyWindow

__all__ = ["CollectorPauses", "freeze_started"]


def freeze_started(thresholds: tuple[int, int, int]) -> int:
    """Collects what start-up left behind, then moves every object alive now into the collector's
    permanent generation, which it never walks (they live as long as the process anyway), and sets the
    collector's `thresholds` (`server.gc_thresholds`). Returns how many objects are frozen.
    For a process that serves until it ends: `hindsight serve`."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*thresholds)
    return gc.get_freeze_count()


class CollectorPauses:
    """Each collection's duration (ms) into `window` while installed. gc.callbacks is the process's:
    in a process running several servers (tests) each records the pauses they all share."""

    def __init__(self, window: LatencyWindow) -> None:
        self.window = window
        self._started: float | None = None

    def install(self) -> None:
        if self._observe not in gc.callbacks:
            gc.callbacks.append(self._observe)

    def remove(self) -> None:
        if self._observe in gc.callbacks:
            gc.callbacks.remove(self._observe)

    def _observe(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        elif self._started is not None:
            self.window.add((time.perf_counter() - self._started) * 1000)
            self._started = None
