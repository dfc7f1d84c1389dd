"""The shared client interceptor (hindsight.telemetry.client_interceptors) on a real channel to a traced
server: client spans with OpenTelemetry's gRPC client attributes, server.address and server.port from
the channel's target, every code but OK an error on the client side (NOT_FOUND is the caller's on the
server side), and rpc.client.call.duration in seconds."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import grpc
import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode

from hindsight.client import HindsightClient
from hindsight.telemetry import RPC_DURATION_BUCKETS_S, client_interceptors
from hindsight_server.process.running import RunningServer
from tests.telemetry.conftest import Telemetry, attributes_of, context_of, histogram_points, spans_of_trace

GET = "hindsight.v1.MemoryService/Get"
RECALL = "hindsight.v1.MemoryService/Recall"


def _one(spans: Sequence[ReadableSpan], name: str, kind: SpanKind) -> ReadableSpan:
    (span,) = [s for s in spans if s.name == name and s.kind is kind]
    return span


async def test_client_spans_name_the_server_and_time_the_call(
    otel: Telemetry, traced_server: RunningServer, tenant: str
) -> None:
    target = f"127.0.0.1:{traced_server.port}"
    channel = grpc.aio.insecure_channel(target, interceptors=client_interceptors(target))
    client = HindsightClient(target, timeout_s=10, channel=channel)
    otel.spans.clear()
    try:
        await client.recall(tenant, "靠窗")
        with pytest.raises(grpc.aio.AioRpcError) as missing:
            await client.get(tenant, str(uuid.uuid4()))
        assert missing.value.code() is grpc.StatusCode.NOT_FOUND
    finally:
        await client.close()

    def both_served(spans: Sequence[ReadableSpan]) -> bool:
        return {GET, RECALL} <= {s.name for s in spans if s.kind is SpanKind.SERVER}

    spans = await spans_of_trace(otel, both_served)
    recall = _one(spans, RECALL, SpanKind.CLIENT)
    assert recall.attributes is not None and dict(recall.attributes) == {
        "rpc.system.name": "grpc",
        "rpc.method": RECALL,
        "server.address": "127.0.0.1",
        "server.port": traced_server.port,
        "rpc.response.status_code": "OK",
    }
    assert recall.status.status_code is StatusCode.UNSET
    # The server continues the client's span.
    served = _one(spans, RECALL, SpanKind.SERVER)
    assert served.parent is not None and served.parent.span_id == context_of(recall).span_id

    got = _one(spans, GET, SpanKind.CLIENT)
    assert got.attributes is not None
    assert got.attributes["rpc.response.status_code"] == "NOT_FOUND"
    assert got.attributes["error.type"] == "NOT_FOUND"
    assert got.status.status_code is StatusCode.ERROR
    get_served = _one(spans, GET, SpanKind.SERVER)
    assert get_served.attributes is not None and "error.type" not in get_served.attributes
    assert get_served.status.status_code is StatusCode.UNSET

    (duration,) = otel.collected("rpc.client.call.duration")
    assert duration.unit == "s"
    points = {
        attributes_of(p)["rpc.method"]: p
        for p in histogram_points(duration)
        if attributes_of(p).get("server.port") == traced_server.port
    }
    assert attributes_of(points[RECALL])["rpc.response.status_code"] == "OK"
    assert "error.type" not in attributes_of(points[RECALL])
    assert attributes_of(points[GET])["error.type"] == "NOT_FOUND"
    assert all(p.explicit_bounds == RPC_DURATION_BUCKETS_S and 0 < p.max < 60 for p in points.values())
