"""OTLP export of real processes to real receivers: a `hindsight serve` and a `hindsight mcp --http` whose
telemetry comes from the standard variables only (OTEL_EXPORTER_OTLP_[TRACES_|METRICS_]PROTOCOL and
..._ENDPOINT, as compose and Helm set them), a recall through each, and the spans and metrics that
reach an OTLP/gRPC or OTLP/HTTP receiver started by the test, decoded from the wire. An unknown
protocol stops either process at start, naming the variable."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from gateway_mcp.auth import hash_token
from hindsight.client import HindsightClient
from hindsight.telemetry import RPC_DURATION_BUCKETS_S
from hindsight_server.process.running import RunningServer
from hindsight_server.telemetry.units import STAGE_BUCKETS_S
from tests.support.mcp_sessions import http_session
from tests.support.processes import Background, free_port, run_cli
from tests.telemetry.otlp import PROTOBUF, GrpcReceiver, HttpReceiver, Received, attributes

RECALL_METHOD = "hindsight.v1.MemoryService/Recall"
HTTP = "http/protobuf"


@pytest.fixture
def http_receiver() -> Iterator[HttpReceiver]:
    receiver = HttpReceiver()
    receiver.start()
    yield receiver
    receiver.stop()


@pytest.fixture
async def grpc_receiver() -> AsyncIterator[GrpcReceiver]:
    receiver = GrpcReceiver()
    await receiver.start()
    yield receiver
    await receiver.stop()


def _environment(telemetry: Mapping[str, str], **settings: str) -> dict[str, str]:
    """This process's environment without any OTEL_* or HINDSIGHT_* of its own, plus `telemetry`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "HINDSIGHT_"))}
    return {**env, "HINDSIGHT_LOG_LEVEL": "INFO", **settings, **telemetry}


def _traceparent() -> tuple[int, int, str]:
    trace_id, span_id = uuid.uuid4().int, uuid.uuid4().int >> 64
    return trace_id, span_id, f"00-{trace_id:032x}-{span_id:016x}-01"


async def _serve_and_recall(env: dict[str, str], tenant: str, traceparent: str) -> str:
    """A write and a recall through a real `hindsight serve`, stopped gracefully (which flushes its
    telemetry); its output."""
    server = Background(["serve", "--port", "0"])
    server.env = env
    await server.start()
    try:
        port = int((await server.wait_for(r"listening on 127\.0\.0\.1:(\d+)")).group(1))
        async with HindsightClient(
            f"127.0.0.1:{port}", timeout_s=10, metadata=[("traceparent", traceparent)]
        ) as client:
            await client.write(tenant, "用户偏好靠窗座位", tier="semantic", kind="preference")
            found = await client.recall(tenant, "靠窗")
        assert found.hits
    finally:
        code = await server.stop()
    assert code == 0, server.output
    return server.output


def _server_span(received: Received, trace_id: int) -> tuple[dict[str, Any], Span]:
    (found,) = [
        (resource, span)
        for resource, span in received.spans()
        if span.name == RECALL_METHOD and span.trace_id == trace_id.to_bytes(16, "big")
    ]
    return found


def _check_recall_trace(received: Received, trace_id: int, caller_span: int) -> None:
    resource, server = _server_span(received, trace_id)
    assert resource["service.name"] == "hindsight-server"
    assert server.kind == Span.SpanKind.SPAN_KIND_SERVER
    assert server.parent_span_id == caller_span.to_bytes(8, "big")  # the caller's trace, continued
    assert attributes(server.attributes) == {
        "rpc.system.name": "grpc",
        "rpc.method": RECALL_METHOD,
        "rpc.response.status_code": "OK",
    }
    in_trace = [span for _, span in received.spans() if span.trace_id == server.trace_id]
    (recall,) = [span for span in in_trace if span.parent_span_id == server.span_id]
    assert recall.name == "recall"
    names = {span.name for span in in_trace}
    assert {"recall.channel.lexical", "recall.fuse", "recall.rank", "recall.pack"} <= names
    statements = [attributes(s.attributes) for s in in_trace if s.kind == Span.SpanKind.SPAN_KIND_CLIENT]
    assert statements and all(s["db.system.name"] == "postgresql" for s in statements)
    assert all(s["db.namespace"] and s["server.address"] for s in statements)


