"""Which subjects a server holds, and how it keeps them fresh and within bounds (pipelines/hot_scopes.py),
over an in-memory ScopeIndexStore whose looks a test can hold back or fail. The real statements and
their freshness are tests/store/test_scope_index.py's."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from hindsight_server.domain.errors import Unavailable
from hindsight_server.domain.model import Scope, VectorSpace
from hindsight_server.domain.scope_index import IndexedMemory, ScopeChanges, ScopeIndex
from hindsight_server.pipelines.hot_scopes import HotScopes, HotScopeSettings
from tests.domain.builders import numbered
from tests.support.fakes.clock import FakeClock

NOW = datetime(2024, 3, 15, 12, tzinfo=UTC)
DIMENSIONS = {VectorSpace.MULTILINGUAL: 4}


@dataclass
class _Rows:
    """Subjects' memories with a transaction counter: each change is stamped with the next id."""

    memories: dict[tuple[str, str], dict[str, tuple[int, IndexedMemory]]] = field(default_factory=dict)
    xid: int = 1
    removed_at: int = 0
    looks: int = 0
    pages: int = 0
    counts: int = 0  # scopes counted before a load
    gate: asyncio.Event | None = None  # a look waits for it when set
    failing: bool = False

    def write(self, tenant: str, subject: str, n: int, text: str = "") -> None:
        memory = numbered(n, tenant_id=tenant, subject=subject, content=text or f"fact number {n}")
        vector = np.ones(4, dtype=np.float32)
        self.memories.setdefault((tenant, subject), {})[memory.id] = (
            self.xid,
            IndexedMemory(memory, {VectorSpace.MULTILINGUAL: vector}),
        )
        self.xid += 1

    def remove(self) -> None:
        """A memory of the tenant taken away by the next transaction."""
        self.removed_at = self.xid
        self.xid += 1

    def _of(self, tenant: str, subject: str) -> dict[str, tuple[int, IndexedMemory]]:
        """The scope's memories: the subject's, or for "" every subject's of the tenant."""
        return {
            memory_id: held
            for (t, s), memories in self.memories.items()
            if t == tenant and subject in ("", s)
            for memory_id, held in memories.items()
        }

    async def horizon(self) -> int:
        return self.xid

    async def scope_rows(self, tenant_id: str, subject: str, limit: int) -> int:
        self.counts += 1
        return min(len(self._of(tenant_id, subject)), limit)

    async def subject_page(
        self, tenant_id: str, subject: str, after: IndexedMemory | None, limit: int
    ) -> list[IndexedMemory]:
        self.pages += 1
        rows = sorted((row for _, row in self._of(tenant_id, subject).values()), key=lambda r: r.memory.id)
        start = (
            0 if after is None else next(i for i, r in enumerate(rows) if r.memory.id == after.memory.id) + 1
        )
        return rows[start : start + limit]

    async def changes(self, tenant_id: str, subject: str, since: int, limit: int) -> ScopeChanges:
        self.looks += 1
        horizon = self.xid  # taken when the look begins, as a snapshot is
        if self.gate is not None:
            await self.gate.wait()
        if self.failing:
            raise Unavailable("the database is away")
        changed = [i for i, (xid, _) in self._of(tenant_id, subject).items() if xid >= since]
        return ScopeChanges(horizon, self.removed_at >= since, changed[:limit])

    async def indexed(self, tenant_id: str, memory_ids: Sequence[str]) -> list[IndexedMemory]:
        every = {
            i: row for (t, _), rows in self.memories.items() if t == tenant_id for i, (_, row) in rows.items()
        }
        return [every[i] for i in memory_ids if i in every]


def _hot(rows: _Rows, clock: FakeClock | None = None, **settings: object) -> HotScopes:
    clock = clock or FakeClock(NOW)
    return HotScopes(rows, replace(HotScopeSettings(), **settings), DIMENSIONS, clock=clock.monotonic)  # type: ignore[arg-type]


def _scope(subject: str = "ann", tenant: str = "acme", **fields: object) -> Scope:
    return Scope(tenant_id=tenant, now=NOW, subject=subject, **fields)  # type: ignore[arg-type]


