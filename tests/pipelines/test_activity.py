"""The write activity the backfill worker gives way to, on a clock the test moves: quiet until a write
embeds inline, busy for the asked time after the last one, quiet again at that bound. How long the worker
then waits is tests/inference/test_backfill_gives_way.py's."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from hindsight_server.pipelines.activity import WriteActivity
from tests.support.fakes.clock import FakeClock


def activity() -> tuple[WriteActivity, FakeClock]:
    clock = FakeClock(datetime(2024, 5, 1, 12, tzinfo=UTC))
    return WriteActivity(clock.monotonic), clock


@pytest.mark.parametrize("seconds", [0.0, 0.5, 1e9])
def test_a_write_path_that_never_embedded_is_quiet_for_any_time(seconds: float) -> None:
    writes, _ = activity()
    assert writes.quiet_for(seconds)


@pytest.mark.parametrize(
    ("since_last", "asked", "quiet"),
    [
        (0.0, 0.5, False),
        (0.49, 0.5, False),
        (0.5, 0.5, True),  # the bound itself counts as quiet
        (2.0, 0.5, True),
        (2.0, 0.0, True),  # asking for no quiet at all: always quiet
    ],
)
def test_quiet_only_once_the_asked_time_has_passed_since_the_last_inline_embedding(
    since_last: float, asked: float, quiet: bool
) -> None:
    writes, clock = activity()
    writes.touch()
    clock.advance(timedelta(seconds=since_last))
    assert writes.quiet_for(asked) is quiet


def test_each_inline_embedding_starts_the_wait_again() -> None:
    writes, clock = activity()
    writes.touch()
    clock.advance(timedelta(seconds=0.4))
    writes.touch()
    clock.advance(timedelta(seconds=0.4))
    assert not writes.quiet_for(0.5)  # 0.8 s since the first, 0.4 s since the last
    clock.advance(timedelta(seconds=0.1))
    assert writes.quiet_for(0.5)
