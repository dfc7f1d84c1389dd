"""`connect`: MCP clients of the SDK itself, on both transports, against gateways started for the test:

- stdio: `hindsight mcp --stdio` spawned by the SDK's stdio_client, configured through HINDSIGHT_MCP__*
  variables (the way an agent's `mcpServers` entry configures it);
- HTTP: the gateway's streamable HTTP app on a free loopback port in this process, reached over real
  HTTP by the SDK's streamable_http_client, with a bearer token that names the tenant.

Sessions are opened inside each test (anyio task groups must be left by the task that entered them).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import pytest
from mcp import ClientSession

from gateway_mcp.auth import hash_token
from gateway_mcp.config import load_gateway_settings
from hindsight_server.process.running import RunningServer
from tests.support.mcp_sessions import http_gateway, http_session, stdio_session

Connect = Callable[..., AbstractAsyncContextManager[ClientSession]]
TRANSPORTS = ["stdio", "http"]


@pytest.fixture
def memory_target(server: RunningServer) -> str:
    return f"127.0.0.1:{server.port}"


@pytest.fixture(params=TRANSPORTS)
def connect(request: pytest.FixtureRequest, memory_target: str, tenant: str) -> Connect:
    """connect(**gateway settings) -> an initialized ClientSession acting for `tenant`, over the
    parametrized transport; the gateway targets the session's memory server unless told otherwise."""
    transport: str = request.param

    @asynccontextmanager
    async def open_session(**overrides: Any) -> AsyncIterator[ClientSession]:
        values: dict[str, Any] = {"targets": [memory_target], "deadline_s": 10.0, **overrides}
        if transport == "stdio":
            async with stdio_session({"tenant": tenant, **values}) as session:
                yield session
            return
        token = f"token-{uuid.uuid4().hex}"
        settings = load_gateway_settings(port=0, tokens={hash_token(token): tenant}, **values)
        async with http_gateway(settings) as url, http_session(url, token) as session:
            yield session

    return open_session
