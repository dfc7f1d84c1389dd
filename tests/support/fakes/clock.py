"""A clock that stands still until a test moves it, shared by a pipeline and the fakes it calls (where the
real store reads the database's now())."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta


@dataclass
class SteppedClock:
    now: datetime

    def __call__(self) -> datetime:
        return self.now

    def advance(self, delta: timedelta) -> None:
        self.now += delta
