"""Request bodies are bounded at the gateway: a declared or streamed body over max_body_bytes gets 413
before it is read whole, and the gateway goes on serving; the tools' texts are bounded as the server
bounds them (UTF-8 bytes), so an oversized one is a tool error naming its argument."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import httpx2
import mcp_types as types

from gateway_mcp.auth import hash_token
from gateway_mcp.config import load_gateway_settings
from gateway_mcp.tools import MAX_CONTENT_BYTES, MAX_QUERY_BYTES
from tests.gateway.conftest import Connect
from tests.support.mcp_sessions import INITIALIZE, INITIALIZE_HEADERS, http_gateway, http_session

LIMIT = 64 * 1024


async def _chunks(total: int, size: int = 16 * 1024) -> AsyncIterator[bytes]:
    sent = 0
    while sent < total:
        yield b" " * size  # JSON whitespace: valid until the limit cuts it
        sent += size


async def test_an_oversized_body_is_refused_before_it_is_read(memory_target: str) -> None:
    token = f"token-{uuid.uuid4().hex}"
    settings = load_gateway_settings(
        port=0, targets=[memory_target], tokens={hash_token(token): "acme"}, max_body_bytes=LIMIT
    )
    headers = {**INITIALIZE_HEADERS, "Authorization": f"Bearer {token}"}
    async with http_gateway(settings) as url, httpx2.AsyncClient(timeout=30) as http:
        declared = await http.post(url, content=b"{" + b" " * LIMIT + b"}", headers=headers)
        assert declared.status_code == 413, declared.text
        assert "max_body_bytes" in declared.text
        # Chunked, no Content-Length: counted as it arrives, 413 at the first chunk past the limit.
        streamed = await http.post(url, content=_chunks(4 * LIMIT), headers=headers)
        assert streamed.status_code == 413, streamed.text
        # Far more than that: the connection is closed once a bounded amount was read and dropped.
        try:
            endless = await http.post(url, content=_chunks(1000 * LIMIT), headers=headers)
        except httpx2.TransportError:
            pass
        else:
            assert endless.status_code == 413
        # Under the limit, the same gateway answers as ever.
        answered = await http.post(url, json=INITIALIZE, headers=headers)
        assert answered.status_code == 200, answered.text
    async with http_gateway(settings) as url, http_session(url, token) as session:
        tools = await session.list_tools()  # the SDK's own client, under the limit
        assert {tool.name for tool in tools.tools} >= {"memory_write", "memory_recall"}


async def _tool_error(result: types.CallToolResult) -> str:
    assert result.is_error, result
    assert len(result.content) == 1 and isinstance(result.content[0], types.TextContent)
    return result.content[0].text


async def test_texts_are_bounded_as_the_server_bounds_them(connect: Connect) -> None:
    async with connect() as session:
        listed = {tool.name: tool for tool in (await session.list_tools()).tools}
        write_schema = listed["memory_write"].input_schema["properties"]["summary"]
        recall_schema = listed["memory_recall"].input_schema["properties"]["query"]
        assert (write_schema["maxLength"], recall_schema["maxLength"]) == (MAX_CONTENT_BYTES, MAX_QUERY_BYTES)
        # Characters within maxLength, but three bytes each in UTF-8: over the server's byte limit.
        long_query = await _tool_error(
            await session.call_tool("memory_recall", {"session_id": "s", "query": "靠" * 1400})
        )
        assert long_query == "invalid arguments: query: Value error, 4200 bytes in UTF-8; at most 4096"
        long_summary = await _tool_error(
            await session.call_tool(
                "memory_write", {"session_id": "s", "memory_type": "semantic", "summary": "x" * 16_385}
            )
        )
        assert long_summary.startswith("invalid arguments: summary:") and "16384" in long_summary
        fits = await session.call_tool(
            "memory_write", {"session_id": "s", "memory_type": "semantic", "summary": "窗" * 5_000}
        )
        assert not fits.is_error, fits
