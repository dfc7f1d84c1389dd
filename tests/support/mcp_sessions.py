"""MCP sessions of the SDK's own client, on both transports, for tests that drive the gateway."""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx2
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from gateway_mcp.config import GatewaySettings
from gateway_mcp.server import HttpGateway

# A raw MCP initialize request, for tests of the HTTP layer below the SDK's client (status codes,
# headers) and the headers a Streamable HTTP client sends with it.
INITIALIZE: dict[str, Any] = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "0"},
    },
}
INITIALIZE_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@asynccontextmanager
async def http_gateway(settings: GatewaySettings) -> AsyncIterator[str]:
    gateway = HttpGateway(settings)
    url = await gateway.start()
    try:
        yield url
    finally:
        await gateway.stop()


@asynccontextmanager
async def http_session(url: str, token: str | None = None) -> AsyncIterator[ClientSession]:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=30) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


def _environment(overrides: dict[str, Any]) -> dict[str, str]:
    env = {}
    for name, value in overrides.items():
        if isinstance(value, list | tuple):
            value = ",".join(value)
        elif isinstance(value, dict | bool):
            value = json.dumps(value)
        env[f"HINDSIGHT_MCP__{name.upper()}"] = str(value)
    return env


@asynccontextmanager
async def stdio_session(overrides: dict[str, Any]) -> AsyncIterator[ClientSession]:
    server = StdioServerParameters(
        command=sys.executable, args=["-m", "hindsight_server", "mcp", "--stdio"], env=_environment(overrides)
    )
    async with stdio_client(server) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session
