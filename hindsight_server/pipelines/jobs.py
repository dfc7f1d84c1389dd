"""Lifecycle jobs with exactly one runner: a registry of named jobs, a runner that runs one under its
advisory lock and records it in job_runs, and a scheduler that runs each on its interval.

However many servers run, a job runs on one of them at a time: the runner takes the job's PostgreSQL
advisory lock first, and a run that cannot is skipped ("running elsewhere"). The schedule reads the
shared job_runs, so N servers together run each job once per interval, not N times.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from hindsight_server.domain.clock import Clock
from hindsight_server.domain.errors import HindsightError, InvalidArgument, NotFound
from hindsight_server.domain.jobs import JobRun
from hindsight_server.pipelines.ports import JobLedger

log = logging.getLogger(__name__)

JobBody = Callable[[datetime], Awaitable[int]]  # async (now) -> how many memories it processed

DEFAULT_INTERVAL = timedelta(hours=1)  # for a job added without one configured


@dataclass(frozen=True, slots=True)
class Job:
    name: str
    run: JobBody  # async (now) -> memories processed
    interval: timedelta


class JobRegistry:
    """Jobs by name, in the order added. Intervals come from the configuration (by job name)."""

    def __init__(self, intervals: Mapping[str, timedelta] | None = None) -> None:
        self._intervals = dict(intervals or {})
        self._jobs: dict[str, Job] = {}

    def add(self, name: str, run: JobBody, *, interval: timedelta | None = None) -> None:
        """Registers a job; its interval is `interval`, else the configured one, else an hour."""
        if not name or name in self._jobs:
            raise InvalidArgument("job", f"{name!r} is empty or already registered")
        # `is not None`, not `or`: a zero interval is refused, not taken for one not given.
        chosen = interval if interval is not None else self._intervals.get(name, DEFAULT_INTERVAL)
        if chosen <= timedelta(0):
            raise InvalidArgument("interval", f"job {name!r} needs a positive interval")
        self._jobs[name] = Job(name, run, chosen)

    def get(self, name: str) -> Job:
        try:
            return self._jobs[name]
        except KeyError:
            raise NotFound("job", name) from None

    @property
    def names(self) -> list[str]:
        return list(self._jobs)

    def __iter__(self) -> Iterator[Job]:
        return iter(list(self._jobs.values()))


@dataclass(frozen=True, slots=True)
class JobResult:
    job: str
    processed: int
    skipped: bool
    reason: str  # why it was skipped; empty when it ran
    elapsed_ms: float

    def as_dict(self) -> dict[str, Any]:
        return {
            "job": self.job,
            "processed": self.processed,
            "skipped": self.skipped,
            "reason": self.reason,
            "elapsed_ms": round(self.elapsed_ms, 1),
        }


RUNNING_ELSEWHERE = "running elsewhere"
RAN_RECENTLY = "ran recently"


class JobRunner:
    def __init__(self, registry: JobRegistry, store: JobLedger, clock: Clock, server: str) -> None:
        self.registry = registry
        self._store = store
        self._clock = clock
        self._server = server  # recorded in job_runs: which server ran it

    async def run(
        self, name: str, now: datetime | None = None, *, unless_ran_within: timedelta | None = None
    ) -> JobResult:
        """Runs the job once under its lock; skipped when another run holds the lock or, with
        `unless_ran_within`, when a run started that recently (checked under the lock, so two servers
        that both found it due do not both run it). NotFound for an unknown name."""
        job = self.registry.get(name)
        now = now or self._clock()
        started = time.perf_counter()

        def elapsed_ms() -> float:
            return (time.perf_counter() - started) * 1000

        async with self._store.exclusive(name) as held:
            if not held:
                return JobResult(name, 0, True, RUNNING_ELSEWHERE, elapsed_ms())
            if unless_ran_within is not None:
                last = (await self._store.last_runs()).get(name)
                if last is not None and last.started_at > now - unless_ran_within:
                    return JobResult(name, 0, True, RAN_RECENTLY, elapsed_ms())
            await self._store.started(name, now, self._server)
            processed = await job.run(now)
            # The job's own time line: with a moved or given `now`, finished stays after started.
            await self._store.finished(name, now + timedelta(milliseconds=elapsed_ms()), processed)
        if processed:
            log.info("job %s: %d processed in %.0f ms", name, processed, elapsed_ms())
        return JobResult(name, processed, False, "", elapsed_ms())

    async def last_runs(self) -> dict[str, JobRun]:
        return await self._store.last_runs()


def due(last: JobRun | None, now: datetime, interval: timedelta) -> bool:
    """A job is due when it never ran or its last run started an interval ago (started, not finished:
    a job that keeps failing waits its interval instead of being retried in a tight loop)."""
    return last is None or now - last.started_at >= interval


class JobScheduler:
    """Every `poll_s`, runs the jobs that are due by the (injectable) clock, one after another."""

    def __init__(self, runner: JobRunner, clock: Clock, poll_s: float) -> None:
        self._runner = runner
        self._clock = clock
        self._poll_s = poll_s

    async def tick(self) -> list[JobResult]:
        results = []
        last_runs = await self._runner.last_runs()
        for job in self._runner.registry:
            now = self._clock()
            if not due(last_runs.get(job.name), now, job.interval):
                continue
            try:
                results.append(await self._runner.run(job.name, now, unless_ran_within=job.interval))
            except HindsightError as exc:  # the database away: readiness reports it, one line is enough
                log.warning("job %s did not run: %s", job.name, exc)
            except Exception:
                # A bug in one job must not stop the others or the schedule.
                log.exception("job %s failed; it runs again in %s", job.name, job.interval)
        return results

    async def run_forever(self) -> None:
        while True:
            # Waiting first leaves a starting server's first moments to its first calls.
            await asyncio.sleep(self._poll_s)
            try:
                await self.tick()
            except HindsightError as exc:
                log.warning("job schedule not checked: %s", exc)
            except Exception:
                log.exception("job schedule check failed; retrying in %.1fs", self._poll_s)


__all__ = [
    "RAN_RECENTLY",
    "RUNNING_ELSEWHERE",
    "Job",
    "JobBody",
    "JobRegistry",
    "JobResult",
    "JobRunner",
    "JobScheduler",
    "due",
]
