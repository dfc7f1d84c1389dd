"""Access tracking for forgetting: which memories recall returned, and when.

Recording is an in-memory append; a background loop writes the coalesced counts in one statement per
interval. Recall never waits on it, so tracking adds no database round trip to its critical path. Counts
still buffered when a server dies are lost: they feed retention scoring, not correctness.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Iterable
from datetime import datetime

from hindsight_server.domain.clock import Clock
from hindsight_server.domain.errors import HindsightError
from hindsight_server.pipelines.ports import AccessCounts

log = logging.getLogger(__name__)


class AccessTracker:
    def __init__(self, store: AccessCounts, clock: Clock, flush_interval_s: float = 1.0) -> None:
        self._store = store
        self._clock = clock
        self._interval_s = flush_interval_s
        self._counts: Counter[tuple[str, str]] = Counter()
        self._last_seen: dict[tuple[str, str], datetime] = {}
        # One flush at a time: a flush called while the loop's is writing waits for it, so what was
        # recorded before a flush returns is written (a stop's last flush, a test that reads after it).
        self._flushing = asyncio.Lock()

    def record(self, tenant_id: str, memory_ids: Iterable[str], at: datetime | None = None) -> None:
        at = at or self._clock()
        for memory_id in memory_ids:
            key = (tenant_id, memory_id)
            self._counts[key] += 1
            self._last_seen[key] = max(at, self._last_seen.get(key, at))

    async def flush(self) -> int:
        """Writes what was recorded until now, once any flush under way has ended; returns how many
        memories this flush updated."""
        async with self._flushing:
            if not self._counts:
                return 0
            counts, last_seen = self._counts, self._last_seen
            self._counts, self._last_seen = Counter(), {}
            try:
                await self._store.record_access(
                    [(t, m, n, last_seen[(t, m)]) for (t, m), n in counts.items()]
                )
            except BaseException:
                # Kept for the next flush rather than dropped: a database hiccup, or a cancelled flush.
                for key, count in counts.items():
                    self.record(key[0], [key[1]] * count, last_seen[key])
                raise
            return len(counts)

    async def run_forever(self) -> None:
        while True:
            await asyncio.sleep(self._interval_s)
            try:
                await self.flush()
            except HindsightError as exc:
                log.warning("access tracking paused: %s", exc)
