"""Traces of real calls over real gRPC: one trace per recall with the server span and a span per stage,
the caller's trace continued from `traceparent` (sent by hand, and by the MCP gateway), PostgreSQL
statements inside the stages, and no memory content or query text in any span."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence

import grpc
import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode

from gateway_mcp.auth import hash_token
from gateway_mcp.config import load_gateway_settings
from hindsight.client import HindsightClient
from hindsight_server.process.running import RunningServer
from tests.support.mcp_sessions import http_gateway, http_session
from tests.telemetry.conftest import (
    Telemetry,
    context_of,
    database_attributes,
    ended,
    number,
    spans_of_trace,
    started,
)

RECALL_METHOD = "hindsight.v1.MemoryService/Recall"
RECALL_STAGES = {"recall.channel.lexical", "recall.fuse", "recall.rank", "recall.rerank", "recall.pack"}
DEPRECATED_RPC = {"rpc.system", "rpc.service", "rpc.grpc.status_code"}


def _named(spans: Sequence[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [span for span in spans if span.name == name]


def _children(spans: Sequence[ReadableSpan], parent: ReadableSpan) -> list[ReadableSpan]:
    parent_id = context_of(parent).span_id
    return [span for span in spans if span.parent is not None and span.parent.span_id == parent_id]


def _server_span_with(trace_id: int) -> Callable[[Sequence[ReadableSpan]], bool]:
    def ready(spans: Sequence[ReadableSpan]) -> bool:
        return any(s.name == RECALL_METHOD and context_of(s).trace_id == trace_id for s in spans)

    return ready


def _in_trace(spans: Sequence[ReadableSpan], trace_id: int) -> list[ReadableSpan]:
    return [span for span in spans if context_of(span).trace_id == trace_id]


def _traceparent(trace_id: int, span_id: int) -> str:
    return f"00-{trace_id:032x}-{span_id:016x}-01"


async def test_one_recall_is_one_trace_with_a_span_per_stage(
    otel: Telemetry, traced_server: RunningServer, tenant: str, postgres_dsn: str
) -> None:
    trace_id, caller_span = uuid.uuid4().int, uuid.uuid4().int >> 64
    async with HindsightClient(
        f"127.0.0.1:{traced_server.port}",
        timeout_s=10,
        metadata=[("traceparent", _traceparent(trace_id, caller_span))],
    ) as client:
        await client.write(tenant, "用户偏好靠窗座位", tier="semantic", kind="preference", subject="u1")
        found = await client.recall(tenant, "靠窗", session_id="s1")
    assert found.hits

    spans = _in_trace(await spans_of_trace(otel, _server_span_with(trace_id)), trace_id)
    (server,) = _named(spans, RECALL_METHOD)
    # The caller's trace is continued: same trace id, the caller's span as the parent.
    assert server.kind is SpanKind.SERVER
    assert server.parent is not None and server.parent.span_id == caller_span
    # OpenTelemetry's current gRPC conventions, and none of the deprecated attributes.
    assert server.attributes is not None
    assert server.attributes["rpc.system.name"] == "grpc"
    assert server.attributes["rpc.method"] == RECALL_METHOD
    assert server.attributes["rpc.response.status_code"] == "OK"
    assert "error.type" not in server.attributes
    assert not set(server.attributes) & DEPRECATED_RPC

    (recall,) = _children(spans, server)
    assert recall.name == "recall"
    assert recall.attributes is not None and recall.attributes["hindsight.hits"] == len(found.hits)
    stages = {span.name: span for span in _children(spans, recall)}
    assert RECALL_STAGES | {"recall.channel.session"} <= set(stages)
    assert number(stages["recall.channel.lexical"].attributes, "hindsight.rows") >= 1
    # Stages run inside the recall and in order: fuse, rank, rerank, pack after every channel.
    for name in ("recall.fuse", "recall.rank", "recall.rerank", "recall.pack"):
        assert started(recall) <= started(stages[name]) <= ended(stages[name]) <= ended(recall)
    assert ended(stages["recall.channel.lexical"]) <= started(stages["recall.fuse"])
    assert ended(stages["recall.fuse"]) <= started(stages["recall.rank"])
    assert ended(stages["recall.rerank"]) <= started(stages["recall.pack"])

    # PostgreSQL: a client span per statement inside the channel that ran it, named by operation.
    statements = _children(spans, stages["recall.channel.lexical"])
    assert statements and all(s.kind is SpanKind.CLIENT for s in statements)
    first = statements[0].attributes
    assert first is not None and first["db.system.name"] == "postgresql" and "db.system" not in first
    assert first["db.operation.name"] == "SELECT"
    # Where the statement went: the database and the server (here a Unix socket) of the server's DSN.
    where = database_attributes(postgres_dsn)
    assert {key: first.get(key) for key in ("db.namespace", "server.address", "server.port")} == {
        "server.port": None,
        **where,
    }
    assert "db.query.text" not in first and "db.statement" not in first
    # The context channel runs inside rank, around the strongest matches, with its own statement.
    (context,) = _named(_children(spans, stages["recall.rank"]), "recall.channel.context")
    assert [s.name for s in _children(spans, context)][:1] == ["SELECT memories"]


async def test_writes_trace_their_stages(
    otel: Telemetry, traced_client: HindsightClient, tenant: str
) -> None:
    otel.spans.clear()
    await traced_client.write(tenant, "会议室在三楼", tier="semantic", kind="fact")

    def ready(spans: Sequence[ReadableSpan]) -> bool:
        return any(s.name == "hindsight.v1.MemoryService/Write" for s in spans)

    spans = await spans_of_trace(otel, ready)
    (server,) = _named(spans, "hindsight.v1.MemoryService/Write")
    write, token = sorted(_children(spans, server), key=lambda span: span.start_time or 0)
    assert write.name == "write"
    assert token.name == "SELECT"  # the consistency token: the primary's WAL position after the commit
    names = {span.name for span in _children(spans, write)}
    assert "write.store" in names  # no inference tier here: embedding is skipped before its stage
    (store,) = _named(_children(spans, write), "write.store")
    assert {s.attributes["db.operation.name"] for s in _children(spans, store) if s.attributes} >= {"INSERT"}


async def test_no_span_carries_content_or_query_text(
    otel: Telemetry, traced_client: HindsightClient, tenant: str
) -> None:
    marker = f"zebra{uuid.uuid4().hex[:10]}"
    otel.spans.clear()  # only this test's spans: the checks below must see the ones that carry the marker
    await traced_client.write(
        tenant, f"the {marker} preference is green tea", tier="semantic", kind="preference"
    )
    await traced_client.recall(tenant, f"{marker} tea")
    await traced_client.recall(tenant, f"{marker} tea")  # a second recall: the caches are warm

    def leaks(span: ReadableSpan) -> bool:
        texts = [span.name, *(str(v) for v in (span.attributes or {}).values())]
        for event in span.events:
            texts += [event.name, *(str(v) for v in (event.attributes or {}).values())]
        return any(marker in text for text in texts)

    def both_recalls_served(spans: Sequence[ReadableSpan]) -> bool:
        return sum(s.name == RECALL_METHOD and s.kind is SpanKind.SERVER for s in spans) >= 2

    spans = await spans_of_trace(otel, both_recalls_served)
    assert [span.name for span in spans if leaks(span)] == []


async def test_the_mcp_gateway_carries_the_trace_to_the_server(
    otel: Telemetry, traced_server: RunningServer, tenant: str
) -> None:
    token = f"token-{uuid.uuid4().hex}"
    settings = load_gateway_settings(
        port=0,
        tokens={hash_token(token): tenant},
        targets=[f"127.0.0.1:{traced_server.port}"],
        deadline_s=10.0,
    )
    otel.spans.clear()
    async with http_gateway(settings) as url, http_session(url, token) as session:
        result = await session.call_tool("memory_recall", {"query": "靠窗", "session_id": "s1"})
    assert not result.is_error

    def ready(spans: Sequence[ReadableSpan]) -> bool:
        return any(s.name == RECALL_METHOD and s.kind is SpanKind.SERVER for s in spans)

    spans = await spans_of_trace(otel, ready)
    (tool,) = [s for s in spans if s.name == "tools/call memory_recall" and s.kind is SpanKind.SERVER]
    (client,) = [s for s in _children(spans, tool) if s.kind is SpanKind.CLIENT]
    assert client.name == RECALL_METHOD
    assert client.attributes is not None
    assert client.attributes["rpc.system.name"] == "grpc"
    assert client.attributes["rpc.method"] == RECALL_METHOD
    assert client.attributes["rpc.response.status_code"] == "OK"
    assert not set(client.attributes) & DEPRECATED_RPC
    (server,) = [s for s in spans if s.name == RECALL_METHOD and s.kind is SpanKind.SERVER]
    assert context_of(server).trace_id == context_of(tool).trace_id
    assert server.parent is not None and server.parent.span_id == context_of(client).span_id


async def test_a_refused_call_is_traced_with_its_code_and_no_message(
    otel: Telemetry, traced_client: HindsightClient, tenant: str
) -> None:
    otel.spans.clear()
    secret = f"secret{uuid.uuid4().hex[:8]}"
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await traced_client.recall(tenant, secret * 2000)  # far over the query's size limit
    assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT

    spans = await spans_of_trace(otel, lambda spans: any(s.name == RECALL_METHOD for s in spans))
    (server,) = _named(spans, RECALL_METHOD)
    assert server.attributes is not None
    assert server.attributes["rpc.response.status_code"] == "INVALID_ARGUMENT"
    assert server.status.status_code is StatusCode.UNSET  # the caller's mistake, not a server error
    assert "error.type" not in server.attributes
    (recall,) = _children(spans, server)
    assert recall.attributes is not None and recall.attributes["error.type"] == "InvalidArgument"
    assert all(secret not in str(event.attributes) for span in spans for event in span.events)
    assert all(secret not in (span.status.description or "") for span in spans)
