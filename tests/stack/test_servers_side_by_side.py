"""Stateless servers: two copies started together on one new database (racing migrations) serve the
same memories; a server configured for another embedding dimension refuses to start."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable

import pytest

from hindsight.client import HindsightClient
from hindsight_server.rpc.ops import fetch_status
from tests.support.processes import Background, run_cli


@pytest.mark.timeout(90)
async def test_two_servers_share_one_database(fresh_database: Callable[[], Awaitable[str]]) -> None:
    dsn = await fresh_database()
    # Keys are tested in tests/rpc/test_security.py; these calls carry none.
    env = {"HINDSIGHT_DATABASE__DSN": dsn, "HINDSIGHT_SECURITY__REQUIRE_API_KEYS": "false"}
    servers = [Background(["serve", "--port", "0"], env) for _ in range(2)]
    await asyncio.gather(*(s.start() for s in servers))  # both migrate at once
    try:
        ports = [int((await s.wait_for(r"listening on 127\.0\.0\.1:(\d+)")).group(1)) for s in servers]
        assert ports[0] != ports[1]
        migrated = sum("applied migration 0001_memories.sql" in s.output for s in servers)
        assert migrated == 1, [s.output for s in servers]
        async with (
            HindsightClient(f"127.0.0.1:{ports[0]}") as first,
            HindsightClient(f"127.0.0.1:{ports[1]}") as second,
        ):
            written = await first.write("acme", "shared memory", tier="semantic", kind="fact")
            assert await second.get("acme", written.memory.id) == written.memory
            again = await second.write("acme", "via the second", tier="semantic", kind="fact")
            assert {m.id async for m in first.list_all("acme")} == {written.memory.id, again.memory.id}
        # A served process's start-up objects are out of the collector's reach (telemetry/collector.py).
        collector = (await fetch_status(f"127.0.0.1:{ports[0]}", timeout_s=10)).figures["garbage_collector"]
        assert collector["frozen_objects"] > 10_000, collector
    finally:
        for server in servers:
            assert await server.stop() == 0


async def test_embedding_dimension_mismatch_stops_start_up(
    fresh_database: Callable[[], Awaitable[str]],
) -> None:
    dsn = await fresh_database()
    made = await run_cli(["migrate", "--dsn", dsn])
    assert made.code == 0, made.stderr
    assert "0001_memories.sql" in made.stdout
    result = await run_cli(
        ["serve", "--port", "0"],
        env={"HINDSIGHT_DATABASE__DSN": dsn, "HINDSIGHT_EMBEDDING__DIMENSION": "384"},
    )
    assert result.code == 2
    assert re.search(
        r"stores 512-dimensional vectors in embedding but this server is configured for 384", result.stderr
    )
    assert "Traceback" not in result.stderr
    english = await run_cli(
        ["serve", "--port", "0"],
        env={"HINDSIGHT_DATABASE__DSN": dsn, "HINDSIGHT_EMBEDDING__ENGLISH_DIMENSION": "768"},
    )
    assert english.code == 2
    assert "stores 384-dimensional vectors in embedding_en but this server is configured for 768" in (
        english.stderr
    )
