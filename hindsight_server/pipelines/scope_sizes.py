"""The scope sizes the vector channel chooses its search by (domain/search_plan.py), cached per server:
the choice needs their order of magnitude, not their exact count, so a scope (a tenant, or a subject of
it) is counted once, then recounted in the background once its count is a minute old. Only a scope's
first recall on a server waits for the count; later ones never do."""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import replace
from typing import Protocol

from hindsight_server.domain.search_plan import ScopeSize

TTL_S = 60.0
CAPACITY = 10_000  # scopes remembered; the least recently used is forgotten first

Key = tuple[str, str]  # (tenant, subject; "" for the whole tenant)


class ScopeCounter(Protocol):
    async def scope_size(self, tenant_id: str, subject: str) -> ScopeSize: ...


class ScopeSizes:
    def __init__(self, store: ScopeCounter, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._store = store
        self._clock = clock
        self._sizes: OrderedDict[Key, tuple[float, ScopeSize]] = OrderedDict()
        self._counting: dict[Key, asyncio.Task[ScopeSize]] = {}

    def forget(self, tenant_id: str) -> None:
        """The tenant's counts dropped (an erasure changed them); each is counted again on its next
        recall. Other tenants' counts stay: an erasure in one tenant cannot cool everyone's."""
        for key in [key for key in self._sizes if key[0] == tenant_id]:
            del self._sizes[key]

    async def of(self, tenant_id: str, subject: str) -> ScopeSize:
        """The scope's size: counted now the first time, else the last count (recounted in the
        background once it is TTL_S old)."""
        key = (tenant_id, subject)
        cached = self._sizes.get(key)
        if cached is None:
            # Shielded: a recall that is cancelled does not cancel the count others wait for.
            return await asyncio.shield(self._count(key))
        self._sizes.move_to_end(key)
        counted_at, size = cached
        if self._clock() - counted_at >= TTL_S:
            self._count(key)
        return size

    def note_written(self, tenant_id: str, subject: str, rows: int, without_english: int) -> None:
        """What this server just stored or embedded, added to the counts it holds (a recount can be a
        minute away; changes may be negative): an English recall skips the multilingual search while
        its scope has no memory without an English vector, and must not skip it for one written a
        moment ago. (Another server's writes are seen at the next recount.)"""
        for key in {(tenant_id, subject), (tenant_id, "")}:
            cached = self._sizes.get(key)
            if cached is not None:
                counted_at, size = cached
                # Never below 0: a count taken just after the change already holds it, and a negative
                # one would become a negative LIMIT in the vector search's quota.
                changed = replace(
                    size,
                    rows=max(0, size.rows + rows),
                    without_english=max(0, size.without_english + without_english),
                )
                self._sizes[key] = (counted_at, changed)

    def _count(self, key: Key) -> asyncio.Task[ScopeSize]:
        """The scope's count in progress, started when there is none: concurrent recalls share one."""
        task = self._counting.get(key)
        if task is None:
            task = asyncio.ensure_future(self._store.scope_size(*key))
            self._counting[key] = task
            task.add_done_callback(lambda done: self._counted(key, done))
        return task

    def _counted(self, key: Key, task: asyncio.Task[ScopeSize]) -> None:
        self._counting.pop(key, None)
        if task.cancelled() or task.exception() is not None:
            return  # the database failed: the next recall counts again (and sees the error)
        self._sizes[key] = (self._clock(), task.result())
        self._sizes.move_to_end(key)
        while len(self._sizes) > CAPACITY:
            self._sizes.popitem(last=False)
