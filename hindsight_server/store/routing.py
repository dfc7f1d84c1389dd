"""Where a read runs: a streaming replica that is up, close behind and far enough along, or the primary.

Writes, idempotency checks and the lifecycle jobs always use the primary's pool; the reads that may run on
a replica (Recall, Get, List, History, Summarize) go through a ReadRoute. Each replica is watched
(`check_interval_s`): it must answer, be in recovery, stream from this primary's cluster (same system
identifier) and have replayed what the primary had flushed `max_lag_s` ago. The lag is measured against
the primary's own positions sampled at each check, so an idle primary never makes a replica look behind
(pg_last_xact_replay_timestamp() grows while nothing is written). A replica that fails any of these is
left out until a later check finds it well again; with none usable, reads run on the primary.

Read-your-writes: a mutating call answers with commit_position(), the primary's flushed WAL position once
its transaction has committed (with synchronous_commit on, which durability already requires, at or past
its commit record). A read carrying one runs on a replica that has replayed that far, waits up to
`wait_s` for one to get there, or runs on the primary. Every connection such a read uses is checked
itself (CaughtUpPool), because one DSN may lead to several standbys.

A replica that fails under a read (killed, restarted, a query cancelled by a recovery conflict) is left
out and the read runs again on the primary: reads change nothing, so running one twice is safe, and no
caller sees a replica's death.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar, cast

import asyncpg

from hindsight_server.domain.errors import FailedPrecondition, InvalidArgument, Unavailable
from hindsight_server.domain.model import READ_AFTER_FIELD, CommitPosition
from hindsight_server.store.dsn import without_credentials
from hindsight_server.store.errors import REPLICA_CONFLICT, translate_errors
from hindsight_server.store.pool import BoundedPool
from hindsight_server.telemetry.status import ReadFigures, ReplicaFigures

log = logging.getLogger(__name__)

S = TypeVar("S")
S_co = TypeVar("S_co", covariant=True)
T = TypeVar("T")

NOT_CHECKED = "not checked yet"
POLL_S = 0.002  # how often a read waiting for a replica to replay asks again

# What a replica's failure under a read looks like: the store's Unavailable (connection lost, refused,
# shut down), and a statement cancelled because replay needed the rows it read (SQLSTATE 40001).
_REPLICA_FAILURES = (Unavailable, REPLICA_CONFLICT)


class ReadRoute(Protocol[S_co]):
    """Runs a read on the store it chooses; what the pipelines depend on."""

    async def read(self, after: CommitPosition | None, run: Callable[[S_co], Awaitable[T]]) -> T: ...

    def on_primary(self, store: object) -> bool:
        """Whether `store`, handed to a read's `run`, reads the primary (as fresh as it gets)."""
        ...


class PrimaryOnly(Generic[S]):
    """One store for every read (no replicas: pipelines built on their own, in tests)."""

    def __init__(self, store: S) -> None:
        self._store = store

    async def read(self, after: CommitPosition | None, run: Callable[[S], Awaitable[T]]) -> T:
        return await run(self._store)

    def on_primary(self, store: object) -> bool:
        return store is self._store


@dataclass(frozen=True, slots=True)
class RoutingSettings:
    max_lag_s: float
    check_interval_s: float
    wait_s: float
    read_timeout_s: float  # a replica slower than this to answer is left out (the read: to the primary)


@dataclass(slots=True)
class ReplicaState:
    """What the last check found, and the reads it served."""

    name: str  # the URI without credentials
    usable: bool = False
    replayed: int = -1  # the last replay position seen
    lag_s: float | None = None  # None: unknown (not reachable, or behind every position sampled)
    reason: str = NOT_CHECKED  # why it is left out; empty while usable
    reads: int = 0  # reads it answered
    failed_reads: int = 0  # reads it failed under, answered again by the primary


class _Replica:
    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.pool: BoundedPool | None = None
        self.state = ReplicaState(without_credentials(dsn))

    def leave_out(self, reason: str) -> None:
        if self.state.usable or self.state.reason == NOT_CHECKED:
            log.warning("replica %s left out of reads: %s", self.state.name, reason)
        self.state.usable = False
        self.state.reason = reason

    def take_in(self) -> None:
        if not self.state.usable:
            log.info("replica %s serves reads (lag %.3f s)", self.state.name, self.state.lag_s or 0.0)
        self.state.usable = True
        self.state.reason = ""


