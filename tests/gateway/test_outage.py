"""The memory servers behind the gateway: one that is down makes a clear tool error (never a traceback);
a list of servers is used round robin, where a dead one costs a retry, not an error."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid

import mcp_types as types

from gateway_mcp.errors import UNAVAILABLE_MESSAGE
from tests.gateway.conftest import Connect
from tests.support.processes import free_port


def _text(result: types.CallToolResult) -> str:
    assert isinstance(result.content[0], types.TextContent)
    return result.content[0].text


async def test_a_memory_server_that_is_down_gives_a_clear_tool_error(connect: Connect) -> None:
    closed = f"127.0.0.1:{free_port()}"  # nothing listens there
    async with connect(targets=[closed], deadline_s=3.0) as session:
        started = time.monotonic()
        recall = await session.call_tool("memory_recall", {"session_id": "s", "query": "上次订的会议室"})
        write = await session.call_tool(
            "memory_write", {"session_id": "s", "memory_type": "semantic", "summary": "用户偏好靠窗座位"}
        )
        forget = await session.call_tool("memory_forget", {"query": "我的住址"})
        erase = await session.call_tool(
            "memory_forget", {"query": "我的住址", "confirm": True, "memory_ids": [str(uuid.uuid4())]}
        )
        turn = await session.call_tool(
            "memory_append_turn", {"session_id": "s", "role": "user", "text": "hi"}
        )
        pending = await session.call_tool("memory_pending", {})
        elapsed = time.monotonic() - started
        # The session survives the outage: listing needs no memory server.
        assert len((await session.list_tools()).tools) == 11
    for result in (recall, write, forget, erase, turn, pending):
        assert result.is_error
        assert _text(result).startswith(UNAVAILABLE_MESSAGE)
        assert "Traceback" not in _text(result)
        assert result.structured_content is None
    assert elapsed < 2 * 3.0  # within the deadlines, not a hang


async def test_round_robin_skips_a_dead_server(connect: Connect, memory_target: str) -> None:
    dead = f"127.0.0.1:{free_port()}"
    async with connect(targets=[dead, memory_target]) as session:
        write = await session.call_tool(
            "memory_write", {"session_id": "s", "memory_type": "semantic", "summary": "轮询也能写入"}
        )
        recalls = [
            await session.call_tool("memory_recall", {"session_id": "s", "query": "轮询写入"})
            for _ in range(8)
        ]
    assert not write.is_error, _text(write)
    for recall in recalls:
        assert not recall.is_error, _text(recall)
        assert "轮询也能写入" in _text(recall)


class CountingProxy:
    """A loopback TCP proxy to the memory server that counts the bytes it carries to it."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.bytes_up = 0
        self.port = 0
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> CountingProxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        await asyncio.gather(
            self._pipe(reader, up_writer, count=True), self._pipe(up_reader, writer, count=False)
        )

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, count: bool) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            while data := await reader.read(65536):
                self.bytes_up += len(data) if count else 0
                writer.write(data)
                await writer.drain()
        writer.close()


async def test_calls_are_spread_over_the_servers(connect: Connect, memory_target: str) -> None:
    port = int(memory_target.rpartition(":")[2])
    async with CountingProxy(port) as first, CountingProxy(port) as second:
        targets = [f"127.0.0.1:{first.port}", f"127.0.0.1:{second.port}"]
        async with connect(targets=targets) as session:
            await session.call_tool("memory_recall", {"session_id": "s", "query": "warm up"})
            before = first.bytes_up, second.bytes_up
            for _ in range(10):
                await session.call_tool("memory_recall", {"session_id": "s", "query": "round robin"})
    # Round robin: each server got about half of the 10 calls (pick_first would send all to one).
    sent = first.bytes_up - before[0], second.bytes_up - before[1]
    assert min(sent) > 0.3 * max(sent), sent