async def _one_held() -> tuple[_Rows, HotScopes]:
    """A tenant of one memory, held whole."""
    rows = _Rows()
    rows.write("acme", "ann", 1)
    hot = _hot(rows, recalls_to_load=1)
    assert await hot.warm("acme", "")
    return rows, hot


async def _settled() -> None:
    """Lets the background loads finish. Each waits out its pace in real time (the fake clock stands
    still: 50 us a memory of the load before at the default rate), so yielding alone can come too
    soon on a busy machine."""
    for _ in range(20):
        await asyncio.sleep(0.001)


async def test_a_subject_is_held_once_recalled_often_enough_within_the_window() -> None:
    rows, clock = _Rows(), FakeClock(NOW)
    rows.write("acme", "ann", 1)
    hot = _hot(rows, clock, recalls_to_load=3, window_s=60)
    assert await hot.index_for(_scope()) is None
    clock.advance(timedelta(seconds=61))  # the first recall falls out of the window
    assert await hot.index_for(_scope()) is None
    assert await hot.index_for(_scope()) is None
    await _settled()
    assert rows.pages == 0
    assert await hot.index_for(_scope()) is None  # the third within 60 s: loaded in the background
    await _settled()
    index = await hot.index_for(_scope())
    assert index is not None and numbered(1).id in index
    assert hot.figures.held == 1 and hot.figures.loads == 1


async def test_a_recall_into_the_past_reads_the_database() -> None:
    rows = _Rows()
    hot = _hot(rows, recalls_to_load=1)
    for _ in range(3):
        assert await hot.index_for(_scope(as_of=NOW - timedelta(days=1))) is None
    await _settled()
    assert rows.pages == 0


async def test_a_small_tenant_is_held_whole_and_serves_every_subject_and_none() -> None:
    rows = _Rows()
    rows.write("acme", "ann", 1)
    rows.write("acme", "bob", 2)
    hot = _hot(rows, recalls_to_load=2)
    assert await hot.index_for(_scope("ann")) is None
    assert await hot.index_for(_scope("")) is None  # the tenant's second recall: read in whole
    await _settled()
    assert hot.figures.held == 1 and hot.figures.loads == 1
    whole = await hot.index_for(_scope("bob"))
    assert whole is not None and whole.subject == ""
    seen = {i for i in whole.ids() if whole.visible(_scope("bob"))[whole.ids().index(i)]}
    assert seen == {numbered(2).id}  # a subject's recall sees its subject only
    assert bool(whole.visible(_scope("")).all()) and await hot.index_for(_scope("")) is whole


async def test_a_tenant_too_large_to_hold_whole_holds_its_subjects_instead() -> None:
    rows = _Rows()
    for n in range(1, 5):
        rows.write("acme", "ann" if n % 2 else "bob", n)
    hot = _hot(rows, recalls_to_load=2, max_memories=3)
    await hot.index_for(_scope("ann"))
    await hot.index_for(_scope("ann"))  # the tenant is hot: counted (4 > 3), not read
    await _settled()
    assert rows.pages == 0 and hot.figures.held == 0
    await hot.index_for(_scope("ann"))
    await hot.index_for(_scope("ann"))  # now its subject is counted, and held (2 memories)
    await _settled()
    index = await hot.index_for(_scope("ann"))
    assert (
        index is not None
        and index.subject == "ann"
        and sorted(index.ids()) == [numbered(1).id, numbered(3).id]
    )
    assert await hot.index_for(_scope("")) is None  # a recall of no subject reads the database


async def test_a_subject_over_the_limit_is_not_held_until_the_retry() -> None:
    rows, clock = _Rows(), FakeClock(NOW)
    for n in range(1, 8):
        rows.write("acme", "ann", n)
    hot = _hot(rows, clock, recalls_to_load=1, max_memories=5, retry_after_s=300)
    await hot.index_for(_scope())
    await _settled()
    assert await hot.index_for(_scope()) is None and hot.figures.held == 0
    await _settled()
    pages, counts = rows.pages, rows.counts
    assert counts == 2  # the tenant, then its subject: each counted, neither read (7 > 5)
    clock.advance(timedelta(seconds=100))
    await hot.index_for(_scope())
    await _settled()
    assert rows.pages == pages  # not tried again before retry_after_s
    assert rows.counts == counts
    clock.advance(timedelta(seconds=201))
    await hot.index_for(_scope())
    await _settled()
    assert rows.counts > counts and rows.pages == pages  # tried again after it: counted, still not read


