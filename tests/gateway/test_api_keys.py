"""The gateway in front of memory servers that require API keys: it sends the caller's tenant's key."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import mcp_types as types
import pytest

from hindsight_server.config import Settings
from hindsight_server.process.running import RunningServer
from hindsight_server.process.server import start_server
from tests.gateway.conftest import Connect
from tests.support.processes import create_key


@pytest.fixture
async def keyed_target(make_settings: Callable[..., Settings]) -> AsyncIterator[str]:
    running: RunningServer = await start_server(make_settings(security__require_api_keys=True))
    yield f"127.0.0.1:{running.port}"
    await running.stop()


def _text(result: types.CallToolResult) -> str:
    assert isinstance(result.content[0], types.TextContent)
    return result.content[0].text


async def test_the_gateway_sends_its_tenants_api_key(
    connect: Connect, keyed_target: str, postgres_dsn: str, tenant: str
) -> None:
    api_key = (await create_key(postgres_dsn, tenant))["api_key"]
    write = {"session_id": "s", "memory_type": "semantic", "summary": "用户偏好靠窗座位"}
    async with connect(targets=[keyed_target]) as without_key:
        refused = await without_key.call_tool("memory_write", write)
    assert refused.is_error and "UNAUTHENTICATED" in _text(refused)
    async with connect(targets=[keyed_target], api_keys={tenant: api_key}) as with_key:
        written = await with_key.call_tool("memory_write", write)
        assert not written.is_error, _text(written)
        found = await with_key.call_tool("memory_recall", {"session_id": "s", "query": "靠窗"})
    assert "用户偏好靠窗座位" in _text(found)
