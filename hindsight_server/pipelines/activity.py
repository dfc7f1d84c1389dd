"""When the write path last embedded inline, so the background worker can give way to it."""

from __future__ import annotations

import math
import time
from collections.abc import Callable

__all__ = ["WriteActivity"]


class WriteActivity:
    """Acknowledgements come first: while writes are embedding inline, the backfill worker (which
    competes for the same inference tier and cores) waits between its chunks, up to a bound so a
    server that never stops writing still fills its backlog."""

    def __init__(self, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._monotonic = monotonic
        self._last = -math.inf

    def touch(self) -> None:
        self._last = self._monotonic()

    def quiet_for(self, seconds: float) -> bool:
        return self._monotonic() - self._last >= seconds
