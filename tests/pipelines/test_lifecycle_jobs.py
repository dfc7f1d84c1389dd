"""The lifecycle jobs on the in-memory store (tests/support/fakes): what expire, purge, demote, evict and
patterns change, batch by batch, and that a rerun changes nothing more. The statements behind the same
calls run against PostgreSQL in tests/lifecycle."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from hindsight_server.domain.model import Kind, Memory, Status, Tier
from hindsight_server.domain.policy import Limits, TtlPolicy, WritePolicy
from hindsight_server.pipelines.item_isolation import ItemIsolation
from hindsight_server.pipelines.lifecycle import LifecycleJobs, LifecycleSettings
from hindsight_server.pipelines.write import WritePipeline, WriteSettings
from tests.domain.builders import numbered
from tests.support.fakes.lifecycle_store import InMemoryLifecycleStore, RecordedFailures

NOW = datetime(2024, 5, 1, 12, tzinfo=UTC)
DAY = timedelta(days=1)


@dataclass
class Jobs:
    jobs: LifecycleJobs
    store: InMemoryLifecycleStore
    failures: RecordedFailures


def jobs(*memories: Memory, **settings: Any) -> Jobs:
    store = InMemoryLifecycleStore()
    for stored in memories:
        store.add(stored)
    failures = RecordedFailures()
    writes = WritePipeline(store, WriteSettings(Limits(), TtlPolicy(), WritePolicy()), lambda: NOW)
    isolation = ItemIsolation(failures, backoff_s=60, max_backoff_s=3600)
    lifecycle = LifecycleJobs(
        store, writes, LifecycleSettings(batch_size=2, **settings), TtlPolicy(), isolation
    )
    return Jobs(lifecycle, store, failures)


async def test_expire_marks_every_memory_past_its_expiry_across_batches() -> None:
    due = [numbered(n, expires_at=NOW - DAY) for n in range(5)]
    kept = numbered(9, expires_at=NOW + DAY)
    j = jobs(*due, kept)
    assert await j.jobs.expire(NOW) == 5  # three batches of 2
    assert {m.id for m in j.store.of_tenant("acme") if m.status is Status.EXPIRED} == {m.id for m in due}
    assert j.store.get("acme", kept.id).status is Status.ACTIVE
    assert await j.jobs.expire(NOW) == 0  # a rerun ends where the first run did


@pytest.mark.parametrize(
    ("ended", "purged"),
    [
        (timedelta(days=8), True),  # past the grace of 7 days
        (timedelta(days=6), False),  # still in its grace: it can be restored or audited
    ],
)
async def test_purge_hard_deletes_what_ended_before_the_grace(ended: timedelta, purged: bool) -> None:
    gone = numbered(1, status=Status.DELETED, updated_at=NOW - ended)
    j = jobs(gone, numbered(2))
    assert await j.jobs.purge(NOW) == int(purged)
    assert (gone.id not in j.store.memories["acme"]) is purged
    assert numbered(2).id in j.store.memories["acme"]


async def test_demote_moves_unused_semantic_memories_to_the_episodic_tier() -> None:
    unused = numbered(1, created_at=NOW - 100 * DAY)
    used = numbered(2, created_at=NOW - 100 * DAY, last_accessed_at=NOW - DAY)
    j = jobs(unused, used)
    assert await j.jobs.demote(NOW) == 1
    demoted = j.store.get("acme", unused.id)
    assert demoted.tier is Tier.EPISODIC and demoted.provenance["demoted_from"] == "semantic"
    assert demoted.expires_at is not None and demoted.expires_at > NOW  # leaves after the episodic TTL
    assert j.store.get("acme", used.id).tier is Tier.SEMANTIC


@pytest.mark.parametrize(("quota", "evicted"), [(0, 0), (2, 2), (4, 0)])  # 0: no quota
async def test_evict_brings_a_tenant_over_its_quota_back_to_it(quota: int, evicted: int) -> None:
    j = jobs(*(numbered(n, confidence=0.8 + n / 100) for n in range(4)), quota=quota)
    assert await j.jobs.evict(NOW) == evicted
    live = [m for m in j.store.of_tenant("acme") if m.status is Status.ACTIVE]
    assert len(live) == 4 - evicted
    assert all(m.provenance.get("deleted_by") == "quota" for m in j.store.of_tenant("acme") if m not in live)


def visit(n: int, building: str) -> Memory:
    return numbered(
        n,
        tier=Tier.EPISODIC,
        kind=Kind.EVENT,
        intent="visit_office",
        entities={"building": building},
        content=f"Visited the office in building {building}",
        created_at=NOW - (10 - n) * DAY,
    )


async def test_patterns_abstracts_a_habit_from_repeated_episodes_once() -> None:
    j = jobs(*(visit(n, "A") for n in range(3)), visit(3, "B"))
    assert await j.jobs.patterns(NOW) == 1
    (habit,) = [m for m in j.store.of_tenant("acme") if m.tier is Tier.SEMANTIC]
    assert habit.derived_from == tuple(sorted(visit(n, "A").id for n in range(3)))
    assert habit.provenance["job"] == "patterns" and habit.provenance["support"] == 3
    assert await j.jobs.patterns(NOW) == 0  # its idempotency key: a rerun writes nothing
    assert not j.failures.failures
