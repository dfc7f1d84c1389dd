"""Every MCP tool with random and hostile arguments, through the SDK's own client over streamable HTTP,
against the session's memory server: never a traceback, never the gateway's "failed inside" catch-all
(its INTERNAL), never an exception escaping; a bad argument is a tool error (or a protocol error) that
names it; a good call returns the tool's structured result."""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from collections.abc import AsyncIterator
from contextlib import suppress
from datetime import datetime, timedelta, timezone
from typing import Any

import httpx2
import mcp_types as types
import pytest
from hypothesis import given
from hypothesis import strategies as st
from mcp import MCPError

from gateway_mcp.auth import hash_token
from gateway_mcp.config import GatewaySettings, load_gateway_settings
from gateway_mcp.tools import MAX_TOP_K, TOOLS
from hindsight_server.process.running import RunningServer
from tests.fuzz.checks import TALLY
from tests.fuzz.conftest import examples
from tests.fuzz.strategies import ODD, PROMPT_INJECTION, SANE_TEXT, SQL, huge_text
from tests.support.mcp_sessions import http_gateway, http_session

TENANT = f"mcp-fuzz-{uuid.uuid4().hex[:8]}"
TOKEN = f"token-{uuid.uuid4().hex}"
SCHEMAS = {spec.name: spec.arguments.model_json_schema() for spec in TOOLS}
# How the gateway names a server-side field that is not an argument (errors._ARGUMENT_NAMES).
_ALSO_NAMED = {"start/end", "memory_types", "summary", "memory_type"}


class ToolCaller:
    """One SDK client session, held open by its own task (anyio scopes must be left by the task that
    entered them) while the examples of every test send it tool calls."""

    def __init__(self, url: str) -> None:
        self._url = url
        self._calls: asyncio.Queue[tuple[str, dict[str, Any], asyncio.Future[types.CallToolResult]] | None]
        self._calls = asyncio.Queue()
        self._ready = asyncio.Event()
        self._task = asyncio.create_task(self._serve())

    async def _serve(self) -> None:
        async with http_session(self._url, TOKEN) as session:
            self._ready.set()
            while (item := await self._calls.get()) is not None:
                name, arguments, answer = item
                try:
                    answer.set_result(await session.call_tool(name, arguments))
                except Exception as error:  # handed to the example, which judges it
                    answer.set_exception(error)

    async def call(self, name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        await asyncio.wait_for(self._ready.wait(), 30)
        answer: asyncio.Future[types.CallToolResult] = asyncio.get_running_loop().create_future()
        await self._calls.put((name, arguments, answer))
        return await asyncio.wait_for(answer, 60)

    async def close(self) -> None:
        await self._calls.put(None)
        with suppress(asyncio.CancelledError):
            await asyncio.wait_for(self._task, 30)


@pytest.fixture(scope="module")
async def gateway_url(server: RunningServer) -> AsyncIterator[str]:
    settings = load_gateway_settings(
        port=0, targets=[f"127.0.0.1:{server.port}"], deadline_s=30.0, tokens={hash_token(TOKEN): TENANT},
        debug_tool=True,
    )  # fmt: skip
    async with http_gateway(settings) as url:
        yield url


@pytest.fixture(scope="module")
async def tools(gateway_url: str) -> AsyncIterator[ToolCaller]:
    caller = ToolCaller(gateway_url)
    yield caller
    await caller.close()


# ------------------------------------------------------------------------------------------ arguments

_OVERFLOWING_TIMES = [  # valid ISO 8601, but before year 1 or after year 9999 once in UTC
    "0001-01-01T00:00:00+14:00",
    "0001-01-01T05:30:00+08:00",
    "9999-12-31T23:59:59-12:00",
    "9999-12-31T20:00:00-05:00",
]
_EDGE_TIMES = [
    *_OVERFLOWING_TIMES,
    "0001-01-01T00:00:00Z",
    "9999-12-31T23:59:59Z",
    "2025-01-08T14:00:00",  # no offset
    "2025-13-45T99:00:00Z",
    "yesterday",
    "",
]
_JSON = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**64), 2**64),
        st.sampled_from([10**400, -(10**400), 2**1024]),  # JSON numbers no double holds
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(max_size=30),
        st.sampled_from(SQL + PROMPT_INJECTION + ODD),
    ),
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=15,
)


