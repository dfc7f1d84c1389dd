"""The tenants and subjects a server recalls often, held in its own memory (domain/scope_index.py), kept
fresh.

Every recall counts towards its tenant: a tenant recalled `recalls_to_load` times within `window_s` is
read in whole when it holds at most `max_memories` (the subject ""), and then serves all its recalls,
with a subject or without. A larger tenant is not held whole; a subject of it recalled as often is held
instead. A scope is read in the background, a page at a time at a bounded pace, while its recalls go on
reading the database. Once held, every recall first asks the database what changed in the scope since
the server last looked (one statement, on the tenant's change index) and applies it, so a recall sees
every write acknowledged before it began, on whichever server it was made. Concurrent recalls of one
scope share that look when it began after they did.

Bounds, so one tenant cannot take a server's memory or CPU: the indexes together hold at most
`memory_mb`, one tenant's at most `tenant_share` of it (the least recently used go first); a scope
above `max_memories` is not held (its recalls walk the database's HNSW graph, cheaper than an exact
search of that many vectors here); loads run one at a time at `load_memories_per_s`; a look that finds
more than `max_changes` changed memories, or a memory taken away (migration 0022), builds the scope
again in the background (its recalls read the database meanwhile); a scope whose dead slots (memories
changed since it was read in) pass a quarter of its live ones is read in again in the background while
its index serves on, and swapped for it; a scope not recalled for `idle_s` is let go.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from hindsight_server.domain.errors import HindsightError
from hindsight_server.domain.model import Scope, VectorSpace
from hindsight_server.domain.scope_index import ScopeIndex
from hindsight_server.pipelines.ports import ScopeIndexStore
from hindsight_server.pipelines.vector_searches import VectorSearches
from hindsight_server.telemetry.status import HotScopeFigures

__all__ = ["HotScopeSettings", "HotScopes"]

log = logging.getLogger(__name__)

Key = tuple[str, str]  # (tenant, subject): the subject "" is the whole tenant
_CAPACITY = 10_000  # scopes whose recent recalls are counted; the least recently seen forgotten first
_MIN_DEAD_TO_COMPACT = 1_000  # a small scope's dead slots cost less than reading it in again


@dataclass(frozen=True, slots=True)
class HotScopeSettings:
    enabled: bool = True
    memory_mb: float = 256
    tenant_share: float = 0.5
    max_memories: int = 20_000
    recalls_to_load: int = 3
    window_s: float = 60.0
    load_memories_per_s: int = 20_000
    page_size: int = 100
    max_changes: int = 1_000
    # After a failed or oversized load, the subject's recalls read the database this long before the
    # next try.
    retry_after_s: float = 300.0
    # A subject not recalled this long is let go, so what a server holds of a memory erased through
    # another server does not stay in its memory past it.
    idle_s: float = 600.0


@dataclass(slots=True)
class _Entry:
    index: ScopeIndex | None = None
    since: int = 0  # the horizon the index has seen every change below
    loading: asyncio.Task[None] | None = None
    refreshing: asyncio.Task[None] | None = None
    refresh_ticket: int = 0  # when the refresh in flight (or the last one) began
    recalls: list[float] = field(default_factory=list)  # the last recall times while not held
    used_at: float = 0.0  # its last recall (monotonic)
    not_before: float = 0.0  # no load before this (monotonic)
    budgeted_bytes: int = 0  # the index's size when the budgets were last checked


def _refreshed(entry: _Entry, task: asyncio.Task[None]) -> None:
    """A look ended: the next recall starts its own. Its error is each waiter's to handle (read here
    too, so a look whose waiters were all cancelled is not reported as an error nobody saw)."""
    entry.refreshing = None
    if not task.cancelled():
        task.exception()


class HotScopes:
    def __init__(
        self,
        rows: ScopeIndexStore,
        settings: HotScopeSettings,
        dimensions: Mapping[VectorSpace, int],
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._rows = rows
        self._settings = settings
        self._dimensions = dict(dimensions)
        self._clock = clock
        self._entries: OrderedDict[Key, _Entry] = OrderedDict()  # least recently used first
        self._tickets = itertools.count(1)
        self._load_lock = asyncio.Lock()
        self._next_load_at = 0.0
        self._loads = self._served = self._missed = 0
        self.vector_searches = VectorSearches()  # the held subjects' vector searches run there

    async def index_for(self, scope: Scope) -> ScopeIndex | None:
        """The index of the whole tenant, else of the subject, fresh as of now, when one is held; None
        (read the database) otherwise."""
        if not self._settings.enabled or scope.as_of is not None:
            return None
        ticket = next(self._tickets)
        self._let_idle_go()
        whole_key = (scope.tenant_id, "")
        whole = self._entries.get(whole_key)
        if whole is not None and whole.index is not None:
            return await self._served_from(whole_key, whole, ticket)
        self._noted(whole_key, whole)
        if scope.subject:
            key = (scope.tenant_id, scope.subject)
            entry = self._entries.get(key)
            if entry is not None and entry.index is not None:
                return await self._served_from(key, entry, ticket)
            whole = self._entries.get(whole_key)
            # Its subjects are counted only once the tenant proved too large to hold whole (or its
            # load failed): else both would be read in, and the subject's index never used.
            if whole is None or (whole.loading is None and whole.not_before > self._clock()):
                self._noted(key, entry)
        self._missed += 1
        return None

    async def _served_from(self, key: Key, entry: _Entry, ticket: int) -> ScopeIndex | None:
        self._entries.move_to_end(key)
        entry.used_at = self._clock()
        try:
            await self._fresh(key, entry, ticket)
        except HindsightError:
            # The database failed under the look: forget the index (built again once the scope is hot
            # again) and let the recall read the database, which reports the error.
            self._drop(key)
            return None
        if entry.index is None:
            self._missed += 1
            return None
        self._served += 1
        return entry.index

    async def warm(self, tenant_id: str, subject: str) -> bool:
        """Reads a subject in now, whether hot or not, within the same bounds; whether it is held (the
        tests' way to hold a subject without waiting on a background load)."""
        key = (tenant_id, subject)
        entry = self._entries.get(key)
        if entry is None:
            entry = self._entries[key] = _Entry(used_at=self._clock())
        if entry.index is None:
            self._start_load(key, entry)
            if entry.loading is not None:
                await asyncio.shield(entry.loading)
        return entry.index is not None

    def forget(self, tenant_id: str) -> None:
        """Drops the tenant's indexes (an erasure on this server removed some of its memories)."""
        for key in [key for key in self._entries if key[0] == tenant_id]:
            self._drop(key)

    @property
    def figures(self) -> HotScopeFigures:
        held = [entry.index for entry in self._entries.values() if entry.index is not None]
        return HotScopeFigures(
            held=len(held),
            memories=sum(index.live for index in held),
            bytes=sum(index.nbytes for index in held),
            loads=self._loads,
            served=self._served,
            missed=self._missed,
            vector_searches=self.vector_searches.searches,
            vector_passes=self.vector_searches.passes,
        )

    # -- keeping an index fresh ----------------------------------------------------------------------

    async def _fresh(self, key: Key, entry: _Entry, ticket: int) -> None:
        """Returns once a look that began after `ticket` was applied (this recall's, or one it shared)."""
        while entry.index is not None:
            task = entry.refreshing
            # A look that ended (its callback not run yet) and began before this recall is of no use:
            # start one (awaiting it again would return at once, round and round, never yielding).
            if task is None or (task.done() and entry.refresh_ticket <= ticket):
                entry.refresh_ticket = next(self._tickets)
                task = entry.refreshing = asyncio.ensure_future(self._refresh(key, entry))
                task.add_done_callback(functools.partial(_refreshed, entry))
            began = entry.refresh_ticket
            # Shielded: a recall that is cancelled does not cancel the look others wait for.
            await asyncio.shield(task)
            if began > ticket:
                return

    async def _refresh(self, key: Key, entry: _Entry) -> None:
        index = entry.index
        if index is None:
            return
        changes = await self._rows.changes(*key, entry.since, self._settings.max_changes + 1)
        if changes.removed or len(changes.changed) > self._settings.max_changes:
            self._rebuild(key, entry)
            return
        fetched = await self._rows.indexed(key[0], changes.changed) if changes.changed else []
        if entry.index is not index:
            return  # dropped or rebuilt meanwhile: what was read belongs to the old index
        entry.since = changes.horizon
        if not changes.changed:
            return  # most looks: nothing to apply, and no size to check again
        index.remove(changes.changed)  # moved to another subject, or gone, when not fetched back
        index.upsert(row for row in fetched if key[1] in ("", row.memory.subject))
        if index.live > self._settings.max_memories:
            entry.index, entry.not_before = None, self._clock() + self._settings.retry_after_s
        elif index.dead > max(index.live // 4, _MIN_DEAD_TO_COMPACT):
            # Dead slots cost every search (an exact search reads them too). Read in again in the
            # background while this index, kept fresh by the looks, serves on: swapped in once read.
            self._start_load(key, entry)
        elif index.nbytes > entry.budgeted_bytes * 1.1:
            # It grew by a tenth since the budgets were last checked: they hold after writes too.
            entry.budgeted_bytes = index.nbytes
            self._evict(key)

    def _rebuild(self, key: Key, entry: _Entry) -> None:
        """Drops the index and builds it again in the background; recalls read the database meanwhile."""
        entry.index = None
        entry.not_before = 0.0
        self._start_load(key, entry)

    # -- loading -------------------------------------------------------------------------------------

    def _noted(self, key: Key, entry: _Entry | None) -> None:
        """Counts a recall of a scope not held, and starts its load once it is hot."""
        if entry is None:
            entry = self._entries[key] = _Entry()
            if len(self._entries) > _CAPACITY:
                self._drop(self._least_needed(sparing=key))
        self._entries.move_to_end(key)
        now = entry.used_at = self._clock()
        # Only the last recalls_to_load times decide, so no more are kept: a scope recalled a thousand
        # times a second while it may not load (too large, or its retry not due) costs no more per recall.
        recent = [t for t in entry.recalls if now - t < self._settings.window_s]
        entry.recalls = [*recent, now][-self._settings.recalls_to_load :]
        if len(entry.recalls) >= self._settings.recalls_to_load and now >= entry.not_before:
            self._start_load(key, entry)

    def _start_load(self, key: Key, entry: _Entry) -> None:
        if entry.loading is None:
            entry.recalls = []
            entry.loading = asyncio.ensure_future(self._load(key, entry))
            entry.loading.add_done_callback(lambda _: setattr(entry, "loading", None))

    async def _load(self, key: Key, entry: _Entry) -> None:
        settings = self._settings
        async with self._load_lock:  # one load at a time on a server
            await asyncio.sleep(max(0.0, self._next_load_at - self._clock()))
            started = self._clock()
            read = 0  # memories read in, for the pace
            scope = "a subject" if key[1] else "the memories"
            try:
                # Counted first (by its index, at most one row past the limit): a tenant too large to
                # hold whole is found without reading its memories.
                rows = await self._rows.scope_rows(*key, settings.max_memories + 1)
                index = ScopeIndex(
                    *key, self._dimensions, expected=rows if rows <= settings.max_memories else 0
                )
                since = await self._rows.horizon()
                after = None
                while rows <= settings.max_memories:
                    page = await self._rows.subject_page(*key, after, settings.page_size)
                    index.upsert(page)
                    rows = read = index.live
                    if len(page) < settings.page_size:
                        break
                    after = page[-1]
                    await asyncio.sleep(0)  # a page at a time: other calls go on between them
                if rows > settings.max_memories:
                    log.info(
                        "%s of tenant %s: over %d memories, not held", scope, key[0], settings.max_memories
                    )
                    entry.not_before = self._clock() + settings.retry_after_s
                    return
            except Exception as error:  # a background load: its recalls read the database meanwhile
                log.warning("could not hold %s of tenant %s: %s", scope, key[0], error)
                entry.not_before = self._clock() + settings.retry_after_s
                return
            finally:
                # The pace: the next load waits as long as this one's memories take at the set rate.
                self._next_load_at = started + read / settings.load_memories_per_s
        if self._entries.get(key) is not entry:
            return  # forgotten while it loaded
        entry.index, entry.since, entry.budgeted_bytes = index, since, index.nbytes
        self._loads += 1
        if not key[1]:  # the whole tenant: its subjects' indexes are of no more use
            for held in [k for k in self._entries if k[0] == key[0] and k[1]]:
                self._drop(held)
        self._evict(key)

    def _least_needed(self, *, sparing: Key) -> Key:
        """The entry to forget when too many subjects are counted (never `sparing`, the one just
        counted): the least recently seen that is only counted (a tenant recalling thousands of subjects
        once each pushes out counts, not the indexes other tenants hold), else the least recently used."""
        for key, entry in self._entries.items():  # stops at the first such: the held are few
            if key != sparing and entry.index is None and entry.loading is None:
                return key
        return next(key for key in self._entries if key != sparing)

    def _let_idle_go(self) -> None:
        """Forgets the subjects not recalled for idle_s: the least recently used are first in line, so
        this reads only the ones it forgets, and one more."""
        oldest = self._clock() - self._settings.idle_s
        while self._entries:
            key, entry = next(iter(self._entries.items()))
            if entry.used_at >= oldest or entry.loading is not None:
                return
            self._drop(key)

    def _drop(self, key: Key) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            entry.index = None
            if entry.loading is not None:
                entry.loading.cancel()

    def _evict(self, loaded: Key) -> None:
        """Forgets the least recently used indexes until the tenant's and the server's are in budget."""
        budget = self._settings.memory_mb * 1024 * 1024
        tenant_budget = budget * self._settings.tenant_share
        tenant = loaded[0]
        for owner, limit in ((tenant, tenant_budget), (None, budget)):
            held = [
                (key, entry.index.nbytes)
                for key, entry in self._entries.items()
                if entry.index is not None and (owner is None or key[0] == owner)
            ]
            total = sum(size for _, size in held)
            for key, size in held:
                if total <= limit:
                    break
                self._entries[key].index = None
                self._entries[key].not_before = self._clock() + self._settings.retry_after_s
                total -= size
