"""The structured channel's time window (store/channels.py, structured_statement): the newest memories a
recall's time speaks of are read in order from an index, whether or not the recall names a subject."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from hindsight.client import HindsightClient, memory_input
from hindsight_server.domain.model import Scope, TimeWindow, VectorSpace
from hindsight_server.process.running import RunningServer
from hindsight_server.store.channels import structured_statement
from tests.store.test_write_peers import _scans

SUBJECTS = 40
EACH = 25
LIMIT = 20


async def test_a_tenant_wide_time_window_reads_its_newest_memories_in_order_not_every_subjects(
    server: RunningServer, client: HindsightClient, tenant: str
) -> None:
    """A recall that names no subject, for "last week": memories_subject_time orders each subject
    apart, so a skip scan handed over every memory of the window to be sorted (at 1M memories, 56,765
    rows for 20). memories_tenant_time hands over the window's newest first, across subjects."""
    now = datetime.now(UTC)
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
    window = TimeWindow(start=now - timedelta(days=2), end=now)
    scope = Scope(tenant_id=tenant, now=now, window=window)
    statement, arguments = structured_statement(scope, {}, LIMIT, [VectorSpace.MULTILINGUAL])
    async with server.pool.acquire() as connection:
        await connection.execute("ANALYZE memories")  # as the server does once a tenant has grown
        explained = await connection.fetchval(f"EXPLAIN (ANALYZE, FORMAT JSON) {statement}", *arguments)
        rows = await connection.fetch(statement, *arguments)
    plan: Any = json.loads(explained) if isinstance(explained, str) else explained
    scans = _scans(plan, "_tenant_id_coalesce")
    assert scans, "the window is read from memories_tenant_time, in order"
    assert sum(scan["Actual Rows"] * scan["Actual Loops"] for scan in scans) <= 2 * LIMIT
    newest = [content for _, content in sorted(written, reverse=True)][:LIMIT]
    assert [row["content"] for row in rows] == newest
