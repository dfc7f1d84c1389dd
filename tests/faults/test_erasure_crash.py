"""An erasure whose server is killed midway (SIGKILL, `hindsight serve` in its own process) is finished
by another server's `erasures` job: nothing of the subject is left, the audit record says done with the
full counts, and the other subject is untouched."""

from __future__ import annotations

import asyncio
import signal
import uuid
from collections.abc import Awaitable, Callable

import asyncpg
import grpc
import pytest

from hindsight.client import HindsightClient, memory_input
from tests.support.eventually import eventually
from tests.support.processes import Background, free_port

pytestmark = pytest.mark.timeout(180)

MEMORIES = 3000


def _server(dsn: str, port: int, **settings: str) -> Background:
    env = {
        "HINDSIGHT_DATABASE__DSN": dsn,
        "HINDSIGHT_SECURITY__REQUIRE_API_KEYS": "false",
        "HINDSIGHT_INFERENCE__URL": "",
        "HINDSIGHT_JOBS__BATCH_SIZE": "50",  # many small batches: the kill lands between two of them
        **{f"HINDSIGHT_{key.upper()}": value for key, value in settings.items()},
    }
    return Background(["serve", "--port", str(port)], env=env)


async def test_an_erasure_cut_by_a_killed_server_is_finished_by_another(
    fresh_database: Callable[[], Awaitable[str]],
) -> None:
    dsn = await fresh_database()
    tenant = f"t-{uuid.uuid4().hex[:12]}"
    first = _server(dsn, port := free_port(), jobs__enabled="false")
    await first.start()
    await first.wait_for("listening on")
    async with HindsightClient(f"127.0.0.1:{port}", timeout_s=60) as client:
        for start in range(0, MEMORIES, 500):
            batch = [
                memory_input(f"zqfrank note {i}", tier="semantic", kind="fact", subject="frank")
                for i in range(start, start + 500)
            ]
            await client.write_batch(tenant, batch, verbatim=True)
        await client.write(tenant, "grace keeps her note", tier="semantic", kind="fact", subject="grace")
        erasing = asyncio.create_task(client.erase(tenant, subject="frank", reason="crash test"))

        connection = await asyncpg.connect(dsn)
        try:

            async def midway() -> bool:
                removed = await connection.fetchval(
                    "SELECT memories FROM erasures WHERE tenant_id = $1 AND state = 'running'", tenant
                )
                return bool(removed) and removed < MEMORIES // 2

            await eventually(midway, timeout_s=60)
            assert first.process is not None
            first.process.send_signal(signal.SIGKILL)
            await first.stop(timeout_s=10)
            with pytest.raises(grpc.aio.AioRpcError):
                await erasing  # the caller learns the call did not complete
            left = await connection.fetchval(
                "SELECT count(*) FROM memories WHERE tenant_id = $1 AND subject = 'frank'", tenant
            )
            assert 0 < left < MEMORIES  # cut midway, batches committed so far stay committed

            second = _server(
                dsn,
                free_port(),
                jobs__poll_s="0.2",
                jobs__erasures_interval_s="0.5",
                jobs__erasure_stale_s="1",
            )
            await second.start()
            try:
                await second.wait_for("listening on")

                async def done() -> bool:
                    state = await connection.fetchval(
                        "SELECT state FROM erasures WHERE tenant_id = $1", tenant
                    )
                    return bool(state == "done")

                await eventually(done, timeout_s=60)
            finally:
                await second.stop()
            record = await connection.fetchrow("SELECT * FROM erasures WHERE tenant_id = $1", tenant)
            assert record["memories"] == MEMORIES
            counts = await connection.fetchrow(
                """SELECT count(*) FILTER (WHERE subject = 'frank') AS frank,
                          count(*) FILTER (WHERE subject = 'grace') AS grace
                   FROM memories WHERE tenant_id = $1""",
                tenant,
            )
            assert (counts["frank"], counts["grace"]) == (0, 1)
        finally:
            await connection.close()
