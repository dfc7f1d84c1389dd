"""OpenTelemetry plumbing shared by every hindsight process (the memory server, the MCP gateway): the SDK
installed with the configured exporter, and the W3C trace context carried in gRPC metadata.

Exporters: "otlp" (OTLP over gRPC to a collector), "console" (one JSON line per span, and the metrics
every interval, on stderr: stdout is the MCP stdio transport's channel), "none" (nothing is installed:
the API stays the no-op one, so instrumented code costs only its no-op calls).

    installed = install(TelemetryConfig("hindsight-server", exporter="otlp"))
    ...
    if installed is not None:
        installed.shutdown()  # flushes what is still buffered
"""

from __future__ import annotations

import importlib.metadata
import logging
import os
import socket
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, cast

import grpc
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    ConsoleMetricExporter,
    MetricExporter,
    MetricsData,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

__all__ = [
    "TRACEPARENT",
    "Exporter",
    "InstalledTelemetry",
    "TelemetryConfig",
    "TraceContextInterceptor",
    "client_interceptors",
    "install",
    "resolve_exporter",
    "tracing_enabled",
]

log = logging.getLogger(__name__)

Exporter = Literal["none", "console", "otlp"]
TRACEPARENT = "traceparent"  # the W3C header, as gRPC metadata (lowercase, as gRPC requires)
# W3C trace context only, whatever OTEL_PROPAGATORS says: baggage would let a caller put arbitrary
# entries into every span's context on the server.
PROPAGATOR = TraceContextTextMapPropagator()
_TRACER = trace.get_tracer("hindsight.client")
# gRPC codes that mean the server failed (OpenTelemetry's gRPC conventions); the others are the
# caller's doing (bad input, not found) and leave a span's status unset.
SERVER_ERRORS = frozenset(
    {
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.UNIMPLEMENTED,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DATA_LOSS,
    }
)


@dataclass(frozen=True, slots=True)
class TelemetryConfig:
    service_name: str  # hindsight-server, hindsight-mcp; OTEL_SERVICE_NAME wins when set
    exporter: Exporter | Literal[""] = ""  # empty: from the environment (resolve_exporter)
    # OTLP's gRPC endpoint; empty: OTEL_EXPORTER_OTLP_ENDPOINT, else the SDK's http://localhost:4317.
    otlp_endpoint: str = ""
    sample_ratio: float = 1.0  # share of new traces kept; a caller's sampled flag is always followed
    metrics_interval_s: float = 60.0


def resolve_exporter(configured: str, environ: Mapping[str, str] = os.environ) -> Exporter:
    """The configured exporter; unset (""): the standard OTEL_TRACES_EXPORTER, else "otlp" when an OTLP
    endpoint is given (OTEL_EXPORTER_OTLP_ENDPOINT: compose and Helm set it), else "none"."""
    chosen = configured or environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if not chosen:
        return "otlp" if environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") else "none"
    if chosen not in ("none", "console", "otlp"):
        raise ValueError(f"unknown telemetry exporter {chosen!r}: otlp, console or none")
    return cast(Exporter, chosen)


def tracing_enabled() -> bool:
    """Whether an SDK tracer provider is installed (by `install`, or by a test): the code that decides
    to add instrumentation at all (interceptors, traced connections) asks this once, at start."""
    return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


class InstalledTelemetry:
    def __init__(self, tracer_provider: TracerProvider, meter_provider: MeterProvider) -> None:
        self.tracer_provider = tracer_provider
        self.meter_provider = meter_provider

    def shutdown(self) -> None:
        """Exports what is buffered, then stops the exporters' threads."""
        self.tracer_provider.shutdown()
        self.meter_provider.shutdown()


def _version() -> str:
    try:
        return importlib.metadata.version("hindsight")
    except importlib.metadata.PackageNotFoundError:
        return ""


def _one_line_span(span: ReadableSpan) -> str:
    return str(span.to_json(indent=None)) + "\n"


def _one_line_metrics(data: MetricsData) -> str:
    return str(data.to_json(indent=None)) + "\n"


