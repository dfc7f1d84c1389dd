"""When a server refreshes a tenant's planner statistics: counted writes, one refresh queued at a time."""

from __future__ import annotations

import asyncio

import pytest

from hindsight_server.domain.errors import Unavailable
from hindsight_server.pipelines.statistics import StatisticsRefresh


class Analyzer:
    def __init__(self, fail: bool = False) -> None:
        self.analyzed: list[str] = []
        self.fail = fail

    async def analyze_partition_of(self, tenant_id: str) -> None:
        if self.fail:
            raise Unavailable("the database is unavailable; retry later")
        self.analyzed.append(tenant_id)


@pytest.mark.parametrize(
    ("after_rows", "writes", "due"),
    [
        (100, [("a", 99)], []),  # not yet
        (100, [("a", 60), ("a", 40)], ["a"]),  # writes add up
        (100, [("a", 60), ("b", 60)], []),  # per tenant
        (100, [("a", 250)], ["a"]),  # one refresh however far past
        (100, [("a", 100), ("a", 100)], ["a"]),  # queued once until it has run
        (0, [("a", 10_000)], []),  # 0: never
        (100, [("a", 0), ("a", -5)], []),  # nothing created
    ],
)
async def test_a_tenant_is_due_once_its_writes_add_up(
    after_rows: int, writes: list[tuple[str, int]], due: list[str]
) -> None:
    analyzer = Analyzer()
    refresh = StatisticsRefresh(analyzer, after_rows)
    for tenant_id, rows in writes:
        refresh.note_written(tenant_id, rows)
    for _ in due:
        await asyncio.wait_for(refresh.refresh_next(), 1)
    assert analyzer.analyzed == due
    with pytest.raises(TimeoutError):  # nothing else is due
        await asyncio.wait_for(refresh.refresh_next(), 0.05)


async def test_counting_starts_again_after_a_refresh_and_a_failed_one_frees_the_tenant() -> None:
    analyzer = Analyzer(fail=True)
    refresh = StatisticsRefresh(analyzer, 100)
    refresh.note_written("a", 100)
    with pytest.raises(Unavailable):
        await refresh.refresh_next()
    analyzer.fail = False
    refresh.note_written("a", 99)
    refresh.note_written("a", 1)  # due again: the failed refresh no longer holds it
    assert await asyncio.wait_for(refresh.refresh_next(), 1) == "a"