async def test_a_scope_that_may_not_load_keeps_no_more_recall_times_than_decide() -> None:
    """A tenant recalling without end while too large to hold: each recall's count costs the same."""
    rows = _Rows()
    for n in range(1, 8):
        rows.write("acme", "ann", n)
    hot = _hot(rows, recalls_to_load=3, max_memories=5)
    for _ in range(5_000):
        await hot.index_for(_scope())
    await _settled()
    assert hot.figures.held == 0
    kept = [len(entry.recalls) for entry in hot._entries.values()]  # the counts' own state
    assert kept and max(kept) <= 3


async def test_concurrent_recalls_share_a_look_that_began_after_them() -> None:
    rows, hot = await _one_held()
    rows.gate = asyncio.Event()
    recalls = [asyncio.ensure_future(hot.index_for(_scope())) for _ in range(8)]
    await _settled()
    assert rows.looks == 1  # the first recall's look is in flight; the seven others began after it
    rows.gate.set()
    held = await asyncio.gather(*recalls)
    assert all(index is not None for index in held)
    assert rows.looks == 2  # so they wait for one more look, and share it


async def test_a_write_acknowledged_before_a_recall_is_seen_even_while_an_older_look_is_in_flight() -> None:
    rows, hot = await _one_held()
    rows.gate = asyncio.Event()
    early = asyncio.ensure_future(hot.index_for(_scope()))
    await _settled()  # its look took its horizon before the write below
    rows.write("acme", "ann", 2, "written after the look began")
    late = asyncio.ensure_future(hot.index_for(_scope()))
    await _settled()
    rows.gate.set()
    await early
    index = await late
    assert index is not None and numbered(2).id in index


async def test_a_removal_or_a_failed_look_sends_recalls_to_the_database() -> None:
    rows, hot = await _one_held()
    rows.remove()
    assert await hot.index_for(_scope()) is None  # a memory left: built again in the background
    await _settled()
    assert await hot.index_for(_scope()) is not None
    rows.failing = True
    assert await hot.index_for(_scope()) is None
    assert hot.figures.held == 0


async def test_memory_is_bounded_per_tenant_and_per_server_least_recently_used_first() -> None:
    rows = _Rows()
    for tenant, subject in [("a", "s1"), ("a", "s2"), ("b", "s1"), ("c", "s1")]:
        for n in range(1, 40):
            rows.write(tenant, subject, n, "x" * 2_000)
    one = _hot(rows, recalls_to_load=1, memory_mb=1).figures  # nothing held yet
    assert one.bytes == 0
    probe = _hot(rows, recalls_to_load=1)
    await probe.warm("a", "s1")
    size = probe.figures.bytes
    # Room for two subjects on the server, one per tenant.
    budget_mb = 2.5 * size / 1024 / 1024
    hot = _hot(rows, recalls_to_load=100, memory_mb=budget_mb, tenant_share=0.5)  # held by warm() only
    assert await hot.warm("a", "s1")
    assert await hot.warm("a", "s2")  # tenant a's share holds one: s1, least recently used, goes
    assert await hot.index_for(_scope("s1", "a")) is None
    assert await hot.index_for(_scope("s2", "a")) is not None
    assert await hot.warm("b", "s1")
    assert await hot.warm("c", "s1")  # the server's budget holds two: a's s2 goes
    assert await hot.index_for(_scope("s2", "a")) is None
    assert hot.figures.held == 2 and hot.figures.bytes <= budget_mb * 1024 * 1024