def _exporters(exporter: Exporter, otlp_endpoint: str) -> tuple[SpanExporter, MetricExporter]:
    if exporter == "console":
        return (
            ConsoleSpanExporter(out=sys.stderr, formatter=_one_line_span),
            ConsoleMetricExporter(out=sys.stderr, formatter=_one_line_metrics),
        )
    # Imported here: the OTLP exporter (and its protobuf modules) only when it is used.
    from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

    options: dict[str, Any] = {}
    if otlp_endpoint:
        options = {"endpoint": otlp_endpoint, "insecure": otlp_endpoint.startswith("http://")}
    return OTLPSpanExporter(**options), OTLPMetricExporter(**options)


def install(config: TelemetryConfig) -> InstalledTelemetry | None:
    """Installs the SDK's tracer and meter providers for this process (None for the exporter "none",
    or when a provider is installed already: OpenTelemetry allows one per process)."""
    exporter = resolve_exporter(config.exporter)
    if exporter == "none":
        return None
    if tracing_enabled():
        log.warning("telemetry: a tracer provider is installed already; keeping it")
        return None
    resource = Resource.create(
        {
            "service.name": os.environ.get("OTEL_SERVICE_NAME") or config.service_name,
            "service.version": _version(),
            "service.instance.id": f"{socket.gethostname()}:{os.getpid()}",
        }
    )
    span_exporter, metric_exporter = _exporters(exporter, config.otlp_endpoint)
    tracer_provider = TracerProvider(
        resource=resource, sampler=ParentBased(TraceIdRatioBased(config.sample_ratio))
    )
    # Batched: spans are exported from the processor's thread, never in the request's path.
    tracer_provider.add_span_processor(BatchSpanProcessor(span_exporter))
    reader = PeriodicExportingMetricReader(
        metric_exporter, export_interval_millis=config.metrics_interval_s * 1000
    )
    meter_provider = MeterProvider(resource=resource, metric_readers=[reader])
    trace.set_tracer_provider(tracer_provider)
    metrics.set_meter_provider(meter_provider)
    log.info("telemetry: %s exporter for %s", exporter, config.service_name)
    return InstalledTelemetry(tracer_provider, meter_provider)


def _method_name(method: str | bytes) -> str:
    return (method.decode() if isinstance(method, bytes) else method).lstrip("/")


def rpc_attributes(full_method: str) -> dict[str, str]:
    """OpenTelemetry's gRPC span attributes for "package.Service/Method"."""
    service, _, method = full_method.rpartition("/")
    return {"rpc.system": "grpc", "rpc.service": service, "rpc.method": method}


Continuation = Callable[[grpc.aio.ClientCallDetails, Any], Any]


class TraceContextInterceptor(grpc.aio.UnaryUnaryClientInterceptor):
    """A client span per unary call, whose context travels to the server as `traceparent` metadata."""

    async def intercept_unary_unary(
        self, continuation: Continuation, client_call_details: grpc.aio.ClientCallDetails, request: Any
    ) -> Any:
        name = _method_name(client_call_details.method)
        with _TRACER.start_as_current_span(
            name,
            kind=SpanKind.CLIENT,
            attributes=rpc_attributes(name),
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            carrier: dict[str, str] = {}
            PROPAGATOR.inject(carrier)
            metadata = grpc.aio.Metadata(*(client_call_details.metadata or ()))
            for key, value in carrier.items():
                metadata.add(key, value)
            details = grpc.aio.ClientCallDetails(
                client_call_details.method,
                client_call_details.timeout,
                metadata,
                client_call_details.credentials,
                client_call_details.wait_for_ready,
            )
            call = await continuation(details, request)
            try:
                await call  # the span ends with the call, not when it is sent
            except grpc.aio.AioRpcError as error:
                code = error.code()
                span.set_attribute("rpc.grpc.status_code", code.value[0])
                if code in SERVER_ERRORS:
                    span.set_status(Status(StatusCode.ERROR, code.name))
                raise
            span.set_attribute("rpc.grpc.status_code", grpc.StatusCode.OK.value[0])
            return call


def client_interceptors() -> list[grpc.aio.ClientInterceptor]:
    """What a channel needs to carry traces: nothing unless tracing is on (an aio interceptor costs a
    task per call even when its spans are no-ops)."""
    return [TraceContextInterceptor()] if tracing_enabled() else []
