"""memory_forget through the SDK's own client on both transports, against the session's memory server:
listed with its schema and its WHEN; without confirm it offers only what matches and deletes nothing;
confirm needs the ids; with them it erases exactly those (versions included) and nothing else, once."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import grpc
import mcp_types as types
import pytest
from mcp import ClientSession

from gateway_mcp.calls import FORGET_REASON
from hindsight.client import HindsightClient
from tests.gateway.conftest import Connect

ADDRESS = "用户的住址是北京市朝阳区建国路88号"
NEW_ADDRESS = "用户的住址是上海市徐汇区漕溪北路1号"
# The office's, not the home's: a home address in English would be a new version of the Chinese one.
ADDRESS_EN = "The user's office address is 12 Baker Street, London"
TEA = "用户喜欢喝乌龙茶"
PEANUTS = "用户对花生过敏"


def _text(result: types.CallToolResult) -> str:
    assert len(result.content) == 1 and isinstance(result.content[0], types.TextContent)
    return result.content[0].text


async def _ok(session: ClientSession, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    result = await session.call_tool(tool, arguments)
    assert not result.is_error, _text(result)
    assert result.structured_content is not None
    return {"text": _text(result), **result.structured_content}


async def _error(session: ClientSession, arguments: dict[str, Any]) -> str:
    result = await session.call_tool("memory_forget", arguments)
    assert result.is_error, result
    text = _text(result)
    assert "Traceback" not in text and 'File "' not in text
    return text


async def _remember(session: ClientSession, summary: str, **more: Any) -> str:
    """One semantic memory in session s-1, written the way an agent writes it; its id."""
    arguments = {"session_id": "s-1", "memory_type": "semantic", "summary": summary, **more}
    written = await _ok(session, "memory_write", arguments)
    return str(written["id"])


async def _recalled(session: ClientSession, query: str) -> list[str]:
    found = await _ok(session, "memory_recall", {"session_id": "s-2", "query": query, "top_k": 50})
    return [hit["id"] for hit in found["hits"]]


async def _gone(client: HindsightClient, tenant: str, memory_id: str) -> bool:
    try:
        await client.get(tenant, memory_id)
    except grpc.aio.AioRpcError as error:
        assert error.code() == grpc.StatusCode.NOT_FOUND, error
        return True
    return False


# --------------------------------------------------------------------------------- no Erase needed


async def test_listed_with_its_schema_and_when_to_call_it(connect: Connect) -> None:
    async with connect() as session:
        tools = {tool.name: tool for tool in (await session.list_tools()).tools}
    forget = tools["memory_forget"]
    schema = forget.input_schema
    assert schema["required"] == ["query"] and schema["additionalProperties"] is False
    assert set(schema["properties"]) == {"query", "confirm", "memory_ids", "subject"}
    confirm = schema["properties"]["confirm"]
    assert confirm["type"] == "boolean" and confirm["default"] is False
    ids = schema["properties"]["memory_ids"]
    assert ids["type"] == "array" and ids["items"] == {"type": "string", "format": "uuid"}
    assert forget.output_schema is not None and "candidates" in forget.output_schema["properties"]
    assert forget.annotations is not None
    assert forget.annotations.destructive_hint is True and forget.annotations.read_only_hint is False
    description = forget.description or ""
    cues = ("忘掉我的住址", "别再记着我对花生过敏", "forget my address", "delete what I told you about my ex")
    assert all(cue in description for cue in cues), description
    assert "WITHOUT confirm" in description and "confirm: true" in description
    assert "memory_write" in description and "working memory" in description  # when NOT to call it


async def test_without_confirm_it_offers_what_matches_and_deletes_nothing(
    connect: Connect, client: HindsightClient, tenant: str
) -> None:
    async with connect() as session:
        # One session, one after the other: each is the next one's neighbour, which recall's context
        # stage adds to a match; forget must not offer those.
        address = await _remember(session, ADDRESS)
        tea = await _remember(session, TEA)
        english = await _remember(session, ADDRESS_EN)
        peanuts = await _remember(session, PEANUTS)
        zh = await _ok(session, "memory_forget", {"query": "我的住址"})
        en = await _ok(session, "memory_forget", {"query": "my address"})
        allergy = await _ok(session, "memory_forget", {"query": "我对花生过敏", "confirm": False})
        recalled = await _recalled(session, "我的住址")

    assert [c["id"] for c in zh["candidates"]] == zh["memory_ids"] == [address]
    assert [c["id"] for c in en["candidates"]] == [english]
    assert [c["id"] for c in allergy["candidates"]] == [peanuts]
    (candidate,) = zh["candidates"]
    assert (candidate["content"], candidate["memory_type"], candidate["kind"]) == (
        ADDRESS,
        "semantic",
        "fact",
    )
    assert candidate["created_at"] is not None and candidate["score"] > 0
    assert zh["confirmed"] is False and zh["memories_erased"] == 0 and zh["erasure_id"] == ""
    note = f"nothing was deleted; call again with confirm: true and memory_ids: {json.dumps([address])}"
    assert zh["note"].startswith(note) and note in zh["text"] and ADDRESS in zh["text"]
    # Nothing was deleted: every memory is still there, and recall still finds the address.
    for memory_id in (address, tea, english, peanuts):
        assert not await _gone(client, tenant, memory_id)
    assert address in recalled
    assert len([m async for m in client.list_all(tenant)]) == 4


async def test_candidates_are_ranked_by_meaning_not_by_age_or_tier(connect: Connect) -> None:
    """A year-old fact that matches both words comes before today's episode that matches one (recall's
    default ranking, which weighs recency and tier in, does not keep both in this order)."""
    a_year_ago = (datetime.now(UTC) - timedelta(days=365)).isoformat()
    async with connect() as session:
        # Each alone in its session, so neither is the other's neighbour.
        both = await _remember(
            session, "用户的住址在朝阳区建国路88号", session_id="s-old", occurred_at=a_year_ago
        )
        one = await _ok(
            session,
            "memory_write",
            {"session_id": "s-new", "memory_type": "episodic", "summary": "今天讨论了住址变更的流程"},
        )
        answer = await _ok(session, "memory_forget", {"query": "我的住址 朝阳区"})
    assert [c["id"] for c in answer["candidates"]] == [both, one["id"]]


async def test_nothing_matching_is_said_plainly(connect: Connect) -> None:
    async with connect() as session:
        await _remember(session, TEA)
        answer = await _ok(session, "memory_forget", {"query": "我前任的事"})
    assert answer["candidates"] == [] and answer["memory_ids"] == []
    assert "nothing was deleted" in answer["text"] and "nothing to erase" in answer["note"]


async def test_it_offers_a_few_and_says_when_more_match(connect: Connect) -> None:
    async with connect() as session:
        for floor in range(7):
            await _remember(session, f"会议记录第{floor}条：住址变更流程讨论")
        answer = await _ok(session, "memory_forget", {"query": "住址变更"})
    assert len(answer["candidates"]) == 5
    assert "more memories match" in answer["note"]


async def test_confirm_needs_the_ids_and_the_ids_need_confirm(
    connect: Connect, client: HindsightClient, tenant: str
) -> None:
    async with connect() as session:
        address = await _remember(session, ADDRESS)
        missing = await _error(session, {"query": "我的住址", "confirm": True})
        empty = await _error(session, {"query": "我的住址", "confirm": True, "memory_ids": []})
        not_uuid = await _error(
            session, {"query": "我的住址", "confirm": True, "memory_ids": [address, "88号"]}
        )
        unconfirmed = await _error(session, {"query": "我的住址", "memory_ids": [address]})
        no_query = await _error(session, {"confirm": True, "memory_ids": [address]})
    for refused in (missing, empty):
        assert refused.startswith("invalid arguments: memory_ids: required with confirm: true"), refused
    assert not_uuid.startswith("invalid arguments: memory_ids.1: Input should be a valid UUID"), not_uuid
    assert unconfirmed.startswith("invalid arguments: memory_ids: only taken with confirm: true"), unconfirmed
    assert no_query == "invalid arguments: query: Field required"
    assert all("nothing was deleted" in text for text in (missing, empty, unconfirmed))
    assert not await _gone(client, tenant, address)


# -------------------------------------------------------------------------- with the server's Erase


async def test_confirmed_it_erases_those_memories_with_their_versions_and_nothing_else(
    connect: Connect, client: HindsightClient, tenant: str
) -> None:
    async with connect() as session:
        old = await _remember(
            session, ADDRESS, intent="home_address", entities={"address": "北京市朝阳区建国路88号"}
        )
        tea = await _remember(session, TEA)
        new = await _remember(
            session, NEW_ADDRESS, intent="home_address", entities={"address": "上海市徐汇区漕溪北路1号"}
        )
        peanuts = await _remember(session, PEANUTS)
        assert (await client.get(tenant, new)).supersedes == old  # a version chain: old <- new
        offered = await _ok(session, "memory_forget", {"query": "我的住址"})
        assert offered["memory_ids"] == [new]  # the current version; the older one is its history
        erased = await _ok(
            session,
            "memory_forget",
            {"query": "忘掉我的住址", "confirm": True, "memory_ids": offered["memory_ids"]},
        )
        recalled = await _recalled(session, "我的住址")
        still = await _ok(session, "memory_forget", {"query": "我的住址"})
        tea_recalled = await _recalled(session, "乌龙茶")

    assert erased["confirmed"] is True and erased["memory_ids"] == [new]
    assert erased["memories_erased"] == 2 and erased["erasure_id"]  # the memory and its older version
    assert erased["erased_at"] is not None and erased["candidates"] == []
    assert erased["text"].startswith("Erased 2 memories for the id given")
    assert await _gone(client, tenant, new) and await _gone(client, tenant, old)
    assert new not in recalled and old not in recalled
    assert still["candidates"] == []
    # What the user did not ask about stays.
    assert not await _gone(client, tenant, tea) and not await _gone(client, tenant, peanuts)
    assert tea in tea_recalled


async def test_a_repeated_confirmed_call_is_harmless(
    connect: Connect, client: HindsightClient, tenant: str
) -> None:
    async with connect() as session:
        address = await _remember(session, ADDRESS)
        english = await _remember(session, ADDRESS_EN)
        tea = await _remember(session, TEA)
        ids = [address, english]
        arguments = {"query": "my address, 我的住址", "confirm": True, "memory_ids": ids}
        first = await _ok(session, "memory_forget", arguments)
        again = await _ok(session, "memory_forget", arguments)
        # The same ids in another order (and in capitals) are the same erasure.
        reordered = [english.upper(), address]
        shuffled = await _ok(session, "memory_forget", {**arguments, "memory_ids": reordered})
        # Asked in other words: the same ids, the same erasure.
        reworded = await _ok(session, "memory_forget", {**arguments, "query": "forget where I live"})
    assert first["memories_erased"] == 2
    assert again["erasure_id"] == shuffled["erasure_id"] == reworded["erasure_id"] == first["erasure_id"]
    assert again["memories_erased"] == shuffled["memories_erased"] == reworded["memories_erased"] == 2
    assert shuffled["memory_ids"] == [english, address]  # canonical ids
    assert await _gone(client, tenant, address) and await _gone(client, tenant, english)
    assert not await _gone(client, tenant, tea)


async def test_unknown_ids_and_another_tenants_are_reported_as_nothing_erased(
    connect: Connect, client: HindsightClient, tenant: str
) -> None:
    other = f"{tenant}-other"
    theirs = (await client.write(other, ADDRESS, tier="semantic", kind="fact")).memory.id
    unknown = str(uuid.uuid4())
    async with connect() as session:
        mine = await _remember(session, TEA)
        answer = await _ok(
            session, "memory_forget", {"query": "我的住址", "confirm": True, "memory_ids": [theirs, unknown]}
        )
    assert answer["confirmed"] is True and answer["memories_erased"] == 0
    assert answer["text"].startswith("Erased nothing: no memory of this user has the 2 ids given")
    assert not await _gone(client, other, theirs) and not await _gone(client, tenant, mine)


@pytest.mark.parametrize("query", ["忘掉我的住址" * 50, "forget my address"])
async def test_the_audit_record_names_the_tool_and_keeps_no_word_of_the_query(
    connect: Connect, tenant: str, postgres_dsn: str, query: str
) -> None:
    """The erasure's audit record (the server's table) names the tool; the query is what the user wants
    forgotten, so none of it is kept there."""
    async with connect() as session:
        address = await _remember(session, ADDRESS)
        erased = await _ok(
            session, "memory_forget", {"query": query, "confirm": True, "memory_ids": [address]}
        )
    connection = await asyncpg.connect(postgres_dsn)
    try:
        record = await connection.fetchrow(
            "SELECT scope, memory_ids, reason, memories FROM erasures WHERE tenant_id = $1 AND id = $2",
            tenant,
            uuid.UUID(erased["erasure_id"]),
        )
    finally:
        await connection.close()
    assert record is not None
    assert (record["scope"], [str(i) for i in record["memory_ids"]]) == ("memories", [address])
    assert record["reason"] == FORGET_REASON and record["memories"] == 1
    assert query[:8] not in record["reason"]
