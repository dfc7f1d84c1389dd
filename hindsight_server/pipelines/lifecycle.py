"""The lifecycle jobs' bodies: forgetting (expire, purge, demote, evict over a quota) and episodic ->
semantic abstraction of repeated patterns. The rules are the domain's (retention, patterns, policy);
this module loops over bounded batches of the store and writes derived memories through the write
pipeline.

Each body takes the job's `now` and returns how many memories it changed. Each is idempotent: a batch
is one transaction, and a body killed half-way, run again with the same `now`, ends where one
uninterrupted run would have.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from functools import partial

from hindsight_server.domain.model import JsonValue, Memory, Subject
from hindsight_server.domain.patterns import EpisodeFacts, Pattern, find_patterns
from hindsight_server.domain.policy import TtlPolicy
from hindsight_server.domain.retention import RetentionPolicy, demotion_cutoff, over_quota
from hindsight_server.pipelines.item_isolation import ItemIsolation, JobItem
from hindsight_server.pipelines.jobs import JobBody
from hindsight_server.pipelines.ports import LifecycleBatches
from hindsight_server.pipelines.write import WritePipeline


@dataclass(frozen=True, slots=True)
class LifecycleSettings:
    batch_size: int = 500  # rows (or subjects, or tenants) per transaction
    purge_grace: timedelta = timedelta(days=7)  # expired or deleted this long before it is purged
    quota: int = 0  # live memories a tenant may keep; 0: no limit
    demote_after: timedelta = timedelta(days=90)  # docs/design.md: semantic unused 90 days -> episodic
    pattern_min_episodes: int = 3
    pattern_min_share: float = 0.5
    retention: RetentionPolicy = field(default_factory=RetentionPolicy)


async def _in_batches(batch: Callable[[], Awaitable[int]], size: int) -> int:
    """Runs `batch` until one comes back short: everything due has been handled."""
    total = 0
    while True:
        done = await batch()
        total += done
        if done < size:
            return total


class LifecycleJobs:
    def __init__(
        self,
        store: LifecycleBatches,
        writes: WritePipeline,
        settings: LifecycleSettings,
        ttl: TtlPolicy,
        isolation: ItemIsolation,
    ) -> None:
        self._store = store
        self._isolation = isolation  # the patterns job's subjects, one at a time
        self._writes = writes
        self._settings = settings
        self._ttl = ttl

    def bodies(self) -> dict[str, JobBody]:
        """The jobs by name, for the registry."""
        return {
            "expire": self.expire,
            "purge": self.purge,
            "demote": self.demote,
            "evict": self.evict,
            "patterns": self.patterns,
        }

    async def expire(self, now: datetime) -> int:
        size = self._settings.batch_size
        return await _in_batches(lambda: self._store.expire_batch(now, size), size)

    async def purge(self, now: datetime) -> int:
        """Memories past their grace (expired, deleted) or superseded longer than ttl.superseded, then
        the session turns older than the working TTL plus the grace: the raw conversation lasts as long
        as the working memory made of it. Returns memories and turns purged."""
        size, grace = self._settings.batch_size, self._settings.purge_grace
        cutoff, superseded = now - grace, self._ttl.superseded_cutoff(now)
        purged = await _in_batches(lambda: self._store.purge_batch(cutoff, superseded, now, size), size)
        turns_cutoff = self._ttl.turns_cutoff(now, grace)
        if turns_cutoff is None:
            return purged
        return purged + await _in_batches(lambda: self._store.purge_turns_batch(turns_cutoff, size), size)

    async def demote(self, now: datetime) -> int:
        """Semantic memories nobody used for `demote_after` become episodes, which expire after the
        episodic TTL (not their kind's: a demoted preference would otherwise never leave)."""
        size = self._settings.batch_size
        unused_since = demotion_cutoff(now, self._settings.demote_after)
        lifetime = self._ttl.episodic
        expires_at = None if lifetime is None else now + lifetime
        return await _in_batches(lambda: self._store.demote_batch(unused_since, now, expires_at, size), size)

    async def evict(self, now: datetime) -> int:
        """Tenants over the quota lose their lowest-retention memories (domain.retention) until they
        are at it; a tenant's scoring reads its live memories' counters, never their content."""
        quota, size = self._settings.quota, self._settings.batch_size
        if quota <= 0:
            return 0
        evicted, after = 0, ""
        while tenants := await self._store.tenants_over(quota, after, size):
            for tenant_id, _live in tenants:
                items = await self._store.retention_items(tenant_id)
                leaving = over_quota(items, quota, now, self._settings.retention)
                for start in range(0, len(leaving), size):
                    evicted += await self._store.evict(tenant_id, leaving[start : start + size], now)
            after = tenants[-1][0]
        return evicted

    async def patterns(self, now: datetime) -> int:
        """Habits repeated across a subject's episodes become semantic preferences linked to their
        sources. A habit's idempotency key holds its support, so a rerun writes nothing and a habit
        seen in more episodes since becomes its new version. Returns the memories written."""
        size = self._settings.batch_size
        written, after = 0, None
        while subjects := await self._store.subjects_with_episodes(
            after, self._settings.pattern_min_episodes, now, size
        ):
            for subject in subjects:
                item = JobItem("patterns", subject.tenant_id, subject.subject)
                written += await self._isolation.run(item, partial(self._abstract, subject, now), now) or 0
            after = subjects[-1]
        return written

    async def _abstract(self, subject: Subject, now: datetime) -> int:
        episodes = await self._store.episodes(subject, now)
        found = find_patterns(
            [EpisodeFacts.of(episode) for episode in episodes],
            min_episodes=self._settings.pattern_min_episodes,
            min_share=self._settings.pattern_min_share,
        )
        if not found:
            return 0
        by_id = {episode.id: episode for episode in episodes}
        habits = [self._habit(subject, pattern, by_id, now) for pattern in found]
        # One subject's habits in one transaction: all of them or none.
        outcomes = await self._writes.commit(habits, now, verbatim=False)
        return sum(1 for outcome in outcomes if outcome.created)

    def _habit(
        self, subject: Subject, pattern: Pattern, episodes: dict[str, Memory], now: datetime
    ) -> Memory:
        sources = [episodes[source] for source in pattern.source_ids]
        sessions: list[JsonValue] = [*sorted({m.session_id for m in sources if m.session_id})]
        agents: list[JsonValue] = [*sorted({m.agent_id for m in sources if m.agent_id})]
        provenance: dict[str, JsonValue] = {
            "job": "patterns",
            "pattern": pattern.key,
            "subject": subject.subject,
            "intent": pattern.intent,
            "entity": pattern.entity,
            "value": pattern.value,
            "support": len(pattern.source_ids),
            "share": round(pattern.share, 4),
            "sessions": sessions,
            "agents": agents,
        }
        memory = self._writes.new_memory(pattern.draft(subject.tenant_id), now)
        return replace(memory, derived_from=pattern.source_ids, provenance=provenance)


__all__ = ["LifecycleJobs", "LifecycleSettings"]
