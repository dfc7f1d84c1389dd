"""The vector searches of held subjects (domain/scope_index.py), off the event loop and batched.

An exact search multiplies the subject's whole matrix by the query: for 10k memories of 384 dimensions,
~1.1 ms of one core reading 15 MB from memory, a third of what a recall costs the server in Python. Run
on the event loop, it holds every other call on the server for that long. Here it runs on a thread of
its own (BLAS releases the GIL, so the loop goes on with other recalls on the other core), and the
searches of one matrix that arrive while a product runs wait for the next one and share it: the more
recalls queue, the less each costs (`nearest_slots` reads the matrix once for all of them). A recall
alone pays the hand-off to the thread (tens of microseconds) and nothing else; a small matrix, whose
product costs less than that, is searched in place.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from hindsight_server.domain.model import VectorSpace
from hindsight_server.domain.scope_index import NearestAsk, ScopeIndex, Scored, nearest_slots
from hindsight_server.domain.vectors import FloatVector

__all__ = ["VectorSearches"]

# Below this many numbers in the matrix (~1,300 memories of 384 dimensions: ~0.15 ms of product) the
# hand-off to the thread and back costs about what it saves.
OFF_LOOP_FROM = 500_000

Found = list[tuple[npt.NDArray[np.intp], npt.NDArray[np.float64]]]


@dataclass(slots=True)
class _Batch:
    asks: list[NearestAsk] = field(default_factory=list)
    done: asyncio.Future[Found] = field(default_factory=lambda: asyncio.get_running_loop().create_future())


class VectorSearches:
    """One per server: a thread for the products, and the searches waiting for each matrix."""

    def __init__(self, *, off_loop_from: int = OFF_LOOP_FROM) -> None:
        self._off_loop_from = off_loop_from
        # One thread: products of different matrices queue rather than split the cores the database
        # and the inference tier also need; a batch waiting on one grows meanwhile.
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hindsight-vectors")
        self._waiting: dict[tuple[ScopeIndex, VectorSpace], _Batch] = {}
        self._running: dict[tuple[ScopeIndex, VectorSpace], asyncio.Task[None]] = {}
        self.searches = self.passes = 0

    async def nearest(
        self,
        index: ScopeIndex,
        visible: npt.NDArray[np.bool_],
        space: VectorSpace,
        query: FloatVector,
        limit: int,
        *,
        without: VectorSpace | None = None,
    ) -> list[Scored]:
        """The `limit` visible memories nearest to `query` by cosine in `space`, nearest first (exact;
        ScopeIndex.nearest_ask), computed with the other searches of the same matrix waiting."""
        ask = index.nearest_ask(visible, space, query, limit, without=without)
        if ask is None:
            return []
        self.searches += 1
        if index.matrix(space)[0].size < self._off_loop_from:
            self.passes += 1
            return index.searched(space, ask)
        key = (index, space)
        batch = self._waiting.get(key)
        if batch is None:
            batch = self._waiting[key] = _Batch()
        position = len(batch.asks)
        batch.asks.append(ask)
        running = self._running.get(key)
        if running is None or running.done():  # done: it found no batch waiting, this one is new
            self._running[key] = asyncio.ensure_future(self._drain(key))
        # Shielded: a cancelled recall leaves the product to the others waiting on it.
        shared: Found = await asyncio.shield(batch.done)
        return index.found(*shared[position])

    def close(self) -> None:
        """Ends the thread once the product it runs, if any, is done (a server's stop: no recall waits)."""
        self._thread.shutdown(wait=True, cancel_futures=True)

    async def _drain(self, key: tuple[ScopeIndex, VectorSpace]) -> None:
        """Runs the waiting batch of a matrix, then the one that gathered meanwhile, until none waits."""
        loop = asyncio.get_running_loop()
        while (batch := self._waiting.pop(key, None)) is not None:
            # The matrix as of now: every ask in the batch was made against these rows or fewer.
            matrix, norms = key[0].matrix(key[1])
            self.passes += 1
            try:
                found = await loop.run_in_executor(self._thread, nearest_slots, matrix, norms, batch.asks)
            except Exception as error:  # each waiting recall reports it
                batch.done.set_exception(error)
                batch.done.exception()  # read: a batch whose waiters were all cancelled is no leak
            else:
                batch.done.set_result(found)
        del self._running[key]  # this task's own entry: a new one starts only once this is done
