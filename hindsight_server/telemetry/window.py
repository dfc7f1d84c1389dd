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


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of already sorted values (q in 0..100): a figure some sample took."""
    if not sorted_values:
        return math.nan
    rank = max(1, math.ceil(q / 100 * len(sorted_values)))
    return sorted_values[rank - 1]


@dataclass(frozen=True, slots=True)
class LatencySummary:
    """Percentiles, never averages alone: the server's window, the benchmarks and the load tests."""

    count: int
    p50_ms: float
    p95_ms: float
    p99_ms: float
    max_ms: float

    @classmethod
    def of(cls, seconds: Sequence[float]) -> LatencySummary:
        return cls.of_sorted_ms(sorted(s * 1000 for s in seconds))

    @classmethod
    def of_sorted_ms(cls, ordered: Sequence[float]) -> LatencySummary:
        return cls(
            count=len(ordered),
            p50_ms=percentile(ordered, 50),
            p95_ms=percentile(ordered, 95),
            p99_ms=percentile(ordered, 99),
            max_ms=ordered[-1] if ordered else math.nan,
        )

    def line(self, name: str) -> str:
        return (
            f"{name:<28} n={self.count:<6} p50={self.p50_ms:7.2f} ms  p95={self.p95_ms:7.2f} ms  "
            f"p99={self.p99_ms:7.2f} ms  max={self.max_ms:7.2f} ms"
        )

    def as_dict(self) -> dict[str, float | int]:
        return {
            "count": self.count,
            "p50_ms": round(self.p50_ms, 3),
            "p95_ms": round(self.p95_ms, 3),
            "p99_ms": round(self.p99_ms, 3),
            "max_ms": round(self.max_ms, 3),
        }


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
        return LatencySummary.of_sorted_ms(sorted(ms for _, ms in self._samples))
