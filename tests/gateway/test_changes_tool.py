"""memory_changes (the change feed as a poll) and memory_debug's audit of a memory, through the SDK's own
client on both transports, against a memory server that audits this module's tenant: the events after a
cursor with the next cursor, bounded counts and waits, a trimmed cursor's clear error, bad arguments
named, and the recalls a memory fed."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import mcp_types as types
import pytest
from mcp import ClientSession

from hindsight_server.config import Settings
from hindsight_server.process.running import RunningServer
from hindsight_server.process.server import start_server
from tests.gateway.conftest import Connect
from tests.support.eventually import eventually

AUDITED = f"mcp-audited-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
async def audit_server(make_settings: Callable[..., Settings]) -> AsyncIterator[RunningServer]:
    running = await start_server(
        make_settings(
            audit__tenants=[AUDITED],
            audit__query_text_tenants=[AUDITED],
            audit__query_hash_key="a key of at least sixteen characters",
            audit__flush_interval_s=0.05,
            feed__poll_s=0.05,
        )
    )
    yield running
    await running.stop()


@pytest.fixture
def memory_target(audit_server: RunningServer) -> str:
    return f"127.0.0.1:{audit_server.port}"


@pytest.fixture
def tenant() -> str:
    return AUDITED


def _text(result: types.CallToolResult) -> str:
    assert len(result.content) == 1 and isinstance(result.content[0], types.TextContent)
    return result.content[0].text


async def _ok(session: ClientSession, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    result = await session.call_tool(tool, arguments)
    assert not result.is_error, _text(result)
    content = result.structured_content
    assert isinstance(content, dict)
    return content


async def _error(session: ClientSession, tool: str, arguments: dict[str, Any]) -> str:
    result = await session.call_tool(tool, arguments)
    assert result.is_error, result
    text = _text(result)
    assert "Traceback" not in text
    return text


async def _write(session: ClientSession, summary: str, subject: str = "") -> str:
    written = await _ok(
        session,
        "memory_write",
        {"session_id": "s-changes", "memory_type": "semantic", "summary": summary, "subject": subject},
    )
    memory_id: str = written["id"]
    return memory_id


async def test_memory_changes_returns_the_events_after_a_cursor_and_the_next_one(connect: Connect) -> None:
    async with connect() as session:
        tools = {tool.name: tool for tool in (await session.list_tools()).tools}
        schema = tools["memory_changes"].input_schema
        assert (schema["properties"]["limit"]["minimum"], schema["properties"]["limit"]["maximum"]) == (
            1,
            100,
        )
        assert schema["properties"]["wait_s"]["maximum"] == 20 and tools["memory_changes"].annotations
        assert "WHEN" in (tools["memory_changes"].description or "")

        start = await _ok(session, "memory_changes", {"wait_s": 0.2})
        assert start["changes"] == [] and start["next_cursor"]
        subject = f"u-{uuid.uuid4().hex[:6]}"
        first = await _write(session, "User prefers window seats", subject)
        second = await _write(session, "User prefers green tea", subject)
        page = await _ok(session, "memory_changes", {"cursor": start["next_cursor"], "limit": 1})
        assert [(c["type"], c["memory_id"], c["subject"]) for c in page["changes"]] == [
            ("created", first, subject)
        ]
        assert page["next_cursor"] == page["changes"][0]["cursor"]
        rest = await _ok(session, "memory_changes", {"cursor": page["next_cursor"], "subject": subject})
        assert [c["memory_id"] for c in rest["changes"]] == [second]
        began = time.monotonic()
        idle = await _ok(session, "memory_changes", {"cursor": rest["next_cursor"], "wait_s": 0.3})
        assert idle["changes"] == [] and idle["next_cursor"] >= rest["next_cursor"]
        assert time.monotonic() - began < 10  # bounded by its wait (and the start of the stream)

        # A recall of this audited tenant: its recall.served event names what it returned and packed.
        await _ok(session, "memory_recall", {"session_id": "s-changes", "query": "window seats",
                                             "subject": subject})  # fmt: skip
        served: list[dict[str, Any]] = []

        async def arrived() -> bool:
            got = await _ok(
                session,
                "memory_changes",
                {"cursor": idle["next_cursor"], "event_types": ["recall.served"], "wait_s": 0.5},
            )
            served.extend(got["changes"])
            return bool(served)

        await eventually(arrived, timeout_s=15)
        assert served[0]["memory_id"] == "" and first in served[0]["memory_ids"]
        assert set(served[0]["packed_ids"]) <= set(served[0]["memory_ids"])


async def test_memory_changes_refuses_bad_arguments_naming_them(
    connect: Connect, audit_server: RunningServer
) -> None:
    async with connect() as session:
        for arguments, named in (
            ({"limit": 0}, "limit"),
            ({"limit": 101}, "limit"),
            ({"wait_s": 0}, "wait_s"),
            ({"wait_s": 21}, "wait_s"),
            ({"cursor": "9" * 65}, "cursor"),
            ({"event_types": ["exploded"]}, "event_types"),
            ({"subject": "s" * 300}, "subject"),
            ({"cursor": "not-a-cursor"}, "cursor"),
        ):
            assert named in await _error(session, "memory_changes", arguments), arguments

        # A cursor older than the feed keeps: a clear error that says where to start again. (Retention
        # trimmed the tenant's feed up to position 2.1, as its job records it.)
        await audit_server.pool.execute(
            """INSERT INTO change_feed_trimmed (tenant_id, xid, seq) VALUES ($1, '2', 1)
               ON CONFLICT (tenant_id) DO NOTHING""",
            AUDITED,
        )
        refused = await _error(session, "memory_changes", {"cursor": "0.0"})
        assert refused.startswith("cursor: 0.0 is older than the feed keeps") and "'oldest'" in refused


async def test_memory_debug_shows_the_recalls_a_memory_fed(connect: Connect) -> None:
    async with connect(debug_tool=True) as session:
        subject = f"u-{uuid.uuid4().hex[:6]}"
        memory_id = await _write(session, "用户偏好CSV格式导出", subject)
        recalled = await _ok(session, "memory_recall", {"session_id": "s-debug", "query": "CSV格式",
                                                        "subject": subject})  # fmt: skip
        assert memory_id in [hit["id"] for hit in recalled["hits"]]
        audit: list[dict[str, Any]] = []

        async def audited() -> bool:
            nonlocal audit
            audit = (await _ok(session, "memory_debug", {"memory_id": memory_id}))["audit"]
            return bool(audit)

        await eventually(audited, timeout_s=15)
        (entry,) = audit
        assert entry["subject"] == subject and entry["query_text"] == "CSV格式"
        assert memory_id in entry["returned_ids"] and entry["request_id"] and len(entry["query_hash"]) == 64
        both = await _ok(session, "memory_debug", {"query": "CSV格式", "memory_id": memory_id,
                                                   "subject": subject})  # fmt: skip
        assert both["ranking"][0]["id"] == memory_id and len(both["audit"]) >= 1
        unknown = await _ok(session, "memory_debug", {"memory_id": str(uuid.uuid4())})
        assert unknown["audit"] == []
        assert "query or memory_id" in await _error(session, "memory_debug", {})
