"""The scope size cache (pipelines/scope_sizes.py) on the in-memory store (tests/support/fakes): a scope
counted on its first recall only, recounted in the background once TTL_S old, concurrent first recalls
sharing one count, a failed count not kept, what this server wrote added (never below zero), a tenant's
counts forgotten alone, the least recently used scope forgotten past the capacity. tests/rpc runs it
against PostgreSQL."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import UTC, datetime

import numpy as np
import pytest

from hindsight_server.domain.errors import Unavailable
from hindsight_server.domain.model import Status, VectorSpace
from hindsight_server.domain.search_plan import ScopeSize
from hindsight_server.pipelines import scope_sizes
from hindsight_server.pipelines.scope_sizes import TTL_S, ScopeSizes
from tests.domain.builders import numbered
from tests.support.fakes.clock import FakeClock
from tests.support.fakes.memory_store import InMemoryMemoryStore

NOW = datetime(2024, 5, 1, 12, tzinfo=UTC)
VECTOR = np.ones(4, dtype=np.float32)


def store_of(
    *numbers: int, english: tuple[int, ...] = (), subject_of: dict[int, str] | None = None
) -> InMemoryMemoryStore:
    """Memories `numbers` of tenant acme with a multilingual vector, those in `english` an English one
    too."""
    store = InMemoryMemoryStore()
    for n in numbers:
        vectors = {VectorSpace.MULTILINGUAL: VECTOR} | ({VectorSpace.ENGLISH: VECTOR} if n in english else {})
        store.add(numbered(n, subject=(subject_of or {}).get(n, "user-7")), vectors)
    return store


def sizes_over(store: InMemoryMemoryStore) -> tuple[ScopeSizes, FakeClock]:
    clock = FakeClock(NOW)
    return ScopeSizes(store, clock=clock.monotonic), clock


async def settle() -> None:
    """Lets a background recount run."""
    for _ in range(3):
        await asyncio.sleep(0)


async def test_a_scope_is_counted_once_and_its_count_served_until_it_is_ttl_old() -> None:
    store = store_of(1, 2, 3, english=(1,))
    store.add(numbered(4))  # no vector: not searched
    store.add(numbered(5, status=Status.DELETED), {VectorSpace.MULTILINGUAL: VECTOR})
    sizes, clock = sizes_over(store)

    assert await sizes.of("acme", "") == ScopeSize(rows=3, without_english=2, table_rows=5)
    store.add(numbered(6), {VectorSpace.MULTILINGUAL: VECTOR})
    clock.seconds += TTL_S - 1
    assert (await sizes.of("acme", "")).rows == 3  # the count it holds
    assert store.counted == [("acme", "")]

    clock.seconds += 1
    assert (await sizes.of("acme", "")).rows == 3  # TTL_S old: served, and recounted behind it
    await settle()
    assert (await sizes.of("acme", "")).rows == 4
    assert store.counted == [("acme", ""), ("acme", "")]


async def test_a_subject_is_a_scope_of_its_own() -> None:
    store = store_of(1, 2, 3, subject_of={3: "user-8"})
    sizes, _ = sizes_over(store)
    assert ((await sizes.of("acme", "user-7")).rows, (await sizes.of("acme", "user-8")).rows) == (2, 1)
    assert ((await sizes.of("acme", "")).rows, (await sizes.of("globex", "")).rows) == (3, 0)


@dataclass
class HeldCounter:
    """A ScopeCounter whose counts wait until `released` is set: a slow database."""

    store: InMemoryMemoryStore
    released: asyncio.Event = field(default_factory=asyncio.Event)

    async def scope_size(self, tenant_id: str, subject: str) -> ScopeSize:
        await self.released.wait()
        return await self.store.scope_size(tenant_id, subject)


async def test_concurrent_first_recalls_share_one_count_that_a_cancelled_one_does_not_stop() -> None:
    store = store_of(1, 2)
    held = HeldCounter(store)
    sizes = ScopeSizes(held, clock=FakeClock(NOW).monotonic)
    waiting = [asyncio.create_task(sizes.of("acme", "")) for _ in range(3)]
    await settle()
    waiting[0].cancel()
    await settle()
    held.released.set()

    assert [(await task).rows for task in waiting[1:]] == [2, 2]
    assert waiting[0].cancelled()
    assert store.counted == [("acme", "")]


async def test_a_failed_count_reaches_the_recall_and_is_not_kept() -> None:
    store = store_of(1)
    store.failing = Unavailable("the database is unavailable; retry later")
    sizes, _ = sizes_over(store)
    with pytest.raises(Unavailable, match="retry later"):
        await sizes.of("acme", "")
    store.failing = None
    assert (await sizes.of("acme", "")).rows == 1  # counted again


async def test_a_failed_recount_keeps_the_last_count() -> None:
    store = store_of(1)
    sizes, clock = sizes_over(store)
    await sizes.of("acme", "")
    store.add(numbered(2), {VectorSpace.MULTILINGUAL: VECTOR})
    store.failing = Unavailable("the database is unavailable; retry later")
    clock.seconds += TTL_S
    assert (await sizes.of("acme", "")).rows == 1
    await settle()
    store.failing = None
    assert (await sizes.of("acme", "")).rows == 1  # still served at once, and recounted behind it
    await settle()
    assert (await sizes.of("acme", "")).rows == 2


@pytest.mark.parametrize(
    ("rows", "without_english", "tenant", "subject"),
    [
        (2, 2, ScopeSize(7, 5, 5), ScopeSize(6, 4, 5)),  # the subject's and its tenant's
        (-5, -4, ScopeSize(0, 0, 5), ScopeSize(0, 0, 5)),  # removed; a count never goes below 0
        (0, -1, ScopeSize(5, 2, 5), ScopeSize(4, 1, 5)),  # embedded in English since the count
    ],
)
async def test_what_this_server_wrote_is_added_to_the_counts_it_holds(
    rows: int, without_english: int, tenant: ScopeSize, subject: ScopeSize
) -> None:
    store = store_of(1, 2, 3, 4, 5, english=(4, 5), subject_of={3: "user-8"})
    sizes, _ = sizes_over(store)
    assert await sizes.of("acme", "") == ScopeSize(5, 3, 5)
    assert await sizes.of("acme", "user-7") == ScopeSize(4, 2, 5)

    sizes.note_written("acme", "user-7", rows, without_english)
    sizes.note_written("globex", "user-7", 7, 7)  # scopes never counted: left to their first count

    assert (await sizes.of("acme", ""), await sizes.of("acme", "user-7")) == (tenant, subject)
    assert store.counted.count(("acme", "")) == 1  # no recount: the writes were added
    assert (await sizes.of("globex", "")).rows == 0


async def test_forgetting_a_tenant_drops_its_counts_only() -> None:
    store = store_of(1, 2)
    store.add(numbered(1, tenant_id="globex"), {VectorSpace.MULTILINGUAL: VECTOR})
    sizes, _ = sizes_over(store)
    for tenant_id, subject in (("acme", ""), ("acme", "user-7"), ("globex", "")):
        await sizes.of(tenant_id, subject)

    sizes.forget("acme")
    for tenant_id, subject in (("acme", ""), ("acme", "user-7"), ("globex", "")):
        await sizes.of(tenant_id, subject)

    assert store.counted.count(("acme", "")) == 2
    assert store.counted.count(("acme", "user-7")) == 2
    assert store.counted.count(("globex", "")) == 1


async def test_past_its_capacity_the_least_recently_used_scope_is_forgotten(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(scope_sizes, "CAPACITY", 2)
    store = store_of(1)
    sizes, _ = sizes_over(store)
    await sizes.of("a", "")
    await sizes.of("b", "")
    await sizes.of("a", "")  # used again: b is now the least recent
    await sizes.of("c", "")
    await sizes.of("a", "")
    await sizes.of("b", "")
    assert store.counted == [("a", ""), ("b", ""), ("c", ""), ("b", "")]
