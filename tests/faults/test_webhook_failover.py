"""Two memory server processes on one database deliver one endpoint: the one holding its lease is killed
-9 mid-delivery, the other takes the endpoint over at the lease's expiry and continues from its stored
cursor. No event is lost, the order holds, and the one event that may come twice (sent, its delivery not
yet recorded) carries the same webhook-id."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from collections.abc import Awaitable, Callable

import asyncpg
import pytest

from hindsight.client import HindsightClient
from tests.support.eventually import eventually
from tests.support.processes import Background, free_port
from tests.support.webhook_receiver import WebhookReceiver

EVENTS = 60


@pytest.mark.timeout(120)
async def test_a_server_killed_mid_delivery_loses_no_event(
    fresh_database: Callable[[], Awaitable[str]],
) -> None:
    dsn = await fresh_database()
    env = {
        "HINDSIGHT_DATABASE__DSN": dsn,
        "HINDSIGHT_SECURITY__REQUIRE_API_KEYS": "false",
        "HINDSIGHT_JOBS__ENABLED": "false",
        "HINDSIGHT_WEBHOOKS__ALLOWED_NETWORKS": json.dumps(["127.0.0.1/32"]),
        "HINDSIGHT_WEBHOOKS__POLL_S": "0.05",
        "HINDSIGHT_WEBHOOKS__LEASE_S": "2",
        "HINDSIGHT_WEBHOOKS__ATTEMPT_TIMEOUT_S": "1",
        "HINDSIGHT_WEBHOOKS__RETRY_BASE_S": "0.05",
        "HINDSIGHT_WEBHOOKS__RETRY_CAP_S": "0.2",
        "HINDSIGHT_WEBHOOKS__MAX_ATTEMPTS": "1000",
    }
    servers = [Background(["serve", "--port", "0"], env) for _ in range(2)]
    await servers[0].start()
    await servers[0].wait_for(r"listening on")  # migrated: the second starts on a ready schema
    await servers[1].start()
    receiver = WebhookReceiver(port=free_port(), pause_s=0.05)  # down until every event is written
    try:
        ports = [int((await s.wait_for(r"listening on 127\.0\.0\.1:(\d+)")).group(1)) for s in servers]
        async with HindsightClient(f"127.0.0.1:{ports[0]}") as first:
            added = await first.add_webhook("acme", receiver.url)
            written = [
                (await first.write("acme", f"event number {i}", tier="semantic", kind="fact")).memory.id
                for i in range(EVENTS)
            ]
        await receiver.start()
        await eventually(lambda: len(receiver.delivered()) >= 10, timeout_s=30)

        holders: list[str] = []

        async def leased() -> bool:  # the server delivering now ("host:pid"; empty between two leases)
            connection = await asyncpg.connect(dsn)
            try:
                holders.append(await connection.fetchval("SELECT lease_holder FROM webhook_endpoints"))
            finally:
                await connection.close()
            return bool(holders[-1])

        await eventually(leased, timeout_s=10, poll_s=0.01)
        pid = int(holders[-1].rpartition(":")[2])
        (killed,) = [s for s in servers if s.process is not None and s.process.pid == pid]
        os.kill(pid, signal.SIGKILL)
        at_kill = len(receiver.delivered())
        assert at_kill < EVENTS, "the delivery ended before the kill: nothing was tested"

        await eventually(lambda: {r.event["memory_id"] for r in receiver.delivered()} >= set(written), 30)
        await asyncio.sleep(0.3)
        delivered = receiver.delivered()
        order = [written.index(r.event["memory_id"]) for r in delivered]
        assert order == sorted(order), order  # in order: a resend only of what came just before
        assert sorted(set(order)) == list(range(EVENTS))  # none lost
        assert len(order) - EVENTS <= 1  # at most the event in flight at the kill came twice
        by_id: dict[str, bytes] = {}
        for request in delivered:
            assert by_id.setdefault(request.headers["webhook-id"], request.body) == request.body
            request.verified(added.secret)
        assert await killed.stop() == -signal.SIGKILL
    finally:
        await receiver.stop()
        for server in servers:
            await server.stop()
