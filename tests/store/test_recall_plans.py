"""Recall statements read by the index that serves their scope (store/channels.py): the structured
channel's time window in order, whether or not the recall names a subject; a scope's count by the
subject's rows, not its tenant's."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from hindsight.client import HindsightClient, memory_input
from hindsight_server.domain.model import Scope, TimeWindow, VectorSpace
from hindsight_server.process.running import RunningServer
from hindsight_server.store.channels import scope_size_statement, structured_statement
from tests.support.plans import explained_and_rows, index_scans, rows_read

SUBJECTS = 40
EACH = 25
LIMIT = 20


async def _crowd(client: HindsightClient, tenant: str, now: datetime) -> list[tuple[datetime, str]]:
    """SUBJECTS subjects of EACH memories, their times interleaved; (time, content) of each."""
    written = []
    for subject in range(SUBJECTS):
        memories = []
        for i in range(EACH):
            at = now - timedelta(minutes=10 * (subject + SUBJECTS * i) + 1)  # subjects interleaved in time
            memories.append(
                memory_input(
                    f"note {subject}-{i}",
                    tier="episodic",
                    kind="event",
                    subject=f"user-{subject}",
                    occurred_at=at,
                )
            )
            written.append((at, f"note {subject}-{i}"))
        await client.write_batch(tenant, memories, verbatim=True)
    return written


async def _explained(server: RunningServer, statement: str, arguments: list[Any]) -> tuple[Any, list[Any]]:
    """The statement's plan as it ran on analysed tables, and its rows."""
    async with server.pool.acquire() as connection:
        await connection.execute("ANALYZE memories")  # as the server does once a tenant has grown
        return await explained_and_rows(connection, statement, arguments)


async def test_a_tenant_wide_time_window_reads_its_newest_memories_in_order_not_every_subjects(
    server: RunningServer, client: HindsightClient, tenant: str
) -> None:
    """A recall that names no subject, for "last week": memories_subject_time orders each subject
    apart, so a skip scan handed over every memory of the window to be sorted (at 1M memories, 56,765
    rows for 20). memories_tenant_time hands over the window's newest first, across subjects."""
    now = datetime.now(UTC)
    written = await _crowd(client, tenant, now)
    window = TimeWindow(start=now - timedelta(days=2), end=now)
    scope = Scope(tenant_id=tenant, now=now, window=window)
    statement, arguments = structured_statement(scope, {}, LIMIT, [VectorSpace.MULTILINGUAL])
    plan, rows = await _explained(server, statement, arguments)
    scans = index_scans(plan, "_tenant_id_coalesce")
    assert scans, "the window is read from memories_tenant_time, in order"
    assert rows_read(scans) <= 2 * LIMIT
    newest = [content for _, content in sorted(written, reverse=True)][:LIMIT]
    assert [row["content"] for row in rows] == newest


async def test_a_subjects_count_reads_the_subjects_rows_not_its_tenants(
    server: RunningServer, client: HindsightClient, tenant: str
) -> None:
    """A recall's first look at a subject counts it (the vector channel chooses its search by the
    count). Written as `($2 = '' OR subject = $2)`, the plan PostgreSQL caches for a prepared statement
    after its fifth run (made without the values) could not look the subject up and read the whole
    tenant; one statement per kind of scope finds the subject's rows by its index whatever the plan."""
    await _crowd(client, tenant, datetime.now(UTC))
    statement, arguments = scope_size_statement(tenant, "user-7")
    plan, rows = await _explained(server, statement, arguments)
    assert 0 < rows_read(index_scans(plan, "_subject")) <= EACH
    assert rows[0]["rows"] <= EACH
    async with server.pool.acquire() as connection, connection.transaction():
        await connection.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        await connection.execute(f"PREPARE counted AS {statement}")
        literals = ", ".join("'" + str(argument).replace("'", "''") + "'" for argument in arguments)
        explained = await connection.fetchval(f"EXPLAIN (FORMAT JSON) EXECUTE counted({literals})")
        await connection.execute("DEALLOCATE counted")
    generic = json.loads(explained) if isinstance(explained, str) else explained
    assert any("subject = $2" in scan.get("Index Cond", "") for scan in index_scans(generic, "_subject"))
