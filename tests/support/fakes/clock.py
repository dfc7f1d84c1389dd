"""A wall clock and a monotonic clock that move only when a test moves them, so what a pipeline does at
a time (a TTL, a retry window, a time budget) is tested without waiting for it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta


@dataclass
class FakeClock:
    now: datetime
    seconds: float = 0.0  # the monotonic clock's reading
    # How far each monotonic reading moves it: the work a loop does between two readings.
    monotonic_step_s: float = 0.0
    # How far each wall-clock reading moves it: each batch of a long call sees a later time.
    step: timedelta = timedelta(0)

    def __call__(self) -> datetime:
        now = self.now
        self.now += self.step
        return now

    def monotonic(self) -> float:
        self.seconds += self.monotonic_step_s
        return self.seconds

    def advance(self, delta: timedelta) -> None:
        self.now += delta
        self.seconds += delta.total_seconds()