class ReadRouting:
    """The primary's pool, the replicas' pools and what is known of each replica."""

    def __init__(
        self,
        primary: asyncpg.Pool,
        replica_dsns: Sequence[str],
        settings: RoutingSettings,
        open_pool: Callable[[str], Awaitable[BoundedPool]],
    ) -> None:
        self.primary = primary
        self._replicas = [_Replica(dsn) for dsn in replica_dsns]
        self._settings = settings
        self._open_pool = open_pool
        self._database = 0  # the primary's system identifier, read by start()
        self._primary_seen = 0  # the furthest primary position seen: a token past it may be forged
        # (monotonic time, primary flush position) at each check, as far back as a lag can matter.
        self._samples: deque[tuple[float, int]] = deque()
        self._turn = 0
        self.primary_reads = 0  # reads the primary answered (no replica usable, or far enough)

    @property
    def replicas(self) -> list[ReplicaState]:
        return [replica.state for replica in self._replicas]

    def figures(self) -> ReadFigures:
        """For Ops/Status and the metrics."""
        return ReadFigures(
            self.primary_reads,
            tuple(
                ReplicaFigures(s.name, s.usable, s.lag_s, s.reason, s.reads, s.failed_reads)
                for s in self.replicas
            ),
        )

    async def start(self) -> None:
        """Reads the primary's identity and checks each replica once (one that is down is not an error:
        it is left out until it answers)."""
        async with translate_errors():
            self._database = int(
                await self.primary.fetchval("SELECT system_identifier FROM pg_control_system()")
            )
        await self._sample_primary()
        await asyncio.gather(*(self._check(replica) for replica in self._replicas))

    async def close(self, patience_s: float) -> None:
        pools = [replica.pool for replica in self._replicas if replica.pool is not None]
        await asyncio.gather(*(pool.close_within(patience_s) for pool in pools), return_exceptions=True)

    async def watch_forever(self) -> None:
        """The primary sampled and every replica checked each interval; each replica on its own timer,
        so one that takes its connect timeout to fail does not hold back the others' figures."""
        # The primary is sampled without replicas too: a token another server issued is then usually
        # known to be no further than the primary, and a read carrying it asks nothing more.
        async with asyncio.TaskGroup() as group:
            group.create_task(self._every_interval(self._sample_primary))
            for replica in self._replicas:
                group.create_task(self._every_interval(functools.partial(self._check, replica)))

    async def commit_position(self) -> CommitPosition:
        """The position a mutating call answers with, once its changes have committed."""
        async with translate_errors():
            lsn = int(await self.primary.fetchval("SELECT pg_current_wal_flush_lsn()"))
        self._primary_seen = max(self._primary_seen, lsn)
        return CommitPosition(self._database, lsn)

    def route(self, stores: Callable[[asyncpg.Pool], S]) -> ReadRoute[S]:
        return _Route(self, stores)

    async def read_on(self, after: CommitPosition | None, run: Callable[[asyncpg.Pool], Awaitable[T]]) -> T:
        if after is not None:
            await self._require_known(after)
        replica = self._choose(after)
        if replica is None or replica.pool is None:
            self.primary_reads += 1
            return await run(self.primary)
        pool = replica.pool
        if after is not None:  # every connection of the read is checked, not only the one asked
            pool = cast(asyncpg.Pool, CaughtUpPool(pool, after.lsn, self._settings.wait_s))
        try:
            answer = await self._bounded(replica, run(pool), "a read")
        except ReplicaBehind:
            self.primary_reads += 1
            return await run(self.primary)
        except _REPLICA_FAILURES as exc:
            replica.leave_out(f"failed a read: {exc}")
            self.primary_reads += 1
            replica.state.failed_reads += 1
            return await run(self.primary)
        replica.state.reads += 1
        return answer

    async def _bounded(self, replica: _Replica, work: Awaitable[T], what: str) -> T:
        """`work` on the replica, given read_timeout_s. Past it the replica is taken as hung: its
        connections are dropped at once (a cancelled statement would otherwise wait on the hung server
        to clean up) and Unavailable raised; the watch opens the pool again once it answers."""
        task = asyncio.ensure_future(work)
        try:
            done, _ = await asyncio.wait({task}, timeout=self._settings.read_timeout_s)
        except asyncio.CancelledError:
            task.cancel()
            raise
        if done:
            return task.result()
        task.cancel()
        task.add_done_callback(_retrieved)
        pool, replica.pool = replica.pool, None
        if pool is not None:
            pool.terminate()
        raise Unavailable(f"did not answer {what} within {self._settings.read_timeout_s:g} s")

    # ------------------------------------------------------------------------------------ choosing

    async def _require_known(self, after: CommitPosition) -> None:
        """A token of this database, not past what its primary has written (a restored backup, or a
        forged token, would otherwise wait forever for a position that will never be replayed)."""
        if after.database != self._database:
            raise InvalidArgument(READ_AFTER_FIELD, "comes from another database (another deployment)")
        if after.lsn <= self._primary_seen:
            return
        await self.commit_position()  # the primary may simply have moved on since this server looked
        if after.lsn > self._primary_seen:
            raise FailedPrecondition.of(
                "CONSISTENCY",
                READ_AFTER_FIELD,
                f"{READ_AFTER_FIELD} is ahead of the database: it was issued before the database was "
                "restored from an older backup, or it was altered",
                cause="TOKEN_AHEAD_OF_DATABASE",
            )

    def _choose(self, after: CommitPosition | None) -> _Replica | None:
        """A usable replica, one whose last check saw it past `after` first; whether it is far enough is
        then checked on each connection the read uses (CaughtUpPool), which waits for replay."""
        usable = self._usable()
        if after is not None:
            usable.sort(key=lambda replica: replica.state.replayed < after.lsn)
        return usable[0] if usable else None

    def _usable(self) -> list[_Replica]:
        """The usable replicas, starting at the next in turn (reads spread over them)."""
        usable = [replica for replica in self._replicas if replica.state.usable]
        if len(usable) > 1:
            self._turn = (self._turn + 1) % len(usable)
            usable = usable[self._turn :] + usable[: self._turn]
        return usable

    # ------------------------------------------------------------------------------------ watching

    async def _every_interval(self, check: Callable[[], Awaitable[None]]) -> None:
        while True:
            started = time.monotonic()
            await check()
            await asyncio.sleep(max(0.0, self._settings.check_interval_s - (time.monotonic() - started)))

    async def _sample_primary(self) -> None:
        try:
            position = await self.commit_position()
        except Unavailable:
            return  # the primary's own watch (readiness) reports it; lags stay as last computed
        now = time.monotonic()
        self._samples.append((now, position.lsn))
        horizon = now - self._settings.max_lag_s - 4 * self._settings.check_interval_s
        while len(self._samples) > 1 and self._samples[1][0] < horizon:
            self._samples.popleft()

    async def _check(self, replica: _Replica) -> None:
        try:
            if replica.pool is None:
                replica.pool = await self._open_pool(replica.dsn)
            async with translate_errors():
                row = await self._bounded(
                    replica,
                    replica.pool.fetchrow(
                        """SELECT pg_is_in_recovery() AS standby, pg_last_wal_replay_lsn() AS replayed,
                                  (SELECT system_identifier FROM pg_control_system()) AS database"""
                    ),
                    "a check",
                )
        except Exception as exc:  # whatever a replica does wrong (refused login too), it only leaves it out
            replica.state.lag_s = None
            replica.leave_out(f"does not answer: {exc}")
            return
        if row["database"] != self._database:
            replica.leave_out("is not a replica of this primary (another system identifier)")
        elif not row["standby"] or row["replayed"] is None:
            replica.leave_out("is not a standby (not in recovery)")
        else:
            replica.state.replayed = max(replica.state.replayed, int(row["replayed"]))
            replica.state.lag_s = replica_lag(self._samples, replica.state.replayed, time.monotonic())
            if replica.state.lag_s is None:
                replica.leave_out("is behind every position the primary was seen at")
            elif replica.state.lag_s > self._settings.max_lag_s:
                replica.leave_out(f"lags {replica.state.lag_s * 1000:.0f} ms")
            else:
                replica.take_in()


