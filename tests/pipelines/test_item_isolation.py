"""Item isolation (pipelines/item_isolation.py) over the in-memory record of failures
(tests/support/fakes): a failing item is recorded (its exception's class only) with a backoff that doubles
up to its bound, the job gets None and goes on; an item that goes through again is forgotten; a database
that is away or a cancellation ends the run and records nothing."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta

import pytest

from hindsight_server.domain.errors import DeadlineExceeded, HindsightError, Unavailable
from hindsight_server.pipelines.item_isolation import ItemIsolation, JobItem
from tests.support.fakes.lifecycle_store import RecordedFailures

NOW = datetime(2024, 5, 1, 12, tzinfo=UTC)
KEY = ("consolidate", "acme", "session-1")


def isolation() -> tuple[ItemIsolation, RecordedFailures]:
    failures = RecordedFailures()
    return ItemIsolation(failures, backoff_s=60, max_backoff_s=600), failures


def item(failures: int = 0) -> JobItem:
    return JobItem("consolidate", "acme", "session-1", failures)


def fails_with(error: BaseException) -> Callable[[], Awaitable[str]]:
    async def work() -> str:
        raise error

    return work


async def done() -> str:
    return "consolidated"


async def test_an_item_that_goes_through_returns_its_result_and_records_nothing() -> None:
    runner, failures = isolation()
    assert await runner.run(item(), done, NOW) == "consolidated"
    assert not failures.failures


async def test_a_failing_item_is_recorded_by_its_class_and_the_job_gets_none(
    caplog: pytest.LogCaptureFixture,
) -> None:
    runner, failures = isolation()
    with caplog.at_level(logging.WARNING):
        result = await runner.run(item(), fails_with(ValueError("the user's phone is 555-0100")), NOW)

    assert result is None
    assert (failures.failures[KEY], failures.errors[KEY]) == (1, "ValueError")
    assert failures.retry_at[KEY] == NOW + timedelta(seconds=60)
    assert "ValueError" in caplog.text and "1 in a row" in caplog.text
    assert "555-0100" not in caplog.text  # the exception's text may quote content: never logged


@pytest.mark.parametrize(
    ("failures", "waits_s"),
    [
        (1, 60),
        (2, 120),
        (3, 240),
        (4, 480),
        (5, 600),  # the bound
        (9, 600),
    ],
)
async def test_the_backoff_doubles_with_each_failure_in_a_row_up_to_its_bound(
    failures: int, waits_s: int
) -> None:
    runner, recorded = isolation()
    for attempt in range(failures):
        await runner.run(item(attempt), fails_with(KeyError("slot")), NOW)
    assert recorded.failures[KEY] == failures
    assert recorded.retry_at[KEY] == NOW + timedelta(seconds=waits_s)
    assert recorded.backing_off(*KEY, NOW + timedelta(seconds=waits_s - 1))
    assert not recorded.backing_off(*KEY, NOW + timedelta(seconds=waits_s))


async def test_an_item_that_goes_through_after_failing_is_forgotten() -> None:
    runner, failures = isolation()
    await runner.run(item(), fails_with(RuntimeError()), NOW)
    await runner.run(item(), fails_with(RuntimeError()), NOW)
    assert failures.failures[KEY] == 2

    assert await runner.run(item(failures=2), done, NOW) == "consolidated"
    assert KEY not in failures.failures and not failures.backing_off(*KEY, NOW)
    await runner.run(item(), fails_with(RuntimeError()), NOW)
    assert failures.failures[KEY] == 1  # counting starts again


async def test_other_items_keep_their_own_counts() -> None:
    runner, failures = isolation()
    await runner.run(item(), fails_with(RuntimeError()), NOW)
    other = JobItem("consolidate", "globex", "session-1")
    await runner.run(other, fails_with(RuntimeError()), NOW)
    await runner.run(other, fails_with(RuntimeError()), NOW)
    assert failures.failures[KEY] == 1
    assert failures.failures[("consolidate", "globex", "session-1")] == 2


@pytest.mark.parametrize(
    "error",
    [
        Unavailable("the database is unavailable; retry later"),
        DeadlineExceeded("statement timeout"),
        asyncio.CancelledError(),
    ],
)
async def test_a_database_away_or_a_cancel_ends_the_run_and_is_no_items_fault(error: BaseException) -> None:
    runner, failures = isolation()
    with pytest.raises(type(error)):
        await runner.run(item(failures=3), fails_with(error), NOW)
    assert not failures.failures


async def test_a_domain_error_of_the_item_is_its_own_failure() -> None:
    runner, failures = isolation()
    assert await runner.run(item(), fails_with(HindsightError("bad turn")), NOW) is None
    assert failures.errors[KEY] == "HindsightError"
