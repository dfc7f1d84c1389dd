"""The job runner and scheduler on an in-memory ledger (tests/support/fakes): jobs registered by name with
their intervals, one run at a time under the job's lock, each run recorded, skipped when another holds
the lock or it ran within the interval, and a schedule that runs what is due and survives a failing job.
The lifecycle jobs themselves are tests/pipelines/test_lifecycle_jobs.py's; the advisory locks and
job_runs run against PostgreSQL in tests/lifecycle/test_jobs.py."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest

from hindsight_server.domain.errors import InvalidArgument, NotFound, Unavailable
from hindsight_server.domain.jobs import JobRun
from hindsight_server.pipelines.jobs import (
    RAN_RECENTLY,
    RUNNING_ELSEWHERE,
    JobRegistry,
    JobRunner,
    JobScheduler,
    due,
)
from tests.support.fakes.clock import FakeClock
from tests.support.fakes.job_ledger import InMemoryJobLedger

NOW = datetime(2024, 5, 1, 12, tzinfo=UTC)
HOUR = timedelta(hours=1)


@dataclass
class Body:
    """A job that processes `processed` items (or raises `error`), remembering when it ran."""

    processed: int = 3
    error: Exception | None = None
    ran_at: list[datetime] = field(default_factory=list)

    async def __call__(self, now: datetime) -> int:
        self.ran_at.append(now)
        if self.error is not None:
            raise self.error
        return self.processed


@dataclass
class Runner:
    runner: JobRunner
    ledger: InMemoryJobLedger
    clock: FakeClock


def runner(registry: JobRegistry) -> Runner:
    ledger, clock = InMemoryJobLedger(), FakeClock(NOW)
    return Runner(JobRunner(registry, ledger, clock, "server-a"), ledger, clock)


def registry(**bodies: Body) -> JobRegistry:
    jobs = JobRegistry({"purge": 2 * HOUR})
    for name, body in bodies.items():
        jobs.add(name, body)
    return jobs


@pytest.mark.parametrize(
    ("given", "configured", "interval"),
    [
        (timedelta(minutes=5), 2 * HOUR, timedelta(minutes=5)),  # the caller's wins
        (None, 2 * HOUR, 2 * HOUR),  # then the configuration's
        (None, None, HOUR),  # else an hour
    ],
)
def test_a_jobs_interval_is_the_one_given_else_configured_else_an_hour(
    given: timedelta | None, configured: timedelta | None, interval: timedelta
) -> None:
    jobs = JobRegistry({"purge": configured} if configured else {})
    jobs.add("purge", Body(), interval=given)
    assert jobs.get("purge").interval == interval


@pytest.mark.parametrize(
    ("name", "interval", "message"),
    [
        ("", None, "job: '' is empty or already registered"),
        ("expire", None, "job: 'expire' is empty or already registered"),
        ("purge", timedelta(0), "interval: job 'purge' needs a positive interval"),
        ("purge", -HOUR, "interval: job 'purge' needs a positive interval"),
    ],
)
def test_a_job_without_a_name_of_its_own_or_a_positive_interval_is_refused(
    name: str, interval: timedelta | None, message: str
) -> None:
    jobs = registry(expire=Body())
    with pytest.raises(InvalidArgument, match=f"^{message}$"):
        jobs.add(name, Body(), interval=interval)
    assert jobs.names == ["expire"]


def test_jobs_are_listed_in_the_order_added_and_an_unknown_one_is_not_found() -> None:
    jobs = registry(expire=Body(), purge=Body(), demote=Body())
    assert jobs.names == ["expire", "purge", "demote"] == [job.name for job in jobs]
    with pytest.raises(NotFound, match="job 'evict' not found"):
        jobs.get("evict")


async def test_a_run_is_recorded_with_what_it_processed_and_who_ran_it() -> None:
    body = Body(processed=7)
    r = runner(registry(expire=body))
    result = await r.runner.run("expire")
    assert (result.job, result.processed, result.skipped, result.reason) == ("expire", 7, False, "")
    assert body.ran_at == [NOW]  # the clock's now, unless given one
    run = (await r.runner.last_runs())["expire"]
    assert (run.started_at, run.processed, run.server) == (NOW, 7, "server-a")
    assert run.finished_at is not None and run.finished_at >= run.started_at
    assert r.ledger.held == set()


async def test_a_run_at_a_given_time_records_that_time() -> None:
    body = Body()
    r = runner(registry(expire=body))
    later = NOW + 30 * HOUR
    await r.runner.run("expire", later)
    assert body.ran_at == [later] and r.ledger.runs["expire"].started_at == later


async def test_a_job_whose_lock_is_held_elsewhere_is_skipped_without_running() -> None:
    body = Body()
    r = runner(registry(expire=body))
    async with r.ledger.exclusive("expire") as held:
        assert held
        result = await r.runner.run("expire")
    assert result.skipped and result.reason == RUNNING_ELSEWHERE and result.processed == 0
    assert body.ran_at == [] and "expire" not in r.ledger.runs


@pytest.mark.parametrize(("ago", "skipped"), [(timedelta(minutes=59), True), (HOUR, False)])
async def test_a_run_unless_it_ran_within_an_interval_checks_the_last_start(
    ago: timedelta, skipped: bool
) -> None:
    body = Body()
    r = runner(registry(expire=body))
    r.ledger.runs["expire"] = JobRun("expire", NOW - ago, NOW - ago + timedelta(minutes=1), 2, "server-b")
    result = await r.runner.run("expire", unless_ran_within=HOUR)
    assert result.skipped is skipped and result.reason == (RAN_RECENTLY if skipped else "")
    assert r.ledger.runs["expire"].server == ("server-b" if skipped else "server-a")


async def test_a_failing_run_frees_its_lock_and_stays_unfinished() -> None:
    r = runner(registry(expire=Body(error=RuntimeError("bug"))))
    with pytest.raises(RuntimeError, match="bug"):
        await r.runner.run("expire")
    assert r.ledger.held == set()
    assert r.ledger.runs["expire"].finished_at is None  # started, never finished


async def test_an_unknown_job_is_not_found() -> None:
    with pytest.raises(NotFound):
        await runner(registry()).runner.run("expire")


@pytest.mark.parametrize(
    ("last", "is_due"),
    [
        (None, True),  # never ran
        (JobRun("j", NOW - timedelta(minutes=59), None, 0, "s"), False),
        (JobRun("j", NOW - HOUR, NOW - timedelta(minutes=50), 3, "s"), True),
        # a run that keeps failing (never finishes) waits its interval from its start as well
        (JobRun("j", NOW - timedelta(minutes=30), None, 0, "s"), False),
    ],
)
def test_a_job_is_due_an_interval_after_its_last_start(last: JobRun | None, is_due: bool) -> None:
    assert due(last, NOW, HOUR) is is_due


async def test_the_schedule_runs_each_job_when_due_and_not_before() -> None:
    expire, purge = Body(), Body()
    r = runner(registry(expire=expire, purge=purge))  # purge's configured interval: two hours
    scheduler = JobScheduler(r.runner, r.clock, poll_s=1.0)
    assert [result.job for result in await scheduler.tick()] == ["expire", "purge"]
    r.clock.advance(HOUR)
    assert [result.job for result in await scheduler.tick()] == ["expire"]
    assert await scheduler.tick() == []
    r.clock.advance(HOUR)
    assert [result.job for result in await scheduler.tick()] == ["expire", "purge"]
    assert expire.ran_at == [NOW, NOW + HOUR, NOW + 2 * HOUR] and purge.ran_at == [NOW, NOW + 2 * HOUR]


@pytest.mark.parametrize("error", [RuntimeError("a bug"), Unavailable("the database is away")])
async def test_a_failing_job_does_not_stop_the_others_and_waits_its_interval(error: Exception) -> None:
    failing, after = Body(error=error), Body()
    r = runner(registry(expire=failing, demote=after))
    scheduler = JobScheduler(r.runner, r.clock, poll_s=1.0)
    assert [result.job for result in await scheduler.tick()] == ["demote"]
    assert after.ran_at == [NOW] and failing.ran_at == [NOW]
    assert await scheduler.tick() == []  # not retried in a tight loop
    assert failing.ran_at == [NOW]