class ReplicaBehind(Unavailable):
    """A replica connection had not replayed a read's position within the wait: the primary reads.
    Unavailable, so it leaves a pipeline's parallel statements like any other database failure."""

    def __init__(self) -> None:
        super().__init__("the replica has not replayed the read's consistency token yet")


class CaughtUpPool:
    """A replica's pool for a read that must see a position: each connection it hands out has replayed
    that far, checked on the connection itself, since one DSN may lead to several standbys (a Service
    that balances connections over them). A connection remembers what it was seen at, so most reads
    ask nothing; one still behind after `wait_s` raises ReplicaBehind. The statements the read stores run
    (fetch, fetchrow, fetchval, execute, acquire), as asyncpg's pool offers them."""

    def __init__(self, pool: asyncpg.Pool, position: int, wait_s: float) -> None:
        self._pool = pool
        self._position = position
        self._wait_s = wait_s

    @property
    def pinned(self) -> CaughtUpPool:
        """The replica's connections with pinned plans (store/pool.py), checked alike."""
        return CaughtUpPool(self._pool.pinned, self._position, self._wait_s)

    @contextlib.asynccontextmanager
    async def acquire(self) -> AsyncIterator[Any]:
        async with self._pool.acquire() as connection:
            await self._caught_up(connection)
            yield connection

    async def fetch(self, *args: Any, **kwargs: Any) -> Any:
        async with self.acquire() as connection:
            return await connection.fetch(*args, **kwargs)

    async def fetchrow(self, *args: Any, **kwargs: Any) -> Any:
        async with self.acquire() as connection:
            return await connection.fetchrow(*args, **kwargs)

    async def fetchval(self, *args: Any, **kwargs: Any) -> Any:
        async with self.acquire() as connection:
            return await connection.fetchval(*args, **kwargs)

    async def execute(self, *args: Any, **kwargs: Any) -> Any:
        async with self.acquire() as connection:
            return await connection.execute(*args, **kwargs)

    async def _caught_up(self, connection: Any) -> None:
        deadline = time.monotonic() + self._wait_s
        while connection.replayed < self._position:
            replayed = await connection.fetchval("SELECT pg_last_wal_replay_lsn()")
            if replayed is None:
                raise Unavailable("the replica is not a standby any more")
            connection.saw_replayed(int(replayed))
            if connection.replayed >= self._position:
                return
            if time.monotonic() >= deadline:
                raise ReplicaBehind
            await asyncio.sleep(POLL_S)