def _check_server_metrics(received: Received) -> None:
    ((resource, rpc),) = received.metric("rpc.server.call.duration")[-1:]
    assert resource["service.name"] == "hindsight-server"
    assert rpc.unit == "s"
    (recalls,) = [
        p
        for p in rpc.histogram.data_points
        if attributes(p.attributes).get("rpc.method") == RECALL_METHOD
        and attributes(p.attributes).get("rpc.response.status_code") == "OK"
    ]
    assert recalls.count >= 1 and tuple(recalls.explicit_bounds) == RPC_DURATION_BUCKETS_S
    assert 0 < recalls.sum < 60  # seconds
    ((_, recall),) = received.metric("hindsight.recall.duration")[-1:]
    assert recall.unit == "s" and tuple(recall.histogram.data_points[0].explicit_bounds) == STAGE_BUCKETS_S
    assert received.metric("db.client.operation.duration")


@pytest.mark.timeout(120)
async def test_the_server_exports_over_grpc_by_default(
    grpc_receiver: GrpcReceiver, postgres_dsn: str, tmp_path: Path, tenant: str
) -> None:
    """No protocol variable at all (as before): OTLP over gRPC to OTEL_EXPORTER_OTLP_ENDPOINT."""
    trace_id, caller, traceparent = _traceparent()
    env = _environment(
        {"OTEL_EXPORTER_OTLP_ENDPOINT": grpc_receiver.endpoint},
        HINDSIGHT_DATABASE__DSN=postgres_dsn,
        HINDSIGHT_DATA_DIR=str(tmp_path),
        HINDSIGHT_SECURITY__REQUIRE_API_KEYS="false",
        HINDSIGHT_JOBS__ENABLED="false",
    )
    output = await _serve_and_recall(env, tenant, traceparent)
    assert "telemetry: otlp exporter for hindsight-server (traces over grpc, metrics over grpc)" in output
    _check_recall_trace(grpc_receiver.received, trace_id, caller)
    _check_server_metrics(grpc_receiver.received)


