"""The HTTP gateway answers without a per-response stall: with Nagle's algorithm on its sockets (asyncio
sets TCP_NODELAY only on sockets created with IPPROTO_TCP) every answer waited for a delayed ACK,
~45 ms, where the work takes ~3 ms."""

from __future__ import annotations

import statistics
import time

from gateway_mcp.config import load_gateway_settings
from tests.support.mcp_sessions import http_gateway, http_session


async def test_answers_come_without_a_delayed_ack_stall(memory_target: str) -> None:
    settings = load_gateway_settings(port=0, targets=[memory_target], tokens={})
    async with http_gateway(settings) as url, http_session(url) as session:
        timings = []
        for _ in range(21):
            started = time.perf_counter()
            await session.list_tools()
            timings.append(time.perf_counter() - started)
    assert statistics.median(timings) < 0.025, timings