class _Route(Generic[S]):
    """ReadRouting's choice of pool, handed to the pipeline as the store it built on that pool."""

    def __init__(self, routing: ReadRouting, stores: Callable[[asyncpg.Pool], S]) -> None:
        self._routing = routing
        self._stores = stores  # a store only holds its pool: one is made for each replica's read
        self._primary = stores(routing.primary)

    async def read(self, after: CommitPosition | None, run: Callable[[S], Awaitable[T]]) -> T:
        return await self._routing.read_on(after, lambda pool: run(self._store_on(pool)))

    def _store_on(self, pool: asyncpg.Pool) -> S:
        return self._primary if pool is self._routing.primary else self._stores(pool)

    def on_primary(self, store: object) -> bool:
        return store is self._primary


def _retrieved(task: asyncio.Future[Any]) -> None:
    """Reads the outcome of work left behind on a hung replica, so it is not reported as lost."""
    if not task.cancelled():
        task.exception()


def replica_lag(samples: Sequence[tuple[float, int]], replayed: int, now: float) -> float | None:
    """How long ago the primary was first seen at a position the replica has not replayed, from the
    (time, position) samples oldest first: 0 when it has replayed the latest; None when it is behind
    even the oldest one kept (how far is unknown)."""
    if not samples or replayed >= samples[-1][1]:
        return 0.0
    if replayed < samples[0][1]:
        return None
    oldest_unreplayed = next(at for at, position in samples if position > replayed)
    return now - oldest_unreplayed
