"""Held subjects' vector searches off the event loop, concurrent ones sharing a pass over the matrix
(pipelines/vector_searches.py): each finds what the index's own search finds."""

from __future__ import annotations

import asyncio
import threading
from datetime import UTC, datetime

import numpy as np
import numpy.typing as npt

from hindsight_server.domain.model import Scope, Status, VectorSpace
from hindsight_server.domain.scope_index import IndexedMemory, ScopeIndex, Scored
from hindsight_server.pipelines.vector_searches import VectorSearches
from tests.domain.builders import nearest, numbered

NOW = datetime(2024, 3, 15, 12, tzinfo=UTC)
EN = VectorSpace.ENGLISH


def _index(memories: int, seed: int = 1) -> ScopeIndex:
    rng = np.random.default_rng(seed)
    index = ScopeIndex("acme", "user-7", {EN: 16})
    index.upsert(
        IndexedMemory(
            numbered(n, status=Status.DELETED if n % 5 == 0 else Status.ACTIVE),
            {EN: rng.normal(size=16).astype(np.float32)},
        )
        for n in range(1, memories + 1)
    )
    return index


def _queries(count: int) -> list[npt.NDArray[np.float32]]:
    rng = np.random.default_rng(99)
    return [rng.normal(size=16).astype(np.float32) for _ in range(count)]


def _ids(found: list[Scored] | BaseException) -> list[str]:
    assert isinstance(found, list)
    return [s.memory.id for s in found]


async def test_concurrent_searches_share_one_pass_and_each_finds_its_own_nearest() -> None:
    index, searches = _index(600), VectorSearches(off_loop_from=0)
    visible = index.visible(Scope(tenant_id="acme", now=NOW, subject="user-7"))
    queries = _queries(6)
    limits = [1, 3, 10, 50, 600, 7]
    found = await asyncio.gather(
        *(searches.nearest(index, visible, EN, q, k) for q, k in zip(queries, limits, strict=True))
    )
    for got, query, limit in zip(found, queries, limits, strict=True):
        assert _ids(got) == _ids(nearest(index, visible, EN, query, limit))
    assert [len(got) for got in found] == [1, 3, 10, 50, 480, 7]  # every 5th is deleted
    assert (searches.searches, searches.passes) == (6, 1)  # all six asked before the first pass began
    again = await searches.nearest(index, visible, EN, queries[0], 3)  # a new pass once that one ended
    assert _ids(again) == _ids(nearest(index, visible, EN, queries[0], 3))
    assert (searches.searches, searches.passes) == (7, 2)


async def test_a_cancelled_search_leaves_the_pass_to_the_others() -> None:
    index, searches = _index(300), VectorSearches(off_loop_from=0)
    visible = index.visible(Scope(tenant_id="acme", now=NOW, subject="user-7"))
    queries = _queries(3)
    tasks = [asyncio.ensure_future(searches.nearest(index, visible, EN, q, 5)) for q in queries]
    await asyncio.sleep(0)  # all three wait on the same pass
    tasks[1].cancel()
    first, cancelled, third = await asyncio.gather(*tasks, return_exceptions=True)
    assert isinstance(cancelled, asyncio.CancelledError)
    assert _ids(first) == _ids(nearest(index, visible, EN, queries[0], 5))
    assert _ids(third) == _ids(nearest(index, visible, EN, queries[2], 5))


async def test_a_memory_changed_during_the_pass_is_left_out_and_small_matrices_are_searched_in_place() -> (
    None
):
    index, searches = _index(200), VectorSearches(off_loop_from=0)
    visible = index.visible(Scope(tenant_id="acme", now=NOW, subject="user-7"))
    (query,) = _queries(1)
    before = nearest(index, visible, EN, query, 4)
    search = asyncio.ensure_future(searches.nearest(index, visible, EN, query, 4))
    await asyncio.sleep(0)  # asked; the pass runs on the thread
    index.remove([before[0].memory.id])  # another recall's look: the nearest memory was deleted
    assert _ids(await search) == _ids(before[1:])

    in_place = VectorSearches()  # 200 x 16 numbers: under the hand-off's cost
    assert _ids(await in_place.nearest(index, visible, EN, query, 3)) == _ids(before[1:4])
    assert (in_place.searches, in_place.passes) == (1, 1)
    nothing = await in_place.nearest(index, visible, EN, np.zeros(16, dtype=np.float32), 3)
    assert nothing == [] and in_place.searches == 1  # a zero query finds nothing and asks nothing


async def test_close_ends_the_searches_thread() -> None:
    index, searches = _index(50), VectorSearches(off_loop_from=0)
    visible = index.visible(Scope(tenant_id="acme", now=NOW, subject="user-7"))
    (query,) = _queries(1)
    assert await searches.nearest(index, visible, EN, query, 3)  # ran on the thread
    threads = {t for t in threading.enumerate() if t.name.startswith("hindsight-vectors")}
    assert threads
    searches.close()
    assert not any(t.is_alive() for t in threads)