@pytest.mark.timeout(120)
async def test_the_server_exports_over_http_protobuf(
    http_receiver: HttpReceiver, postgres_dsn: str, tmp_path: Path, tenant: str
) -> None:
    """OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf (Helm's otlpProtocol): POSTs of protobuf bodies to
    /v1/traces and /v1/metrics under OTEL_EXPORTER_OTLP_ENDPOINT."""
    trace_id, caller, traceparent = _traceparent()
    env = _environment(
        {"OTEL_EXPORTER_OTLP_ENDPOINT": http_receiver.endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL": HTTP},
        HINDSIGHT_DATABASE__DSN=postgres_dsn,
        HINDSIGHT_DATA_DIR=str(tmp_path),
        HINDSIGHT_SECURITY__REQUIRE_API_KEYS="false",
        HINDSIGHT_JOBS__ENABLED="false",
    )
    output = await _serve_and_recall(env, tenant, traceparent)
    assert "(traces over http/protobuf, metrics over http/protobuf)" in output
    received = http_receiver.received
    assert {path for path, _ in received.http_requests} == {"/v1/traces", "/v1/metrics"}
    assert {kind for _, kind in received.http_requests} == {PROTOBUF}
    _check_recall_trace(received, trace_id, caller)
    _check_server_metrics(received)


@pytest.mark.timeout(120)
async def test_each_signal_takes_its_own_protocol_and_endpoint(
    http_receiver: HttpReceiver,
    grpc_receiver: GrpcReceiver,
    postgres_dsn: str,
    tmp_path: Path,
    tenant: str,
) -> None:
    """The per-signal variables win over the general one: traces over HTTP, metrics over gRPC."""
    trace_id, caller, traceparent = _traceparent()
    env = _environment(
        {
            "OTEL_EXPORTER_OTLP_PROTOCOL": HTTP,
            "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL": "grpc",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"{http_receiver.endpoint}/v1/traces",
            "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": grpc_receiver.endpoint,
        },
        HINDSIGHT_DATABASE__DSN=postgres_dsn,
        HINDSIGHT_DATA_DIR=str(tmp_path),
        HINDSIGHT_SECURITY__REQUIRE_API_KEYS="false",
        HINDSIGHT_JOBS__ENABLED="false",
    )
    output = await _serve_and_recall(env, tenant, traceparent)
    assert "(traces over http/protobuf, metrics over grpc)" in output
    _check_recall_trace(http_receiver.received, trace_id, caller)
    _check_server_metrics(grpc_receiver.received)
    assert http_receiver.received.metrics == [] and grpc_receiver.received.traces == []


@pytest.mark.timeout(120)
async def test_the_gateway_exports_over_http_protobuf(
    http_receiver: HttpReceiver, traced_server: RunningServer, tmp_path: Path, tenant: str
) -> None:
    """`hindsight mcp --http` with OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf: a tool call's span, the
    client span of its gRPC call (the current conventions) and rpc.client.call.duration arrive."""
    token = f"token-{uuid.uuid4().hex}"
    env = _environment(
        {"OTEL_EXPORTER_OTLP_ENDPOINT": http_receiver.endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL": HTTP},
        HINDSIGHT_MCP__HOST="127.0.0.1",
        HINDSIGHT_MCP__PORT=str(free_port()),
        HINDSIGHT_MCP__TARGETS=f"127.0.0.1:{traced_server.port}",
        HINDSIGHT_MCP__TOKENS=json.dumps({hash_token(token): tenant}),
        HINDSIGHT_DATA_DIR=str(tmp_path),
    )
    gateway = Background(["mcp", "--http"])
    gateway.env = env
    await gateway.start()
    try:
        url = (await gateway.wait_for(r"listening on (http://\S+)")).group(1)
        async with http_session(url, token) as session:
            result = await session.call_tool("memory_recall", {"query": "靠窗", "session_id": "s1"})
        assert not result.is_error
    finally:
        code = await gateway.stop()
    assert code == 0, gateway.output
    assert "(traces over http/protobuf, metrics over http/protobuf)" in gateway.output

    received = http_receiver.received
    spans = list(received.spans())
    assert {resource["service.name"] for resource, _ in spans} == {"hindsight-mcp"}
    (tool,) = [s for _, s in spans if s.name == "tools/call memory_recall"]
    (client,) = [s for _, s in spans if s.parent_span_id == tool.span_id and s.name == RECALL_METHOD]
    assert client.kind == Span.SpanKind.SPAN_KIND_CLIENT
    called = attributes(client.attributes)
    assert {k: called[k] for k in ("rpc.system.name", "rpc.method", "rpc.response.status_code")} == {
        "rpc.system.name": "grpc",
        "rpc.method": RECALL_METHOD,
        "rpc.response.status_code": "OK",
    }
    ((_, duration),) = received.metric("rpc.client.call.duration")[-1:]
    assert duration.unit == "s"
    points = duration.histogram.data_points
    (point,) = [p for p in points if attributes(p.attributes)["rpc.method"] == RECALL_METHOD]
    assert point.count == 1 and tuple(point.explicit_bounds) == RPC_DURATION_BUCKETS_S


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
        ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "thrift"),
        ("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "HTTP"),
    ],
)
async def test_an_unknown_protocol_stops_the_server_at_start(
    variable: str, value: str, postgres_dsn: str, tmp_path: Path
) -> None:
    env = _environment(
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317", variable: value},
        HINDSIGHT_DATABASE__DSN=postgres_dsn,
        HINDSIGHT_DATA_DIR=str(tmp_path),
    )
    result = await run_cli(["serve", "--port", "0"], env=env)
    assert result.code == 2, result.stderr
    assert f"hindsight serve: telemetry: {variable}={value!r} is not supported" in result.stderr
    assert "grpc or http/protobuf" in result.stderr and "Traceback" not in result.stderr
    assert "listening on" not in result.stdout


async def test_an_unknown_protocol_stops_the_gateway_at_start(tmp_path: Path) -> None:
    env = _environment(
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"},
        HINDSIGHT_MCP__PORT=str(free_port()),
        HINDSIGHT_MCP__TARGETS="127.0.0.1:1",
        HINDSIGHT_DATA_DIR=str(tmp_path),
    )
    result = await run_cli(["mcp", "--http"], env=env)
    assert result.code == 2, result.stderr
    problem = "hindsight mcp: telemetry: OTEL_EXPORTER_OTLP_PROTOCOL='http/json' is not supported"
    assert problem in result.stderr
    assert "Traceback" not in result.stderr and "listening on" not in result.stdout
