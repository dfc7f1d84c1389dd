"""Latency over a sliding window: what `hindsight status` and the "recall p99 target met" metric read.

A histogram exported to a collector answers "what was the p99 over the last hour" there; the server
itself needs the current figure without one, so it keeps the recent samples (bounded by age and count).
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class LatencySummary:
    count: int
    p50_ms: float
    p95_ms: float
    p99_ms: float
    max_ms: float

    def as_dict(self) -> dict[str, float | int]:
        return {
            "count": self.count,
            "p50_ms": round(self.p50_ms, 3),
            "p95_ms": round(self.p95_ms, 3),
            "p99_ms": round(self.p99_ms, 3),
            "max_ms": round(self.max_ms, 3),
        }


def nearest_rank(ordered: Sequence[float], share: float) -> float:
    """The nearest-rank percentile of sorted values (the figure some sample actually took)."""
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]


class LatencyWindow:
    """The samples of the last `window_s` seconds, at most `max_samples` of them (the newest)."""

    def __init__(
        self, window_s: float, max_samples: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.window_s = window_s
        self._clock = clock
        self._samples: deque[tuple[float, float]] = deque(maxlen=max_samples)

    def add(self, milliseconds: float) -> None:
        self._samples.append((self._clock(), milliseconds))

    def summary(self) -> LatencySummary | None:
        """None when nothing happened in the window."""
        since = self._clock() - self.window_s
        while self._samples and self._samples[0][0] < since:
            self._samples.popleft()
        if not self._samples:
            return None
        ordered = sorted(ms for _, ms in self._samples)
        return LatencySummary(
            len(ordered),
            nearest_rank(ordered, 0.50),
            nearest_rank(ordered, 0.95),
            nearest_rank(ordered, 0.99),
            ordered[-1],
        )
