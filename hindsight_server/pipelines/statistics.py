"""Fresh planner statistics for a tenant that grew. PostgreSQL estimates a tenant that its last ANALYZE
did not see at about one row, and plans that tenant's statements for one row: the context statement
read all 1,030 rows of a tenant being imported once per memory it was given (1.6 s). Autovacuum
analyzes a partition only after a tenth of it changed, which one new user's import into a large
partition may never reach. So each server counts the memories it writes per tenant and, past
`after_rows` since it last did, analyzes that tenant's partition in the background, one at a time."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from typing import Protocol

from hindsight_server.domain.errors import HindsightError

log = logging.getLogger(__name__)

# Tenants whose writes are being counted. Past it the counts start again from zero: that only delays a
# refresh, and a server writing for millions of tenants does not hold a count for each.
CAPACITY = 100_000


class PartitionAnalyzer(Protocol):
    async def analyze_partition_of(self, tenant_id: str) -> None: ...


class StatisticsRefresh:
    def __init__(self, store: PartitionAnalyzer, after_rows: int) -> None:
        self._store = store
        self._after_rows = after_rows  # 0: never (autovacuum alone)
        self._written: Counter[str] = Counter()
        self._due: asyncio.Queue[str] = asyncio.Queue()
        self._queued: set[str] = set()

    def note_written(self, tenant_id: str, rows: int) -> None:
        """Memories this server just created in the tenant; queues its refresh once they add up."""
        if self._after_rows <= 0 or rows <= 0:
            return
        if len(self._written) >= CAPACITY and tenant_id not in self._written:
            self._written.clear()
        self._written[tenant_id] += rows
        if self._written[tenant_id] >= self._after_rows and tenant_id not in self._queued:
            del self._written[tenant_id]
            self._queued.add(tenant_id)
            self._due.put_nowait(tenant_id)

    async def refresh_next(self) -> str:
        """Waits for a tenant that is due, analyzes its partition, and returns the tenant."""
        tenant_id = await self._due.get()
        try:
            await self._store.analyze_partition_of(tenant_id)
        finally:
            self._queued.discard(tenant_id)
        return tenant_id

    async def run_forever(self) -> None:
        while True:
            try:
                await self.refresh_next()
            except HindsightError as exc:  # the next one due tries again; plans stay as they were
                log.warning("planner statistics not refreshed: %s", exc)
