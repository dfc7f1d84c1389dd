"""A write's peers (store/writes.py, peers_statement): each look-up reads by its index and at most a
bounded number of rows, whatever the subject holds."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from hindsight.client import HindsightClient, memory_input
from hindsight_server.domain.conflicts import content_key, fact_keys
from hindsight_server.domain.model import Kind, Tier
from hindsight_server.process.running import RunningServer
from hindsight_server.store.sql import graph_plans
from hindsight_server.store.writes import FILED_PER_KEY, peers_statement
from tests.domain.builders import numbered
from tests.support.plans import explained_and_rows, index_scans


async def _explained(server: RunningServer, statement: str, arguments: list[Any]) -> tuple[Any, list[Any]]:
    """The statement's plan as it ran, and its rows."""
    async with (
        server.pool.acquire() as connection,
        connection.transaction(),
        graph_plans(connection),  # as a write plans it
    ):
        # On analysed tables, as the server keeps a grown tenant's: else the plan follows whether
        # autovacuum has reached the partition yet (it had not, once, under the whole suite's load).
        await connection.execute("ANALYZE memories")
        return await explained_and_rows(connection, statement, arguments)


async def test_a_write_reads_only_the_latest_facts_filed_under_each_key(
    server: RunningServer, client: HindsightClient, tenant: str
) -> None:
    """A subject that talks of work files hundreds of facts under "facet:work": a new work fact compares
    itself with the latest FILED_PER_KEY of them, read in order from the index, not with all of them."""
    crowd = 20 * FILED_PER_KEY
    for first in range(0, crowd, FILED_PER_KEY):  # a batch's memories share its time
        await client.write_batch(
            tenant,
            [
                memory_input(
                    f"At work I handled the client report number {i}",
                    tier="semantic",
                    kind="fact",
                    subject="ann",
                )
                for i in range(first, first + FILED_PER_KEY)
            ],
            verbatim=True,
        )
    content = "My job at work now is leading the launch team"
    keys = fact_keys(content)
    assert "facet:work" in keys.looks_for
    new = numbered(1, tenant_id=tenant, subject="ann", kind=Kind.FACT, tier=Tier.SEMANTIC, content=content)
    statement, arguments = peers_statement(
        new, content_key(content), keys.looks_for, None, datetime.now(UTC), by_graph=False
    )
    plan, peers = await _explained(server, statement, arguments)
    scans = index_scans(plan, "_fact_slot_created")
    assert scans, "the filed facts are read from memories_fact_slot_recent, in order"
    read = sum(scan["Actual Rows"] * scan["Actual Loops"] for scan in scans)
    assert read <= FILED_PER_KEY * len(keys.looks_for)
    assert FILED_PER_KEY <= read < crowd
    assert len(peers) == 20
    # The latest of them, not any.
    numbers = {int(row["content"].rsplit(" ", 1)[1]) for row in peers}
    assert min(numbers) >= crowd - FILED_PER_KEY


async def test_a_write_reads_only_the_latest_memories_of_its_intent(
    server: RunningServer, client: HindsightClient, tenant: str
) -> None:
    """An agent that books a room every day writes hundreds under one intent: a new booking compares
    itself with the latest FILED_PER_KEY of them, not with all."""
    crowd = 20 * FILED_PER_KEY
    for first in range(0, crowd, FILED_PER_KEY):
        await client.write_batch(
            tenant,
            [
                memory_input(
                    f"Book room A for the team, day {i}",
                    tier="working",
                    kind="task",
                    subject="ann",
                    intent="book_meeting_room",
                    entities={"day": i},
                )
                for i in range(first, first + FILED_PER_KEY)
            ],
            verbatim=True,
        )
    content = "Book room A for the team, day 9999"
    new = numbered(
        1,
        tenant_id=tenant,
        subject="ann",
        kind=Kind.TASK,
        tier=Tier.WORKING,
        content=content,
        intent="book_meeting_room",
    )
    statement, arguments = peers_statement(
        new, content_key(content), (), None, datetime.now(UTC), by_graph=False
    )
    plan, peers = await _explained(server, statement, arguments)
    scans = index_scans(plan, "_intent_created")
    assert scans, "the intent's memories are read from memories_intent_recent, in order"
    read = sum(scan["Actual Rows"] * scan["Actual Loops"] for scan in scans)
    assert FILED_PER_KEY <= read <= FILED_PER_KEY + 1
    assert len(peers) == 20
    assert min(int(row["content"].rsplit(" ", 1)[1]) for row in peers) >= crowd - FILED_PER_KEY
