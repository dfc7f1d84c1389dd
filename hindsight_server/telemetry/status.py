"""One server's figures, as `hindsight status` shows them and as OpenTelemetry metrics export them.

The board reads the recorder's windows (recall p50/p95/p99 against the target, write, stages) and, from
callables the composition root gives it, the pool, the query-embedding caches and the inference tier;
the deferred-embedding backlog is a count the board refreshes on a schedule (`watch_backlog`), so a
status call or a metric export never waits on the database.

Metrics (observable, read at each export): hindsight.recall.p99 (ms), hindsight.recall.p99_target_met
(1 met / 0 missed, over the window; nothing while no recall ran in it), hindsight.embedding.backlog,
db.client.connection.count (state idle | used) and db.client.connection.max, hindsight.query_cache.hits,
.misses and .size (by model space), hindsight.replica.lag (s) and hindsight.replica.usable (by
replica). Each observation carries `hindsight.server` (HOST:PORT), so several servers in one process
(tests) stay apart.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import logging
import os
import time
import weakref
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Observation

from hindsight_server.domain.errors import HindsightError
from hindsight_server.telemetry.collector import CollectorPauses
from hindsight_server.telemetry.recorder import Recorder
from hindsight_server.telemetry.window import LatencySummary, LatencyWindow

__all__ = [
    "CacheFigures",
    "HotScopeFigures",
    "InferenceFigures",
    "PoolFigures",
    "ReadFigures",
    "ReplicaFigures",
    "StatusBoard",
    "StatusSources",
]

log = logging.getLogger(__name__)
SERVER_ATTRIBUTE = "hindsight.server"


@dataclass(frozen=True, slots=True)
class PoolFigures:
    size: int  # open connections
    idle: int
    min_size: int
    max_size: int

    @property
    def in_use(self) -> int:
        return self.size - self.idle


@dataclass(frozen=True, slots=True)
class CacheFigures:
    hits: int
    misses: int
    size: int
    capacity: int


@dataclass(frozen=True, slots=True)
class InferenceFigures:
    available: bool  # the multilingual model answers
    problem: str  # why not, when it does not
    own_spaces: tuple[str, ...]  # the languages' own models that answer (english, chinese)
    rerank: bool  # a cross-encoder answers
    rerank_on_gpu: bool  # ... on a GPU: recall reranks by default (recall.rerank unset)


@dataclass(frozen=True, slots=True)
class ReplicaFigures:
    name: str  # its URI without credentials
    usable: bool  # serves reads now
    lag_s: float | None  # None: unknown (down, or behind every primary position sampled)
    reason: str  # why it is left out; empty while usable
    reads: int  # reads it answered
    failed_reads: int  # reads it failed under, answered again by the primary


@dataclass(frozen=True, slots=True)
class ReadFigures:
    primary_reads: int  # reads the primary answered (all of them without replicas)
    replicas: tuple[ReplicaFigures, ...]


@dataclass(frozen=True, slots=True)
class HotScopeFigures:
    """The subjects this server holds in memory for recall (pipelines/hot_scopes.py)."""

    held: int  # subjects held
    memories: int  # their memories
    bytes: int  # their estimated size (hot_scopes.memory_mb bounds it)
    loads: int  # subjects read in since the server started
    served: int  # recalls answered from a held subject
    missed: int  # recalls of a subject (named) not held: read from the database
    vector_searches: int  # exact vector searches of held subjects
    vector_passes: int  # passes over a matrix that ran them (fewer: concurrent searches shared one)


def _no_hot_scopes() -> HotScopeFigures | None:
    return None


def _no_replicas() -> ReadFigures:
    return ReadFigures(0, ())


def _no_caches() -> Mapping[str, CacheFigures]:
    return {}


def _no_inference() -> InferenceFigures | None:
    return None


@dataclass(frozen=True, slots=True)
class StatusSources:
    pool: Callable[[], PoolFigures]
    caches: Callable[[], Mapping[str, CacheFigures]] = _no_caches  # by model space
    inference: Callable[[], InferenceFigures | None] = _no_inference  # None: no tier configured
    reads: Callable[[], ReadFigures] = _no_replicas  # where reads ran: primary, each replica
    hot_scopes: Callable[[], HotScopeFigures | None] = _no_hot_scopes  # None: not held by this server


@dataclass(slots=True)
class _Backlog:
    pending: int | None = None  # None: not counted yet
    capped: bool = False  # the count stopped at the cap: at least this many
    counted_at: float | None = None
    problem: str = ""


_BOARDS: weakref.WeakSet[StatusBoard] = weakref.WeakSet()
LOOP_PROBE_S = 0.01  # the event-loop probe's sleep: 100 wake-ups a second cost well under 1% of a core


class StatusBoard:
    def __init__(
        self,
        recorder: Recorder,
        target_p99_ms: float,
        sources: StatusSources,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.recorder = recorder
        self.target_p99_ms = target_p99_ms
        self.name = ""  # HOST:PORT, once the server listens
        self._sources = sources
        self._clock = clock
        self._started = clock()
        self._backlog = _Backlog()
        # How late the event loop wakes a sleeper (ms): the stall every call on the server waited out.
        self.loop_lag = LatencyWindow(recorder.window_s, max_samples=10_000, clock=clock)
        # The garbage collector's pauses (ms), one of the stalls the loop lag shows.
        self.collector_pauses = CollectorPauses(
            LatencyWindow(recorder.window_s, max_samples=10_000, clock=clock)
        )
        self.collector_pauses.install()
        _observe_boards()
        _BOARDS.add(self)

    def close(self) -> None:
        """Stops exporting this board's metrics and recording the collector's pauses (the server stopped)."""
        _BOARDS.discard(self)
        self.collector_pauses.remove()

    def target_met(self, summary: LatencySummary | None = None) -> bool | None:
        """Whether the recall p99 over the window is within the target; None when no recall ran in it."""
        summary = summary or self.recorder.recalls.summary()
        return None if summary is None else summary.p99_ms <= self.target_p99_ms

    async def watch_backlog(
        self, count: Callable[[int], Awaitable[int]], interval_s: float, cap: int
    ) -> None:
        """Counts the memories waiting for an embedding every interval (at most `cap`, to bound the
        count's cost when a tier outage left a large backlog); a failed count keeps the last figure."""
        while True:
            try:
                async with asyncio.timeout(interval_s):
                    pending = await count(cap)
                self._backlog = _Backlog(pending, pending >= cap, self._clock())
            except (HindsightError, TimeoutError) as exc:
                self._backlog.problem = str(exc) or type(exc).__name__
            await asyncio.sleep(interval_s)

    async def watch_loop_lag(self, interval_s: float = LOOP_PROBE_S) -> None:
        """Sleeps `interval_s` again and again and records how much later than asked it woke: a call
        that holds the loop (CPU-heavy work in place, a blocking call) shows as lag here."""
        loop = asyncio.get_running_loop()
        while True:
            started = loop.time()
            await asyncio.sleep(interval_s)
            self.loop_lag.add(max(loop.time() - started - interval_s, 0.0) * 1000)

    def snapshot(self) -> dict[str, Any]:
        """The figures as JSON-ready values (the Ops/Status answer)."""
        recalls = self.recorder.recalls.summary()
        backlog = self._backlog
        pool = self._sources.pool()
        inference = self._sources.inference()
        hot = self._sources.hot_scopes()
        return {
            "server": self.name,
            "pid": os.getpid(),
            "uptime_s": round(self._clock() - self._started, 1),
            "window_s": self.recorder.window_s,
            "recall": {
                **_summary(recalls),
                "target_p99_ms": self.target_p99_ms,
                "target_met": self.target_met(recalls),
                "stages": {
                    name: _summary(window.summary())
                    for name, window in sorted(self.recorder.stages().items())
                },
            },
            "write": {name: _summary(window.summary()) for name, window in self.recorder.writes().items()},
            "embedding_backlog": {
                "pending": backlog.pending,
                "capped": backlog.capped,
                "age_s": None if backlog.counted_at is None else round(self._clock() - backlog.counted_at, 1),
                "problem": backlog.problem,
            },
            "pool": {**asdict(pool), "in_use": pool.in_use},
            "query_cache": {space: asdict(figures) for space, figures in self._sources.caches().items()},
            "inference": None if inference is None else asdict(inference),
            "reads": asdict(self._sources.reads()),
            "hot_scopes": None if hot is None else asdict(hot),
            "event_loop_lag": _summary(self.loop_lag.summary()),
            "garbage_collector": {
                "pauses": _summary(self.collector_pauses.window.summary()),
                "frozen_objects": gc.get_freeze_count(),
            },
        }

    # -------------------------------------------------------------------------------- metric callbacks

    def _attributes(self, **more: str | float) -> dict[str, str | float]:
        return {SERVER_ATTRIBUTE: self.name, **more}

    def observe_recall(self) -> list[Observation]:
        summary = self.recorder.recalls.summary()
        if summary is None:
            return []
        return [Observation(summary.p99_ms, self._attributes())]

    def observe_target(self) -> list[Observation]:
        met = self.target_met()
        if met is None:
            return []
        return [Observation(int(met), self._attributes(**{"hindsight.target_ms": self.target_p99_ms}))]

    def observe_backlog(self) -> list[Observation]:
        pending = self._backlog.pending
        return [] if pending is None else [Observation(pending, self._attributes())]

    def observe_connections(self) -> list[Observation]:
        pool = self._sources.pool()
        state = "db.client.connection.state"
        return [
            Observation(pool.idle, self._attributes(**{state: "idle"})),
            Observation(pool.in_use, self._attributes(**{state: "used"})),
        ]

    def observe_max_connections(self) -> list[Observation]:
        return [Observation(self._sources.pool().max_size, self._attributes())]

    def observe_replica_lag(self) -> list[Observation]:
        return [
            Observation(replica.lag_s, self._attributes(**{"hindsight.replica": replica.name}))
            for replica in self._sources.reads().replicas
            if replica.lag_s is not None
        ]

    def observe_replica_usable(self) -> list[Observation]:
        return [
            Observation(int(replica.usable), self._attributes(**{"hindsight.replica": replica.name}))
            for replica in self._sources.reads().replicas
        ]

    def observe_cache(self, figure: str) -> list[Observation]:
        return [
            Observation(getattr(figures, figure), self._attributes(**{"hindsight.space": space}))
            for space, figures in self._sources.caches().items()
        ]


def _summary(summary: LatencySummary | None) -> dict[str, Any]:
    return {"count": 0} if summary is None else summary.as_dict()


def _each_board(
    read: Callable[[StatusBoard], list[Observation]],
) -> Callable[[CallbackOptions], Iterable[Observation]]:
    def callback(options: CallbackOptions) -> Iterable[Observation]:
        return [observation for board in list(_BOARDS) for observation in read(board)]

    return callback


@functools.cache
def _observe_boards() -> tuple[Any, ...]:
    """The observable instruments, created once per process (a second creation under the same name
    would keep the first one's callbacks only); their callbacks read every live board."""
    meter = metrics.get_meter("hindsight_server")
    return tuple(
        [
            meter.create_observable_gauge(
                "hindsight.recall.p99",
                [_each_board(StatusBoard.observe_recall)],
                unit="ms",
                description="Recall p99 over the status window",
            ),
            meter.create_observable_gauge(
                "hindsight.recall.p99_target_met",
                [_each_board(StatusBoard.observe_target)],
                unit="1",
                description="1 while the recall p99 over the window is within telemetry.recall_p99_target_ms",
            ),
            meter.create_observable_gauge(
                "hindsight.embedding.backlog",
                [_each_board(StatusBoard.observe_backlog)],
                unit="{memory}",
                description="Memories waiting for their embedding (counted up to telemetry.backlog_cap)",
            ),
            meter.create_observable_up_down_counter(
                "db.client.connection.count",
                [_each_board(StatusBoard.observe_connections)],
                unit="{connection}",
                description="The PostgreSQL pool's open connections, by state",
            ),
            meter.create_observable_up_down_counter(
                "db.client.connection.max",
                [_each_board(StatusBoard.observe_max_connections)],
                unit="{connection}",
            ),
            meter.create_observable_gauge(
                "hindsight.replica.lag",
                [_each_board(StatusBoard.observe_replica_lag)],
                unit="s",
                description="How long ago the primary was at a position the replica has not replayed",
            ),
            meter.create_observable_gauge(
                "hindsight.replica.usable",
                [_each_board(StatusBoard.observe_replica_usable)],
                unit="1",
                description="1 while the replica serves reads (answers, streams, lags at most the bound)",
            ),
            meter.create_observable_counter(
                "hindsight.query_cache.hits",
                [_each_board(lambda board: board.observe_cache("hits"))],
                unit="{lookup}",
            ),
            meter.create_observable_counter(
                "hindsight.query_cache.misses",
                [_each_board(lambda board: board.observe_cache("misses"))],
                unit="{lookup}",
            ),
            meter.create_observable_gauge(
                "hindsight.query_cache.size",
                [_each_board(lambda board: board.observe_cache("size"))],
                unit="{entry}",
            ),
        ]
    )
