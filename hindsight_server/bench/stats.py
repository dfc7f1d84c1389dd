"""Latency summaries: percentiles, never averages alone."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of already sorted values (q in 0..100)."""
    if not sorted_values:
        return math.nan
    rank = max(1, math.ceil(q / 100 * len(sorted_values)))
    return sorted_values[rank - 1]


@dataclass(frozen=True, slots=True)
class LatencySummary:
    count: int
    p50_ms: float
    p95_ms: float
    p99_ms: float
    max_ms: float

    @classmethod
    def of(cls, seconds: Sequence[float]) -> LatencySummary:
        ordered = sorted(s * 1000 for s in seconds)
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
