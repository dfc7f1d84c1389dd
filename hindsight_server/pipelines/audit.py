"""The recall audit (audit.tenants): what each recall of an audited tenant served, kept off the recall's
latency path, its query, and its retention.

Recording is an append to a bounded in-process buffer; a background loop writes it every
`flush_interval_s`, or as soon as `flush_rows` entries wait, in one multi-row statement (the entries
and their recall.served events together, store/audit.py). A recall never waits for the database and
never fails for the audit: with the buffer full (the database slow or away) a new entry is dropped and
counted (`hindsight.audit.dropped`, and `dropped` here). What a crash loses: the entries still in the
buffer, at most `flush_interval_s` of recalls (or up to `buffer_size` while the database was away). A
server that stops gracefully writes them first. A tenant that is not audited costs nothing: recall
does not build an entry, and the loop writes nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections import deque
from dataclasses import dataclass
from datetime import datetime, timedelta

from hindsight_server.domain.audit import AuditPage, AuditQuery, RecallServed, query_hash
from hindsight_server.domain.clock import Clock
from hindsight_server.domain.errors import HindsightError
from hindsight_server.pipelines.ports import AuditLog
from hindsight_server.telemetry.counters import count_audit_dropped

__all__ = ["AuditSettings", "RecallAudit"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class AuditSettings:
    tenants: frozenset[str] = frozenset()
    query_text_tenants: frozenset[str] = frozenset()
    query_hash_key: bytes = b""
    retention: timedelta = timedelta(days=30)
    buffer_size: int = 10_000
    flush_rows: int = 500
    flush_interval_s: float = 0.1
    trim_batch: int = 5_000


class RecallAudit:
    def __init__(self, store: AuditLog, settings: AuditSettings, clock: Clock) -> None:
        self._store = store
        self._settings = settings
        self._clock = clock
        self._buffer: deque[RecallServed] = deque()
        self._full = asyncio.Event()  # flush_rows entries wait: write them now
        self.dropped = 0  # entries lost to a full buffer (or to a write that kept failing)

    def audits(self, tenant_id: str) -> bool:
        return tenant_id in self._settings.tenants

    def record(
        self,
        tenant_id: str,
        *,
        request_id: str,
        subject: str,
        agent_id: str,
        query_text: str,
        returned_ids: tuple[str, ...],
        packed_ids: tuple[str, ...],
    ) -> None:
        """Buffers one recall of an audited tenant, at the server's time (not the request's `now`);
        never blocks, never raises for the audit."""
        settings = self._settings
        if len(self._buffer) >= settings.buffer_size:
            self._drop(1, "buffer_full")
            return
        self._buffer.append(
            RecallServed(
                id=str(uuid.uuid4()),
                tenant_id=tenant_id,
                at=self._clock(),
                request_id=request_id,
                subject=subject,
                agent_id=agent_id,
                query_hash=query_hash(settings.query_hash_key, tenant_id, query_text),
                query_text=query_text if tenant_id in settings.query_text_tenants else None,
                returned_ids=returned_ids,
                packed_ids=packed_ids,
            )
        )
        if len(self._buffer) >= settings.flush_rows:
            self._full.set()

    @property
    def buffered(self) -> int:
        return len(self._buffer)

    def _drop(self, count: int, reason: str) -> None:
        self.dropped += count
        count_audit_dropped(count, reason)

    async def flush(self) -> int:
        """Writes what waits, `flush_rows` entries a statement; returns how many. On a database error
        (or a cancellation) the batch goes back to the front of the buffer, as much as fits, for the
        next flush."""
        written = 0
        while self._buffer:
            batch = [self._buffer.popleft() for _ in range(min(len(self._buffer), self._settings.flush_rows))]
            try:
                await self._store.record(batch)
            except BaseException:
                # Also when cancelled mid-write (the server stopping): a write that did commit is not
                # recorded twice by the next flush (store/audit.py skips entries already there).
                room = self._settings.buffer_size - len(self._buffer)
                kept = batch[: max(room, 0)]
                self._buffer.extendleft(reversed(kept))
                if len(batch) > len(kept):
                    self._drop(len(batch) - len(kept), "write_failed")
                raise
            written += len(batch)
        return written

    async def run_forever(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._settings.flush_interval_s):
                    await self._full.wait()
            self._full.clear()
            try:
                await self.flush()
            except HindsightError as exc:
                log.warning("recall audit not written (%d entries wait): %s", len(self._buffer), exc)
                await asyncio.sleep(self._settings.flush_interval_s)  # not a tight loop while it is down

    async def page(self, query: AuditQuery) -> AuditPage:
        return await self._store.page(query)

    async def trim(self, now: datetime) -> int:
        """The retention job: entries older than the retention go, a batch a transaction."""
        before, total = now - self._settings.retention, 0
        while True:
            deleted = await self._store.trim_batch(before, self._settings.trim_batch)
            total += deleted
            if deleted < self._settings.trim_batch:
                return total
