"""OTLP receivers for the export tests, standing in for a collector: OTLP/HTTP (POST /v1/traces and
/v1/metrics, protobuf bodies, an http.server in a thread) and OTLP/gRPC (TraceService and MetricsService
Export, a grpc.aio server). Both decode what they get with opentelemetry-proto, the exporters' own
messages, and keep it for the test to read."""

from __future__ import annotations

import gzip
import threading
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import grpc
from google.protobuf.message import Message
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.common.v1.common_pb2 import KeyValue
from opentelemetry.proto.metrics.v1.metrics_pb2 import Metric
from opentelemetry.proto.trace.v1.trace_pb2 import Span

PROTOBUF = "application/x-protobuf"


def attributes(pairs: Any) -> dict[str, Any]:
    """OTLP KeyValues as a dict of plain values."""
    found: dict[str, Any] = {}
    for pair in pairs:
        assert isinstance(pair, KeyValue)
        kind = pair.value.WhichOneof("value")
        found[pair.key] = getattr(pair.value, kind) if kind else None
    return found


@dataclass
class Received:
    """What one receiver was sent: the decoded requests, and each HTTP request's path and content type."""

    traces: list[trace_service_pb2.ExportTraceServiceRequest] = field(default_factory=list)
    metrics: list[metrics_service_pb2.ExportMetricsServiceRequest] = field(default_factory=list)
    http_requests: list[tuple[str, str]] = field(default_factory=list)

    def spans(self) -> Iterator[tuple[dict[str, Any], Span]]:
        """Every span received, with its resource's attributes."""
        for request in self.traces:
            for resource in request.resource_spans:
                owner = attributes(resource.resource.attributes)
                for scope in resource.scope_spans:
                    for span in scope.spans:
                        yield owner, span

    def metric(self, name: str) -> list[tuple[dict[str, Any], Metric]]:
        """Every export of metric `name`, with its resource's attributes."""
        return [
            (attributes(resource.resource.attributes), metric)
            for request in self.metrics
            for resource in request.resource_metrics
            for scope in resource.scope_metrics
            for metric in scope.metrics
            if metric.name == name
        ]


class HttpReceiver:
    """OTLP/HTTP with protobuf bodies on 127.0.0.1, in a thread of its own."""

    def __init__(self) -> None:
        self.received = Received()
        received = self.received

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(length)
                encoding = self.headers.get("Content-Encoding", "")
                if encoding == "gzip":
                    body = gzip.decompress(body)
                elif encoding == "deflate":
                    body = zlib.decompress(body)
                response: Message
                if self.path == "/v1/traces":
                    received.traces.append(trace_service_pb2.ExportTraceServiceRequest.FromString(body))
                    response = trace_service_pb2.ExportTraceServiceResponse()
                elif self.path == "/v1/metrics":
                    received.metrics.append(metrics_service_pb2.ExportMetricsServiceRequest.FromString(body))
                    response = metrics_service_pb2.ExportMetricsServiceResponse()
                else:
                    self.send_error(404)
                    return
                received.http_requests.append((self.path, self.headers.get("Content-Type", "")))
                payload = response.SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", PROTOBUF)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:  # quiet
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, name="otlp-http", daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


class GrpcReceiver:
    """OTLP/gRPC's TraceService and MetricsService on 127.0.0.1."""

    def __init__(self) -> None:
        self.received = Received()
        self._server = grpc.aio.server()
        self._port = 0

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._port}"

    async def start(self) -> None:
        received = self.received

        class Traces(trace_service_pb2_grpc.TraceServiceServicer):
            async def Export(  # the service's method name
                self, request: trace_service_pb2.ExportTraceServiceRequest, context: Any
            ) -> trace_service_pb2.ExportTraceServiceResponse:
                received.traces.append(request)
                return trace_service_pb2.ExportTraceServiceResponse()

        class Metrics(metrics_service_pb2_grpc.MetricsServiceServicer):
            async def Export(
                self, request: metrics_service_pb2.ExportMetricsServiceRequest, context: Any
            ) -> metrics_service_pb2.ExportMetricsServiceResponse:
                received.metrics.append(request)
                return metrics_service_pb2.ExportMetricsServiceResponse()

        # opentelemetry-proto's generated _grpc modules carry no annotations (no .pyi beside them).
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Traces(), self._server)  # type: ignore[no-untyped-call]
        metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(Metrics(), self._server)  # type: ignore[no-untyped-call]
        self._port = self._server.add_insecure_port("127.0.0.1:0")
        await self._server.start()

    async def stop(self) -> None:
        await self._server.stop(grace=None)