async def test_a_recall_arriving_as_a_look_ends_starts_its_own() -> None:
    """The look has finished but its done-callback has not run yet: the recall must not wait on it
    again and again (it would never yield to the loop, and the server would hang)."""
    rows, hot = await _one_held()
    rows.gate, go = asyncio.Event(), asyncio.Event()
    first = asyncio.ensure_future(hot.index_for(_scope()))
    await _settled()
    assert rows.looks == 1  # its look waits at the gate
    rows.write("acme", "ann", 2)

    async def arriving() -> ScopeIndex | None:
        await go.wait()
        return await hot.index_for(_scope())

    second = asyncio.ensure_future(arriving())
    await asyncio.sleep(0)
    # Both wake on the same step, the look first: it ends, and the recall runs before its callbacks.
    rows.gate.set()
    go.set()
    held = await asyncio.gather(first, second)
    assert all(index is not None for index in held) and numbered(2).id in held[1]  # type: ignore[operator]


async def test_a_subject_that_grows_past_the_limit_while_held_is_let_go() -> None:
    rows = _Rows()
    rows.write("acme", "ann", 1)
    hot = _hot(rows, recalls_to_load=100, max_memories=5)  # held by warm() only
    assert await hot.warm("acme", "ann")
    for n in range(2, 5):
        rows.write("acme", "ann", n)
    assert await hot.index_for(_scope()) is not None  # 4: still within the limit
    for n in range(5, 8):
        rows.write("acme", "ann", n)
    assert await hot.index_for(_scope()) is None  # 7: its recalls read the database
    assert hot.figures.held == 0


async def test_a_subject_not_recalled_for_idle_s_is_let_go() -> None:
    rows, clock = _Rows(), FakeClock(NOW)
    rows.write("acme", "ann", 1)
    rows.write("acme", "bob", 2)
    hot = _hot(rows, clock, recalls_to_load=100, idle_s=600)  # held by warm() only
    assert await hot.warm("acme", "ann") and await hot.warm("acme", "bob")
    clock.advance(timedelta(seconds=400))
    assert await hot.index_for(_scope("bob")) is not None
    clock.advance(timedelta(seconds=300))  # ann: 700 s without a recall; bob: 300 s
    assert await hot.index_for(_scope("bob")) is not None
    assert hot.figures.held == 1  # ann's index (and whatever it held) is gone


async def test_a_flood_of_subjects_pushes_out_counts_not_the_subjects_held(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("hindsight_server.pipelines.hot_scopes._CAPACITY", 3)
    rows = _Rows()
    rows.write("acme", "ann", 1)
    hot = _hot(rows, recalls_to_load=3)
    assert await hot.warm("acme", "ann")  # held, then the least recently used of all
    for n in range(10):
        await hot.index_for(_scope("ann", f"flood-{n}"))  # counted once each, never held
    assert await hot.index_for(_scope()) is not None


async def test_a_scope_with_many_dead_slots_is_read_in_again_while_its_index_serves() -> None:
    """Every change leaves a dead slot that each search still reads: past a quarter of the live ones
    (and 1,000), the scope is read in again in the background, and its recalls keep the index they had
    (fresh, by their looks) instead of reading the database meanwhile."""
    rows = _Rows()
    for n in range(2_000):
        rows.write("acme", "ann", n)
    hot = _hot(rows, recalls_to_load=1, max_changes=5_000, load_memories_per_s=10_000_000)
    assert await hot.warm("acme", "")
    first = await hot.index_for(_scope())
    assert first is not None
    for n in range(999):
        rows.write("acme", "ann", n, f"fact number {n}, said again")
    assert await hot.index_for(_scope()) is first and first.dead == 999
    await _settled()
    assert await hot.index_for(_scope()) is first  # not past 1,000 dead slots: no load
    rows.write("acme", "ann", 1_000, "fact number 1000, said again")
    rows.write("acme", "ann", 1_001, "fact number 1001, said again")
    served = await hot.index_for(_scope())
    assert served is first and first.dead == 1_001  # served on while read in again
    await _settled()
    again = await hot.index_for(_scope())
    assert again is not None and again is not first
    assert (again.live, again.dead) == (2_000, 0)
    assert numbered(1_001).id in again
