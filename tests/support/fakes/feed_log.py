"""An in-memory change feed behind FeedLog (pipelines/ports.py): events numbered by their transaction's
id and a sequence, served in that order below the horizon (the oldest transaction still in flight, as
pg_snapshot_xmin in store/feed.py), each day's events in its partition when it has one and in the default
partition otherwise, and each tenant's trimmed position moved past what retention removes."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime

from hindsight_server.domain.feed import ChangeEvent, Cursor, FeedQuery, NewEvent


@dataclass(frozen=True, slots=True)
class _Row:
    event: ChangeEvent
    visibility: str
    agent_id: str
    partition: date | None  # None: the default partition


def _day(at: datetime) -> date:
    return at.astimezone(UTC).date()


@dataclass
class InMemoryFeedLog:
    rows: list[_Row] = field(default_factory=list)
    days: set[date] = field(default_factory=set)  # the days that have a partition
    busy: set[date] = field(default_factory=set)  # partitions whose lock another session holds
    trimmed_to: dict[str, Cursor] = field(default_factory=dict)
    in_flight: set[int] = field(default_factory=set)  # transactions begun, not yet ended
    next_xid: int = 1
    _seq: int = 0

    def begin(self) -> int:
        """A transaction that holds the horizon back until record() commits it."""
        xid = self.next_xid
        self.next_xid += 1
        self.in_flight.add(xid)
        return xid

    def record(self, events: Sequence[NewEvent], xid: int | None = None) -> list[ChangeEvent]:
        """Commits `events` as one transaction (the one begun as `xid`, else a new one)."""
        xid = self.begin() if xid is None else xid
        recorded = []
        for new in events:
            self._seq += 1
            event = ChangeEvent(
                id=f"event-{self._seq}",
                cursor=Cursor(xid, self._seq),
                tenant_id=new.tenant_id,
                type=new.type,
                at=new.at,
                memory_id=new.memory_id,
                subject=new.subject,
                kind=new.kind,
                resolution=new.resolution,
                version=new.version,
                fields=new.fields,
                content=new.content,
            )
            day = _day(new.at)
            self.rows.append(_Row(event, new.visibility, new.agent_id, day if day in self.days else None))
            recorded.append(event)
        self.in_flight.discard(xid)
        return recorded

    def events_of(self, tenant_id: str) -> list[ChangeEvent]:
        """The tenant's events still kept, in feed order, committed or not."""
        mine = [row.event for row in self.rows if row.event.tenant_id == tenant_id]
        return sorted(mine, key=lambda event: event.cursor)

    def _horizon_xid(self) -> int:
        return min(self.in_flight, default=self.next_xid)

    def _move_trimmed(self, gone: Iterable[_Row]) -> None:
        for row in gone:
            tenant = row.event.tenant_id
            if tenant not in self.trimmed_to or self.trimmed_to[tenant] < row.event.cursor:
                self.trimmed_to[tenant] = row.event.cursor

    # FeedReader

    async def read(self, query: FeedQuery, after: Cursor, limit: int) -> tuple[list[ChangeEvent], Cursor]:
        horizon = self._horizon_xid()

        def served(row: _Row) -> bool:
            event = row.event
            return (
                event.tenant_id == query.tenant_id
                and event.cursor > after
                and event.cursor.xid < horizon
                and (not query.subjects or event.subject in query.subjects)
                and (not query.kinds or event.kind in query.kinds)
                and (not query.types or event.type in query.types)
                and (query.viewer is None or row.visibility == "shared" or row.agent_id == query.viewer)
            )

        events = sorted((row.event for row in self.rows if served(row)), key=lambda e: e.cursor)[:limit]
        if len(events) >= limit:
            return events, events[-1].cursor
        return events, max(after, Cursor.before(horizon))

    async def horizon(self) -> Cursor:
        return Cursor.before(self._horizon_xid())

    async def trimmed(self, tenant_id: str) -> Cursor | None:
        return self.trimmed_to.get(tenant_id)

    # FeedLog: retention

    async def partitions(self) -> list[date]:
        return sorted(self.days)

    async def add_partition(self, day: date) -> bool:
        holds_day = any(row.partition is None and _day(row.event.at) == day for row in self.rows)
        if day in self.busy or holds_day:
            return False
        self.days.add(day)
        return True

    async def drop_partition(self, day: date) -> int | None:
        if day in self.busy:
            return None
        gone = [row for row in self.rows if row.partition == day]
        self._move_trimmed(gone)
        self.rows = [row for row in self.rows if row.partition != day]
        self.days.discard(day)
        return len(gone)

    async def trim_default(self, before: datetime, limit: int) -> int:
        gone = [row for row in self.rows if row.partition is None and row.event.at < before][:limit]
        self._move_trimmed(gone)
        ids = {row.event.id for row in gone}
        self.rows = [row for row in self.rows if row.event.id not in ids]
        return len(gone)
