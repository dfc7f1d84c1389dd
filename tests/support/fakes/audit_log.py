"""An in-memory recall audit (AuditLog, pipelines/ports.py): store/audit.py's entries by (tenant, id),
entries already recorded skipped, pages newest first by (time, id) under the same filters, retention by
time; with how many statements wrote entries, since the pipeline writes a buffer in bounded statements."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from hindsight_server.domain.audit import AuditCursor, AuditPage, AuditQuery, RecallServed
from hindsight_server.domain.errors import HindsightError


def _chosen(entry: RecallServed, query: AuditQuery) -> bool:
    return (
        entry.tenant_id == query.tenant_id
        and (not query.memory_id or query.memory_id in entry.returned_ids)
        and (query.subject is None or entry.subject == query.subject)
        and (query.viewer is None or entry.agent_id == query.viewer)
        and (query.since is None or entry.at >= query.since)
        and (query.until is None or entry.at < query.until)
        and (query.after is None or AuditCursor(entry.at, entry.id) < query.after)
    )


@dataclass
class InMemoryAuditLog:
    entries: dict[tuple[str, str], RecallServed] = field(default_factory=dict)  # by (tenant, id)
    statements: int = 0  # record() calls that wrote
    failing: HindsightError | None = None  # raised by every call: a database that cannot answer

    def _answer(self) -> None:
        if self.failing is not None:
            raise self.failing

    async def record(self, entries: Sequence[RecallServed]) -> None:
        self._answer()
        if not entries:
            return
        self.statements += 1
        for entry in entries:
            self.entries.setdefault((entry.tenant_id, entry.id), entry)

    async def page(self, query: AuditQuery) -> AuditPage:
        self._answer()
        newest_first = sorted(
            (e for e in self.entries.values() if _chosen(e, query)), key=lambda e: (e.at, e.id), reverse=True
        )
        page = newest_first[: query.page_size]
        more = len(newest_first) > query.page_size
        return AuditPage(page, AuditCursor(page[-1].at, page[-1].id) if more else None)

    async def trim_batch(self, before: datetime, limit: int) -> int:
        self._answer()
        due = [key for key, entry in self.entries.items() if entry.at < before][:limit]
        for key in due:
            del self.entries[key]
        return len(due)