def _deep(levels: int) -> dict[str, Any]:
    value: dict[str, Any] = {"leaf": 1}
    for _ in range(levels):
        value = {"n": value}
    return value


def _hostile(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    """The edges of the declared type, or past them, or a value of another JSON type."""
    kind = "date-time" if schema.get("format") == "date-time" else schema.get("type")
    edges: dict[Any, st.SearchStrategy[Any]] = {
        "date-time": st.one_of(
            st.sampled_from(_OVERFLOWING_TIMES),
            st.sampled_from(_EDGE_TIMES),
            st.builds(
                lambda when, minutes: when.replace(tzinfo=timezone(timedelta(minutes=minutes))).isoformat(),
                st.datetimes(),
                st.integers(-14 * 60, 14 * 60),
            ),
        ),
        "object": st.one_of(
            st.dictionaries(st.text(max_size=10), _JSON, max_size=5),
            st.builds(_deep, st.sampled_from([5, 30, 150])),
            st.builds(lambda n: {f"k{i}": i for i in range(n)}, st.sampled_from([65, 2_000])),
            st.sampled_from([{"": 1}, {"a\x00": 1}, {"n": 10**400}, {"n": [2**1024]}, {"k" * 200: "v"}]),
        ),
        "integer": st.one_of(st.integers(-(2**70), 2**70), st.sampled_from([0, -1, 51, 32_001, 1.5, "5"])),
        "number": st.one_of(st.floats(allow_nan=False), st.sampled_from([-0.0, 1.0000001, 10**400, "0.5"])),
        "string": st.one_of(huge_text(), st.sampled_from(SQL + PROMPT_INJECTION + ODD), st.text(max_size=30)),
        "array": st.one_of(
            st.lists(_JSON, max_size=5), st.builds(lambda n: ["working"] * n, st.sampled_from([4, 10_000]))
        ),
    }
    return st.one_of(edges.get(kind, _JSON), edges.get(kind, _JSON), _JSON)


def _sane(name: str, schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    if schema.get("type") == "array":
        items = schema["items"]
        inner = st.sampled_from(items.get("enum", ["x"]))
        return st.lists(inner, max_size=schema.get("maxItems", 3), unique=True)
    if schema.get("type") == "integer":
        return st.integers(schema.get("minimum", 0), schema.get("maximum", 100))
    if schema.get("type") == "number":
        return st.floats(schema.get("minimum", 0), schema.get("maximum", 1))
    if schema.get("type") == "boolean":
        return st.booleans()
    if schema.get("type") == "object":
        return st.dictionaries(
            st.sampled_from(["date", "building", "seat", "人数"]), st.text(max_size=10), max_size=3
        )
    if schema.get("format") == "date-time":
        when = st.datetimes(
            min_value=datetime(2000, 1, 1),
            max_value=datetime(2024, 1, 1),
            timezones=st.just(timezone(timedelta(hours=8))),
        )
        return when.map(datetime.isoformat)
    if schema.get("format") == "uuid":
        return st.uuids().map(str)
    if name == "profile":
        return st.sampled_from(["", "default", "support", "knowledge_qa"])
    if name in ("session_id", "subject", "intent", "idempotency_key"):
        return st.one_of(st.just("s-fuzz"), st.text(alphabet="abcdefgh-_0123", min_size=1, max_size=20))
    return SANE_TEXT


def _properties(schema: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each property's own schema, with `anyOf [X, null]` (optional) reduced to X."""
    found = {}
    for name, prop in schema["properties"].items():
        options = [p for p in prop.get("anyOf", [prop]) if p.get("type") != "null"]
        found[name] = {**prop, **options[0]}
    return found


@st.composite
def _arguments(draw: st.DrawFn, tool: str) -> dict[str, Any]:
    schema = SCHEMAS[tool]
    properties = _properties(schema)
    required = set(schema.get("required", []))
    hostile = draw(
        st.one_of(st.just(frozenset()), st.frozensets(st.sampled_from(sorted(properties)), max_size=3))
    )
    arguments: dict[str, Any] = {}
    for name, prop in properties.items():
        if name in hostile:
            if draw(st.integers(0, 4)) > 0:  # else: left out, required or not
                arguments[name] = draw(_hostile(prop))
        elif name in required or draw(st.booleans()):
            arguments[name] = draw(_sane(name, prop))
    if draw(st.integers(0, 9)) == 0:
        arguments[draw(st.sampled_from(["tenant_id", "agent_id", "api_key", "x" * 300, ""]))] = draw(_JSON)
    return arguments


# ------------------------------------------------------------------------------------------ property

# The gateway's own body limit (gateway_mcp/body_limit.py: 413 past max_body_bytes, unparsed), less a
# margin for the JSON-RPC envelope.
_BODY_LIMIT = GatewaySettings().max_body_bytes - 16 * 1024
_NAMED = re.compile(r"^invalid arguments?: (?P<where>[^:]+):")


def _text(result: types.CallToolResult) -> str:
    assert len(result.content) == 1 and isinstance(result.content[0], types.TextContent), result
    return result.content[0].text


async def _judge(tools: ToolCaller, tool: str, arguments: dict[str, Any]) -> types.CallToolResult | None:
    try:
        result = await tools.call(tool, arguments)
    except MCPError as error:
        assert "Traceback" not in str(error)
        if len(json.dumps(arguments, ensure_ascii=False).encode()) > _BODY_LIMIT:
            TALLY[f"mcp:{tool}"]["413 body too large"] += 1  # the SDK's transport refuses it, unparsed
            return None
        raise AssertionError(f"{tool}: unexpected protocol error {error!r}") from error
    text = _text(result)
    assert "Traceback" not in text and 'File "' not in text, text
    assert "inside the MCP gateway" not in text, text  # the gateway's catch-all: an unexpected exception
    assert "(INTERNAL)" not in text and "(UNKNOWN)" not in text, text
    if not result.is_error:
        TALLY[f"mcp:{tool}"]["ok"] += 1
        assert result.structured_content is not None
        return result
    TALLY[f"mcp:{tool}"]["tool error"] += 1
    named = _NAMED.match(text)
    if named is not None:
        known = set(SCHEMAS[tool]["properties"]) | set(arguments) | _ALSO_NAMED | {"arguments"}
        where = named["where"].split(".")[0].split("[")[0]
        assert where in known, f"{tool}: {text!r} names no argument"
    return None


@examples(60)
@given(data=st.data())
async def test_memory_write(tools: ToolCaller, data: st.DataObject) -> None:
    arguments = data.draw(_arguments("memory_write"))
    result = await _judge(tools, "memory_write", arguments)
    if result is not None:
        written = result.structured_content
        assert written is not None and uuid.UUID(written["id"])


@examples(60)
@given(data=st.data())
async def test_memory_recall(tools: ToolCaller, data: st.DataObject) -> None:
    arguments = data.draw(_arguments("memory_recall"))
    result = await _judge(tools, "memory_recall", arguments)
    if result is not None:
        found = result.structured_content
        assert found is not None
        top_k = arguments.get("top_k")
        assert len(found["hits"]) <= (top_k if isinstance(top_k, int) and top_k > 0 else 5) <= MAX_TOP_K


@examples(15)
@given(data=st.data())
async def test_memory_summarize_and_debug(tools: ToolCaller, data: st.DataObject) -> None:
    for tool in ("memory_summarize", "memory_debug"):
        await _judge(tools, tool, data.draw(_arguments(tool)))


_SESSION_AND_PENDING_TOOLS = (
    "memory_append_turn",
    "memory_end_session",
    "memory_pending",
    "memory_confirm_pending",
    "memory_reject_pending",
    "memory_history",
)


@examples(15)
@given(data=st.data())
async def test_the_session_pending_and_history_tools(tools: ToolCaller, data: st.DataObject) -> None:
    for tool in _SESSION_AND_PENDING_TOOLS:
        result = await _judge(tools, tool, data.draw(_arguments(tool)))
        if result is not None and tool == "memory_append_turn":
            appended = result.structured_content
            assert appended is not None and appended["turn"]["index"] >= 1


@examples(40)
@given(data=st.data())
async def test_memory_forget(tools: ToolCaller, data: st.DataObject) -> None:
    """Hostile arguments to the one tool that erases: a clear tool error naming the argument, or a
    preview (nothing erased) or an erasure of at most the ids given."""
    arguments = data.draw(_arguments("memory_forget"))
    result = await _judge(tools, "memory_forget", arguments)
    if result is not None:
        answer = result.structured_content
        assert answer is not None
        if arguments.get("confirm") is True:
            assert answer["memories_erased"] >= 0
        else:
            assert answer.get("confirmed") is not True  # a preview never erases


async def test_unknown_tool_is_a_protocol_error_naming_it(tools: ToolCaller) -> None:
    with pytest.raises(MCPError) as refused:
        await tools.call("memory_drop_everything", {"tenant_id": "other"})
    assert "memory_drop_everything" in str(refused.value) and "Traceback" not in str(refused.value)


@pytest.mark.parametrize(
    "body",
    [
        b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"memory_write","arguments":'
        b'{"session_id":"s","memory_type":"semantic","summary":"\\ud800"}}}',  # a lone surrogate
        b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"memory_write","arguments":'
        b'{"session_id":"s","memory_type":"semantic","summary":"\xff\xfe"}}}',  # not UTF-8
        b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"memory_recall","arguments":[1,2]}}',
        b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"memory_recall","arguments":'
        + b'{"a":' * 3_000
        + b"1"
        + b"}" * 3_000
        + b"}}",
        b"[" * 100_000,
        b"\x00\x01\x02",
    ],
    ids=[
        "lone surrogate",
        "invalid UTF-8",
        "arguments not an object",
        "JSON nested 3000 deep",
        "[x100000",
        "binary",
    ],
)
async def test_bodies_json_cannot_carry(gateway_url: str, body: bytes) -> None:
    """What the SDK's client cannot even send: an error answer in JSON-RPC, never a 500 or a traceback."""
    headers = {
        "Authorization": f"Bearer {TOKEN}",
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2025-06-18",
    }
    async with httpx2.AsyncClient(timeout=30) as http:
        answer = await http.post(gateway_url, content=body, headers=headers)
    TALLY["mcp:raw body"][str(answer.status_code)] += 1
    assert answer.status_code < 500, answer.text
    assert "Traceback" not in answer.text
    if answer.status_code == 200:
        reply = answer.json()
        assert "error" in reply or reply["result"].get("isError"), reply


# Bugs the fuzzing found in the gateway, fixed in gateway_mcp/tools.py: each ended in the catch-all
# "memory_write failed inside the MCP gateway (OverflowError)" instead of naming the argument.
GATEWAY_FIXES = [
    ("memory_write", {"occurred_at": "0001-01-01T00:00:00+14:00"}, "occurred_at"),
    ("memory_write", {"valid_to": "9999-12-31T23:59:59-12:00"}, "valid_to"),
    ("memory_write", {"entities": {"n": 10**400}}, "entities"),
    ("memory_recall", {"start": "0001-01-01T00:00:00+01:00"}, "start"),
    ("memory_recall", {"entities": {"n": [1, -(2**1024)]}}, "entities"),
    # ... and (DecodeError) entities nested deeper than protobuf parses: the client could not build the call.
    ("memory_write", {"entities": _deep(150)}, "entities"),
]
_REQUIRED = {
    "memory_write": {"session_id": "s", "memory_type": "semantic", "summary": "x"},
    "memory_recall": {"session_id": "s", "query": "x"},
}


@pytest.mark.parametrize(("tool", "arguments", "argument"), GATEWAY_FIXES, ids=[c[2] for c in GATEWAY_FIXES])
async def test_fixed_in_the_gateway(
    tools: ToolCaller, tool: str, arguments: dict[str, Any], argument: str
) -> None:
    result = await tools.call(tool, {**_REQUIRED[tool], **arguments})
    assert result.is_error and _text(result).startswith(f"invalid arguments: {argument}: "), _text(result)
    await _judge(tools, tool, {**_REQUIRED[tool], **arguments})
