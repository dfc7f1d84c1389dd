"""Every capability from MCP alone: an agent, through the SDK's own client on both transports, logs the
turns of a session, reads its summary, ends it, settles the pending memories with the user's word, and
reads a memory's history; each tool's schema is strict and its refusals name the argument."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from mcp import ClientSession

from gateway_mcp.auth import hash_token
from gateway_mcp.config import TokenBinding, load_gateway_settings
from hindsight.client import HindsightClient
from hindsight.v1 import memory_pb2 as pb
from tests.gateway.conftest import Connect
from tests.gateway.test_tools import _error, _ok, _text
from tests.support.mcp_sessions import http_gateway, http_session

NEW_TOOLS = {
    "memory_append_turn",
    "memory_end_session",
    "memory_pending",
    "memory_confirm_pending",
    "memory_reject_pending",
    "memory_history",
}


async def _content(session: ClientSession, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    result = await _ok(session, tool, arguments)
    content = result.structured_content  # typed Any by mcp
    assert isinstance(content, dict), content
    return content


def _session_id() -> str:
    return f"s-{uuid.uuid4().hex[:8]}"


async def test_the_new_tools_have_strict_schemas(connect: Connect) -> None:
    async with connect() as session:
        tools = {tool.name: tool for tool in (await session.list_tools()).tools}
    assert set(tools) >= NEW_TOOLS
    for name in NEW_TOOLS:
        schema = tools[name].input_schema
        assert schema["type"] == "object" and schema["additionalProperties"] is False, name
        assert "WHEN" in (tools[name].description or ""), name
    append = tools["memory_append_turn"].input_schema
    assert append["required"] == ["session_id", "role", "text"]
    assert append["properties"]["role"]["enum"] == ["user", "assistant", "system", "tool"]
    assert append["properties"]["text"]["maxLength"] == 16_384
    assert append["properties"]["session_id"]["minLength"] == 1
    end = tools["memory_end_session"].input_schema
    assert end["required"] == ["session_id"]
    assert end["properties"]["reason"]["enum"] == ["task_done", "remember_this", "session_end"]
    pending = tools["memory_pending"].input_schema
    assert "required" not in pending
    assert (pending["properties"]["limit"]["minimum"], pending["properties"]["limit"]["maximum"]) == (1, 50)
    for name in ("memory_confirm_pending", "memory_reject_pending", "memory_history"):
        schema = tools[name].input_schema
        assert schema["required"] == ["memory_id"] and schema["properties"]["memory_id"]["format"] == "uuid"
    annotations = {name: tools[name].annotations for name in NEW_TOOLS}
    assert annotations["memory_pending"] is not None and annotations["memory_pending"].read_only_hint
    assert annotations["memory_history"] is not None and annotations["memory_history"].read_only_hint
    reject = annotations["memory_reject_pending"]
    assert reject is not None and reject.destructive_hint and not reject.read_only_hint


async def test_bad_arguments_are_refused_naming_the_argument(connect: Connect) -> None:
    turn = {"session_id": "s", "role": "user", "text": "hi"}
    async with connect() as session:
        extra = await _error(session, "memory_append_turn", {**turn, "speaker": "me"})
        role = await _error(session, "memory_append_turn", {**turn, "role": "narrator"})
        wrong_type = await _error(session, "memory_append_turn", {**turn, "text": 42})
        missing = await _error(session, "memory_append_turn", {"session_id": "s", "text": "hi"})
        reason = await _error(session, "memory_end_session", {"session_id": "s", "reason": "tired"})
        limit = await _error(session, "memory_pending", {"limit": 0})
        not_an_id = await _error(session, "memory_confirm_pending", {"memory_id": "abc"})
        history_extra = await _error(session, "memory_history", {"memory_id": str(uuid.uuid4()), "all": True})
        blank = await _error(session, "memory_append_turn", {**turn, "text": "   "})
    assert extra == "invalid arguments: speaker: Extra inputs are not permitted"
    assert role.startswith("invalid arguments: role:") and "'user', 'assistant', 'system' or 'tool'" in role
    assert wrong_type == "invalid arguments: text: Input should be a valid string"
    assert missing == "invalid arguments: role: Field required"
    assert reason.startswith("invalid arguments: reason:") and "'task_done'" in reason
    assert limit == "invalid arguments: limit: Input should be greater than or equal to 1"
    assert not_an_id.startswith("invalid arguments: memory_id:") and "UUID" in not_an_id
    assert history_extra == "invalid arguments: all: Extra inputs are not permitted"
    assert blank == "invalid argument: text: must not be empty"  # the server's, named as the tool's


async def test_an_agent_logs_a_session_summarizes_and_ends_it(connect: Connect) -> None:
    session_id = _session_id()
    turns = [
        ("user", "我要订下周三下午的会议室, 10个人, A栋"),
        ("assistant", "好的，A栋301下周三下午有空，要订吗？"),
        ("user", "改成周五"),
    ]
    async with connect() as session:
        unknown = await _error(session, "memory_summarize", {"session_id": session_id})
        nothing_to_end = await _error(session, "memory_end_session", {"session_id": session_id})
        appended = [
            await _ok(session, "memory_append_turn", {"session_id": session_id, "role": role, "text": text})
            for role, text in turns
        ]
        summary = await _content(session, "memory_summarize", {"session_id": session_id})
        ended = await _ok(session, "memory_end_session", {"session_id": session_id, "reason": "task_done"})
        again = await _content(session, "memory_end_session", {"session_id": session_id})
    assert unknown.startswith("not found: ") and nothing_to_end.startswith("not found: ")

    first = appended[0].structured_content
    assert first is not None
    assert first["turn"] == {
        "index": 1,
        "role": "user",
        "text": turns[0][1],
        "occurred_at": first["turn"]["occurred_at"],
    }
    assert first["summary_refreshed"] is True and first["summary"]["confirmed"]["people"] == 10
    assert _text(appended[0]).startswith(f"Added turn 1 (user) to session {session_id}.")
    last = appended[-1].structured_content
    assert last is not None and last["turn"]["index"] == 3
    assert "Session summary now:" in _text(appended[-1])

    assert summary["session_id"] == session_id and summary["turn_count"] == 3
    assert [(t["role"], t["text"]) for t in summary["recent_turns"]] == turns
    assert summary["confirmed"]["building"] == "A"

    content = ended.structured_content
    assert content is not None and content["consolidated"] is True
    episode = content["episode"]
    assert episode["memory_type"] == "episodic" and episode["entities"]["building"] == "A"
    assert _text(ended).startswith(f"Session {session_id} consolidated into episodic memory {episode['id']}")
    assert again == {"session_id": session_id, "consolidated": False, "episode": None}


async def test_an_agent_settles_pending_memories_with_the_users_word(
    connect: Connect, client: HindsightClient, tenant: str
) -> None:
    session_id = _session_id()
    async with connect() as session:
        jazz = await _ok(
            session,
            "memory_append_turn",
            {"session_id": session_id, "role": "user", "text": "I think maybe I like jazz", "subject": "u1"},
        )
        await _ok(
            session,
            "memory_append_turn",
            {"session_id": session_id, "role": "user", "text": "我可能喜欢爵士乐", "subject": "u1"},
        )
        listed = await _ok(session, "memory_pending", {"session_id": session_id})
        paged = await _content(session, "memory_pending", {"session_id": session_id, "limit": 1})
        content = listed.structured_content
        assert content is not None
        english, chinese = (
            next(m for m in content["memories"] if m["content"] == text)
            for text in ("I think maybe I like jazz", "我可能喜欢爵士乐")
        )
        confirmed = await _ok(session, "memory_confirm_pending", {"memory_id": english["id"]})
        repeated = await _content(session, "memory_confirm_pending", {"memory_id": english["id"]})
        rejected = await _ok(session, "memory_reject_pending", {"memory_id": chinese["id"]})
        not_pending = await _error(session, "memory_reject_pending", {"memory_id": english["id"]})
        unknown = await _error(session, "memory_confirm_pending", {"memory_id": str(uuid.uuid4())})
        left = await _ok(session, "memory_pending", {"session_id": session_id})

    said = jazz.structured_content
    assert said is not None
    (remembered,) = said["remembered"]
    assert remembered["status"] == "pending" and remembered["confidence"] < 0.7
    assert "pending" in _text(jazz) and "memory_confirm_pending" in _text(jazz)

    assert len(content["memories"]) == 2 and content["next_page_token"] == ""
    assert {m["status"] for m in content["memories"]} == {"pending"}
    assert "2 memories wait for the user's confirmation" in _text(listed)
    assert english["id"] in _text(listed) and chinese["id"] in _text(listed)
    assert len(paged["memories"]) == 1 and paged["next_page_token"]

    decision = confirmed.structured_content
    assert decision is not None
    assert decision["decision"] == "confirmed" and decision["memory"]["status"] == "active"
    assert _text(confirmed).startswith(f"Confirmed memory {english['id']}: recall uses it")
    assert repeated["decision"] == "confirmed"  # the same call again: the first answer, not an error
    gone = rejected.structured_content
    assert gone is not None and gone["memory"]["status"] == "deleted"
    assert _text(rejected).startswith(f"Rejected memory {chinese['id']}: it was deleted")
    assert "not pending" in not_pending and not_pending.endswith("(FAILED_PRECONDITION)")
    assert unknown.startswith("not found: ")
    assert _text(left) == "No memory waits for confirmation."
    assert (await client.get(tenant, english["id"])).status == pb.STATUS_ACTIVE
    assert (await client.get(tenant, chinese["id"])).status == pb.STATUS_DELETED


async def test_an_agent_reads_the_history_of_a_changed_memory(connect: Connect) -> None:
    booking = {"session_id": "s", "memory_type": "episodic", "kind": "task", "intent": "book_meeting_room"}
    async with connect() as session:
        wednesday = await _content(
            session,
            "memory_write",
            {**booking, "summary": "Book meeting room, building A, Wednesday",
             "entities": {"date": "2026-12-02", "building": "A"}},
        )  # fmt: skip
        friday = await _content(
            session,
            "memory_write",
            {**booking, "summary": "Book meeting room, building A, Friday",
             "entities": {"date": "2026-12-04", "building": "A"}},
        )  # fmt: skip
        shown = await _ok(session, "memory_history", {"memory_id": wednesday["id"]})
        unknown = await _error(session, "memory_history", {"memory_id": str(uuid.uuid4())})
    assert friday["resolution"] == "superseded"
    history = shown.structured_content
    assert history is not None
    assert [v["id"] for v in history["versions"]] == [wednesday["id"], friday["id"]]
    assert [v["status"] for v in history["versions"]] == ["superseded", "active"]
    assert [v["entities"]["date"] for v in history["versions"]] == ["2026-12-02", "2026-12-04"]
    assert history["versions"][0]["superseded_by"] == friday["id"]
    assert history["current_id"] == friday["id"]
    text = _text(shown)
    assert text.startswith("2 versions, oldest first:")
    assert f"{friday['id']} (" in text and "active (believed now)" in text
    assert unknown.startswith("not found: ")


async def test_a_token_bound_to_a_subject_stays_inside_its_sessions_and_memories(
    memory_target: str, client: HindsightClient, tenant: str
) -> None:
    bob_session = _session_id()
    await client.append_turn(tenant, bob_session, "I think maybe I like jazz", subject="bob")
    (bobs_pending,) = [m async for m in client.list_all(tenant, statuses=["pending"])]
    token = f"token-{uuid.uuid4().hex}"
    binding = TokenBinding(tenant=tenant, subject="alice")
    settings = load_gateway_settings(port=0, targets=[memory_target], tokens={hash_token(token): binding})
    async with http_gateway(settings) as url, http_session(url, token) as session:
        into_bobs = await _error(
            session, "memory_append_turn", {"session_id": bob_session, "role": "user", "text": "hello"}
        )
        end_bobs = await _error(session, "memory_end_session", {"session_id": bob_session})
        named_bob = await _error(
            session,
            "memory_append_turn",
            {"session_id": _session_id(), "role": "user", "text": "hello", "subject": "bob"},
        )
        listed = await _content(session, "memory_pending", {})
        confirm_bobs = await _error(session, "memory_confirm_pending", {"memory_id": bobs_pending.id})
        history_bobs = await _error(session, "memory_history", {"memory_id": bobs_pending.id})
        history_unknown = await _error(session, "memory_history", {"memory_id": str(uuid.uuid4())})
        own = await _content(
            session,
            "memory_append_turn",
            {"session_id": _session_id(), "role": "user", "text": "I think maybe I like jazz"},
        )
        (alices_pending,) = own["remembered"]
        mine = await _content(session, "memory_confirm_pending", {"memory_id": alices_pending["id"]})
    assert into_bobs == end_bobs == f"session_id: no session {bob_session!r} of this token's subject"
    assert "acts for subject 'alice' only" in named_bob
    assert listed["memories"] == []  # bob's pending memory is not listed
    assert confirm_bobs == (
        f"memory_id: {bobs_pending.id} is not a memory of this token's subject; nothing was changed"
    )
    assert history_bobs == f"memory_id: {bobs_pending.id} is not a memory of this token's subject"
    assert history_unknown.endswith("is not a memory of this token's subject")  # reads the same
    assert (await client.get(tenant, bobs_pending.id)).status == pb.STATUS_PENDING
    assert (await client.summarize(tenant, bob_session)).turn_count == 1
    assert own["summary"]["subject"] == "alice" and mine["memory"]["status"] == "active"


@pytest.mark.parametrize("tool", sorted(NEW_TOOLS))
def test_every_new_tool_is_in_the_system_prompt(tool: str) -> None:
    from gateway_mcp.prompt import SYSTEM_PROMPT_EN, SYSTEM_PROMPT_ZH

    assert f"- {tool}" in SYSTEM_PROMPT_EN or tool in SYSTEM_PROMPT_EN
    assert tool in SYSTEM_PROMPT_ZH


async def test_an_agent_settles_its_own_private_pending_memory_and_no_other_agent_can(
    memory_target: str, client: HindsightClient, tenant: str
) -> None:
    async def private_pending(content: str) -> str:
        written = await client.write(
            tenant, content, tier="semantic", kind="preference", agent_id="agent-a",
            visibility="private", confidence=0.4,
        )  # fmt: skip
        assert written.memory.status == pb.STATUS_PENDING
        return written.memory.id

    kept, dropped = await private_pending("likes jazz, maybe"), await private_pending("likes opera, maybe")
    tokens = {"a": f"token-{uuid.uuid4().hex}", "b": f"token-{uuid.uuid4().hex}"}
    bindings = {
        hash_token(token): TokenBinding(tenant=tenant, agent_id=f"agent-{name}")
        for name, token in tokens.items()
    }
    settings = load_gateway_settings(port=0, targets=[memory_target], tokens=bindings)
    async with http_gateway(settings) as url:
        async with http_session(url, tokens["b"]) as session:
            b_confirms = await _error(session, "memory_confirm_pending", {"memory_id": kept})
            b_rejects = await _error(session, "memory_reject_pending", {"memory_id": dropped})
        async with http_session(url, tokens["a"]) as session:
            confirmed = await _content(session, "memory_confirm_pending", {"memory_id": kept})
            rejected = await _content(session, "memory_reject_pending", {"memory_id": dropped})
        async with http_session(url, tokens["b"]) as session:  # after A's decision: still not B's to see
            b_again = await _error(session, "memory_confirm_pending", {"memory_id": kept})
    assert b_confirms.startswith("not found: ") and b_rejects.startswith("not found: ")
    assert b_again.startswith("not found: ")
    assert confirmed["memory"]["status"] == "active" and rejected["memory"]["status"] == "deleted"
    assert (await client.get(tenant, kept, agent_id="agent-a")).status == pb.STATUS_ACTIVE


async def test_an_agents_session_is_out_of_another_agents_reach(memory_target: str, tenant: str) -> None:
    tokens = {"a": f"token-{uuid.uuid4().hex}", "b": f"token-{uuid.uuid4().hex}"}
    bindings = {
        hash_token(token): TokenBinding(tenant=tenant, agent_id=f"agent-{name}")
        for name, token in tokens.items()
    }
    settings = load_gateway_settings(port=0, targets=[memory_target], tokens=bindings)
    session_id = _session_id()
    turn = {"session_id": session_id, "role": "user", "text": "my passport number is X123"}
    async with http_gateway(settings) as url:
        async with http_session(url, tokens["a"]) as session:
            await _content(session, "memory_append_turn", turn)
        async with http_session(url, tokens["b"]) as session:
            summarized = await _error(session, "memory_summarize", {"session_id": session_id})
            appended = await _error(session, "memory_append_turn", {**turn, "text": "my seat is 3A"})
            ended = await _error(session, "memory_end_session", {"session_id": session_id})
        async with http_session(url, tokens["a"]) as session:
            summary = await _ok(session, "memory_summarize", {"session_id": session_id})
    for refusal in (summarized, appended, ended):
        assert refusal.startswith("not found: ") and "X123" not in refusal, refusal
    assert summary.structured_content is not None and summary.structured_content["turn_count"] == 1
    # No summary text after one such turn: the text shows the turn rather than an empty session.
    assert _text(summary) == "(no summary yet) 1 turn; the latest:\n1. user: my passport number is X123"
