"""The lifecycle jobs' side of the in-memory store (LifecycleBatches and ItemFailures, pipelines/ports.py):
the batches of store/lifecycle.py over the same memories the write path stores, and a record of failing
job items. It holds no session turns, so there are none to purge."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from hindsight_server.domain.model import Memory, Status, Subject, Tier
from hindsight_server.domain.retention import RetentionItem
from tests.support.fakes.memory_store import InMemoryMemoryStore

LIVE = (Status.ACTIVE, Status.PENDING)


def _earlier(a: datetime | None, b: datetime | None) -> datetime | None:
    """SQL's least(): NULL only when both are."""
    return a if b is None else b if a is None else min(a, b)


@dataclass
class InMemoryLifecycleStore(InMemoryMemoryStore):
    def _all(self) -> list[Memory]:
        self._answer()
        return [m for by_id in self.memories.values() for m in by_id.values()]

    def _changed(self, changed: Memory, now: datetime) -> None:
        """Stores a job's change of a memory, a new version of its row."""
        self.add(replace(changed, updated_at=now, version=changed.version + 1))

    async def expire_batch(self, now: datetime, limit: int) -> int:
        due = [
            m for m in self._all() if m.status in LIVE and m.expires_at is not None and m.expires_at <= now
        ]
        for memory in due[:limit]:
            self._changed(replace(memory, status=Status.EXPIRED), now)
        return len(due[:limit])

    async def purge_batch(
        self, cutoff: datetime, superseded_before: datetime | None, now: datetime, limit: int
    ) -> int:
        def purgeable(m: Memory) -> bool:
            ended = m.status in (Status.EXPIRED, Status.SUPERSEDED)
            return (
                (ended and m.expires_at is not None and m.expires_at <= cutoff)
                or (m.status is Status.DELETED and m.updated_at <= cutoff)
                or (
                    m.status is Status.SUPERSEDED
                    and superseded_before is not None
                    and m.updated_at <= superseded_before
                )
            )

        gone = set(sorted(m.id for m in self._all() if purgeable(m))[:limit])
        for memory_id in gone:
            for tenant_memories in self.memories.values():
                tenant_memories.pop(memory_id, None)
            for space_vectors in self.vectors.values():
                space_vectors.pop(memory_id, None)
        for memory in self._all():  # version links to a purged memory are cleared
            if memory.supersedes in gone or memory.superseded_by in gone:
                self.add(
                    replace(
                        memory,
                        supersedes=None if memory.supersedes in gone else memory.supersedes,
                        superseded_by=None if memory.superseded_by in gone else memory.superseded_by,
                    )
                )
        return len(gone)

    async def purge_turns_batch(self, stored_before: datetime, limit: int) -> int:
        self._answer()
        return 0

    async def demote_batch(
        self, unused_since: datetime, now: datetime, expires_at: datetime | None, limit: int
    ) -> int:
        due = [
            m
            for m in self._all()
            if m.tier is Tier.SEMANTIC
            and m.status is Status.ACTIVE
            and (m.last_accessed_at or m.created_at) <= unused_since
        ][:limit]
        for memory in due:
            provenance = {**memory.provenance, "demoted_from": "semantic", "demoted_at": now.isoformat()}
            demoted = replace(
                memory,
                tier=Tier.EPISODIC,
                expires_at=_earlier(memory.expires_at, expires_at),
                provenance=provenance,
            )
            self._changed(demoted, now)
        return len(due)

    async def tenants_over(self, quota: int, after: str, limit: int) -> list[tuple[str, int]]:
        live = Counter(m.tenant_id for m in self._all() if m.status in LIVE and m.tenant_id > after)
        return sorted((tenant, count) for tenant, count in live.items() if count > quota)[:limit]

    async def retention_items(self, tenant_id: str) -> list[RetentionItem]:
        self._answer()
        return [
            RetentionItem(
                m.id, m.kind, m.status, m.confidence, m.access_count, m.last_accessed_at, m.created_at
            )
            for m in self.of_tenant(tenant_id)
            if m.status in LIVE
        ]

    async def evict(self, tenant_id: str, memory_ids: Sequence[str], now: datetime) -> int:
        self._answer()
        leaving = [m for m in self.of_tenant(tenant_id) if m.id in memory_ids and m.status in LIVE]
        for memory in leaving:
            provenance = {**memory.provenance, "deleted_by": "quota"}
            self._changed(replace(memory, status=Status.DELETED, provenance=provenance), now)
        return len(leaving)

    def _live_episodes(self, now: datetime) -> list[Memory]:
        """What pattern finding reads: live episodes with an intent, not the patterns job's own habits."""
        return [
            m
            for m in self._all()
            if m.tier is Tier.EPISODIC
            and m.status is Status.ACTIVE
            and m.intent
            and (m.expires_at is None or m.expires_at > now)
            and m.provenance.get("job") != "patterns"
        ]

    async def subjects_with_episodes(
        self, after: Subject | None, min_episodes: int, now: datetime, limit: int
    ) -> list[Subject]:
        counts = Counter(Subject(m.tenant_id, m.subject) for m in self._live_episodes(now))
        start = (after.tenant_id, after.subject) if after else ("", "")
        found = [s for s, n in counts.items() if n >= min_episodes and (s.tenant_id, s.subject) > start]
        return sorted(found, key=lambda s: (s.tenant_id, s.subject))[:limit]

    async def episodes(self, subject: Subject, now: datetime) -> list[Memory]:
        mine = [
            m
            for m in self._live_episodes(now)
            if (m.tenant_id, m.subject) == (subject.tenant_id, subject.subject)
        ]
        return sorted(mine, key=lambda m: (m.created_at, m.id))


@dataclass
class RecordedFailures:
    """ItemFailures in dicts: how many times in a row each (job, tenant, item) failed, the class of its
    last error, and until when it backs off (base * 2^(failures - 1) seconds, at most max, as
    store/job_failures.py)."""

    failures: dict[tuple[str, str, str], int] = field(default_factory=dict)
    errors: dict[tuple[str, str, str], str] = field(default_factory=dict)
    retry_at: dict[tuple[str, str, str], datetime] = field(default_factory=dict)

    async def failed(
        self, job: str, tenant_id: str, item: str, error: str, now: datetime, backoff_s: tuple[float, float]
    ) -> int:
        key = (job, tenant_id, item)
        self.failures[key] = self.failures.get(key, 0) + 1
        self.errors[key] = error
        base_s, max_s = backoff_s
        self.retry_at[key] = now + timedelta(
            seconds=min(max_s, base_s * 2 ** min(self.failures[key] - 1, 30))
        )
        return self.failures[key]

    async def cleared(self, job: str, tenant_id: str, item: str) -> None:
        self.failures.pop((job, tenant_id, item), None)
        self.errors.pop((job, tenant_id, item), None)
        self.retry_at.pop((job, tenant_id, item), None)

    def backing_off(self, job: str, tenant_id: str, item: str, now: datetime) -> bool:
        """The item waits out a failure at `now` (store/job_failures.py BACKING_OFF)."""
        retry_at = self.retry_at.get((job, tenant_id, item))
        return retry_at is not None and retry_at > now
