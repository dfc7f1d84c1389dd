"""OpenTelemetry plumbing shared by every hindsight process (the memory server, the MCP gateway): the SDK
installed with the configured exporter, and the W3C trace context carried in gRPC metadata.

Exporters: "otlp" (OTLP to a collector, over gRPC or HTTP/protobuf per the standard
OTEL_EXPORTER_OTLP_[TRACES_|METRICS_]PROTOCOL, gRPC when unset), "console" (one JSON line per span, and
the metrics every interval, on stderr: stdout is the MCP stdio transport's channel), "none" (nothing is
installed: the API stays the no-op one, so instrumented code costs only its no-op calls).

RPC spans and metrics follow OpenTelemetry's current gRPC conventions: `rpc.system.name` "grpc",
`rpc.method` the full "package.Service/Method", `rpc.response.status_code` the status code's name,
`server.address`/`server.port` on the client side, and the histograms `rpc.server.call.duration` /
`rpc.client.call.duration` in seconds.

    installed = install(TelemetryConfig("hindsight-server", exporter="otlp"))
    ...
    if installed is not None:
        installed.shutdown()  # flushes what is still buffered
"""

from __future__ import annotations

import asyncio
import functools
import importlib.metadata
import json
import logging
import os
import re
import socket
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, TextIO, cast

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
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

__all__ = [
    "LOG_FORMAT",
    "RPC_DURATION_BUCKETS_S",
    "TRACEPARENT",
    "Exporter",
    "InstalledTelemetry",
    "JsonFormatter",
    "LogFormat",
    "Protocol",
    "TelemetryConfig",
    "TelemetryConfigError",
    "TraceContextFormatter",
    "TraceContextInterceptor",
    "client_interceptors",
    "configure_logging",
    "install",
    "resolve_exporter",
    "resolve_protocol",
    "rpc_attributes",
    "server_attributes",
    "tracing_enabled",
]

log = logging.getLogger(__name__)

Exporter = Literal["none", "console", "otlp"]
Protocol = Literal["grpc", "http/protobuf"]
Signal = Literal["traces", "metrics"]
PROTOCOLS: tuple[Protocol, ...] = ("grpc", "http/protobuf")
TRACEPARENT = "traceparent"  # the W3C header, as gRPC metadata (lowercase, as gRPC requires)
# W3C trace context only, whatever OTEL_PROPAGATORS says: baggage would let a caller put arbitrary
# entries into every span's context on the server.
PROPAGATOR = TraceContextTextMapPropagator()
_TRACER = trace.get_tracer("hindsight.client")
# gRPC codes that mean the server failed (OpenTelemetry's gRPC conventions): on a server span and in
# rpc.server.call.duration they set the error status and error.type; the others are the caller's doing
# (bad input, not found) and leave a server span's status unset. On a client span every code but OK is
# an error (the same conventions).
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
# The boundaries OpenTelemetry's RPC (and HTTP) duration metrics advise, in seconds: 5 ms to 10 s, with
# 75 and 100 ms around the recall target.
RPC_DURATION_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
# Every process's log line; TraceContextFormatter appends the trace context to lines logged in a span.
LOG_FORMAT = "%(asctime)s %(levelname)s %(process)d %(name)s: %(message)s"
LogFormat = Literal["text", "json"]


class TelemetryConfigError(ValueError):
    """A telemetry setting or OTEL_* variable the process cannot start with (the message names it)."""


@dataclass(frozen=True, slots=True)
class TelemetryConfig:
    service_name: str  # hindsight-server, hindsight-mcp; OTEL_SERVICE_NAME wins when set
    exporter: Exporter | Literal[""] = ""  # empty: from the environment (resolve_exporter)
    # The collector's OTLP address, for both signals and either protocol (a base URL: over
    # http/protobuf /v1/traces and /v1/metrics are appended). Empty: the standard
    # OTEL_EXPORTER_OTLP_[TRACES_|METRICS_]ENDPOINT, else the SDK's default for the protocol
    # (http://localhost:4317 for grpc, http://localhost:4318 for http/protobuf).
    otlp_endpoint: str = ""
    sample_ratio: float = 1.0  # share of new traces kept; a caller's sampled flag is always followed
    metrics_interval_s: float = 60.0


_ENDPOINT_VARIABLES = (
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
)


def resolve_exporter(configured: str, environ: Mapping[str, str] = os.environ) -> Exporter:
    """The configured exporter; unset (""): the standard OTEL_TRACES_EXPORTER, else "otlp" when an OTLP
    endpoint is given (OTEL_EXPORTER_OTLP_ENDPOINT, which compose and Helm set, or a per-signal one),
    else "none"."""
    chosen = configured or environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if not chosen:
        return "otlp" if any(environ.get(name) for name in _ENDPOINT_VARIABLES) else "none"
    if chosen not in ("none", "console", "otlp"):
        raise TelemetryConfigError(f"unknown telemetry exporter {chosen!r}: otlp, console or none")
    return cast(Exporter, chosen)


def resolve_protocol(signal: Signal, environ: Mapping[str, str] = os.environ) -> Protocol:
    """The OTLP protocol of one signal, as the standard variables say: OTEL_EXPORTER_OTLP_TRACES_PROTOCOL
    (or ..._METRICS_PROTOCOL), else OTEL_EXPORTER_OTLP_PROTOCOL, else grpc. A value this process cannot
    export with is a TelemetryConfigError naming the variable: a wrong protocol would otherwise drop
    every span in the exporter's thread, with nothing but a log line to show for it."""
    for name in (f"OTEL_EXPORTER_OTLP_{signal.upper()}_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
        value = environ.get(name, "").strip()
        if not value:
            continue
        if value.lower() in PROTOCOLS:
            return cast(Protocol, value.lower())
        unsupported = " (http/json has no Python exporter)" if value.lower() == "http/json" else ""
        raise TelemetryConfigError(f"{name}={value!r} is not supported{unsupported}: grpc or http/protobuf")
    return "grpc"


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
        return importlib.metadata.version("hindsight-memory-client")
    except importlib.metadata.PackageNotFoundError:
        return ""


def _one_line_span(span: ReadableSpan) -> str:
    return str(span.to_json(indent=None)) + "\n"


def _one_line_metrics(data: MetricsData) -> str:
    return str(data.to_json(indent=None)) + "\n"


def _span_exporter(protocol: Protocol, otlp_endpoint: str) -> SpanExporter:
    # Imported here: an OTLP exporter (and its protobuf modules) only when it is used.
    if protocol == "http/protobuf":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpans

        return HttpSpans(endpoint=_signal_url(otlp_endpoint, "traces")) if otlp_endpoint else HttpSpans()
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpans

    return GrpcSpans(**_grpc_options(otlp_endpoint))


def _metric_exporter(protocol: Protocol, otlp_endpoint: str) -> MetricExporter:
    if protocol == "http/protobuf":
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import (
            OTLPMetricExporter as HttpMetrics,
        )

        return HttpMetrics(endpoint=_signal_url(otlp_endpoint, "metrics")) if otlp_endpoint else HttpMetrics()
    from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter as GrpcMetrics

    return GrpcMetrics(**_grpc_options(otlp_endpoint))


def _signal_url(base: str, signal: Signal) -> str:
    """OTLP/HTTP's URL of a signal under a base URL (as the SDK does with OTEL_EXPORTER_OTLP_ENDPOINT)."""
    return f"{base.rstrip('/')}/v1/{signal}"


def _grpc_options(otlp_endpoint: str) -> dict[str, Any]:
    if not otlp_endpoint:
        return {}  # the SDK reads OTEL_EXPORTER_OTLP_[TRACES_|METRICS_]ENDPOINT itself
    return {"endpoint": otlp_endpoint, "insecure": otlp_endpoint.startswith("http://")}


def _exporters(
    exporter: Exporter, otlp_endpoint: str, environ: Mapping[str, str] = os.environ
) -> tuple[SpanExporter, MetricExporter]:
    if exporter == "console":
        return (
            ConsoleSpanExporter(out=sys.stderr, formatter=_one_line_span),
            ConsoleMetricExporter(out=sys.stderr, formatter=_one_line_metrics),
        )
    traces, metrics_protocol = resolve_protocol("traces", environ), resolve_protocol("metrics", environ)
    return _span_exporter(traces, otlp_endpoint), _metric_exporter(metrics_protocol, otlp_endpoint)


def install(config: TelemetryConfig) -> InstalledTelemetry | None:
    """Installs the SDK's tracer and meter providers for this process (None for the exporter "none",
    or when a provider is installed already: OpenTelemetry allows one per process). Raises
    TelemetryConfigError for an exporter or OTLP protocol it cannot use, before installing anything."""
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
    if exporter == "otlp":
        log.info(
            "telemetry: otlp exporter for %s (traces over %s, metrics over %s)",
            config.service_name,
            resolve_protocol("traces"),
            resolve_protocol("metrics"),
        )
    else:
        log.info("telemetry: %s exporter for %s", exporter, config.service_name)
    return InstalledTelemetry(tracer_provider, meter_provider)


class TraceContextFormatter(logging.Formatter):
    """The log line of LOG_FORMAT, and for a record logged inside a span (a traced request) its trace
    context after the message: `... trace_id=<32 hex> span_id=<16 hex>`, the ids the trace backend
    shows, so a log line leads to its trace and back. Lines outside a span are unchanged."""

    def __init__(self) -> None:
        super().__init__(LOG_FORMAT)

    def formatMessage(self, record: logging.LogRecord) -> str:
        # The line before any traceback. Formatted where the record is handled: in the logging call's
        # own context (and task), so the current span is the one the line was logged in.
        line = super().formatMessage(record)
        context = trace.get_current_span().get_span_context()
        if not context.is_valid:
            return line
        return f"{line} trace_id={context.trace_id:032x} span_id={context.span_id:016x}"


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line: `time` (UTC, ISO 8601 with milliseconds), `level`,
    `logger`, `message`, `pid`; `request_id` when a filter put one on the record (the memory server's,
    for lines logged while a call runs); `trace_id` and `span_id` for a record logged inside a span;
    `exception` (the traceback) when the record carries one."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "pid": record.process,
        }
        request_id = getattr(record, "request_id", None)
        if request_id:
            entry["request_id"] = request_id
        context = trace.get_current_span().get_span_context()
        if context.is_valid:
            entry["trace_id"] = f"{context.trace_id:032x}"
            entry["span_id"] = f"{context.span_id:016x}"
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            entry["exception"] = record.exc_text
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


def configure_logging(
    level: int | str,
    stream: TextIO | None = None,
    *,
    log_format: LogFormat = "text",
    filters: Sequence[logging.Filter] = (),
) -> None:
    """A process's logging on `stream` (stderr): LOG_FORMAT lines with the trace context of lines logged
    while a traced call runs ("text"), or one JSON object per line ("json", JsonFormatter). `filters` run
    on every record first (the memory server's puts the call's request id on it)."""
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter() if log_format == "json" else TraceContextFormatter())
    for record_filter in filters:
        handler.addFilter(record_filter)
    logging.basicConfig(level=level, handlers=[handler])


def rpc_attributes(full_method: str) -> dict[str, str]:
    """OpenTelemetry's gRPC attributes of a call to "package.Service/Method" (known when it starts)."""
    return {"rpc.system.name": "grpc", "rpc.method": full_method}


_HOST_PORT = re.compile(r"^(?:\[(?P<ipv6>[^\]]+)\]|(?P<host>[^:/\[\]]+))(?::(?P<port>\d+))?$")


def server_attributes(target: str) -> dict[str, str | int]:
    """`server.address` and `server.port` of a gRPC channel's target, per OpenTelemetry's gRPC client
    conventions: "host:port", "[v6]:port" and "dns:[//authority/]host:port" give the host and port,
    "unix:PATH" the path; anything else (an ipv4:/ipv6: list of servers) is the address as a whole."""
    if not target:
        return {}
    scheme, separator, rest = target.partition(":")
    if scheme in ("unix", "unix-abstract"):
        return {"server.address": rest[2:] if rest.startswith("//") else rest}
    if scheme == "dns" and separator:
        # dns://8.8.8.8/name:443 names the DNS server first: not the server called.
        rest = rest[2:].partition("/")[2] if rest.startswith("//") else rest
    elif scheme in ("ipv4", "ipv6") or "://" in target:
        return {"server.address": target}
    else:
        rest = target
    match = _HOST_PORT.match(rest)
    if match is None:
        return {"server.address": target}
    attributes: dict[str, str | int] = {"server.address": match.group("ipv6") or match.group("host")}
    if match.group("port"):
        attributes["server.port"] = int(match.group("port"))
    return attributes


def _method_name(method: str | bytes) -> str:
    return (method.decode() if isinstance(method, bytes) else method).lstrip("/")


Continuation = Callable[[grpc.aio.ClientCallDetails, Any], Any]


@functools.cache
def _client_duration() -> metrics.Histogram:
    # From the global meter provider's proxy: a no-op until an SDK is installed.
    return metrics.get_meter("hindsight.client").create_histogram(
        "rpc.client.call.duration",
        unit="s",
        description="Outgoing gRPC calls, by method and status code",
        explicit_bucket_boundaries_advisory=RPC_DURATION_BUCKETS_S,
    )


class TraceContextInterceptor(grpc.aio.UnaryUnaryClientInterceptor):
    """A client span per unary call, whose context travels to the server as `traceparent` metadata, and
    its duration in rpc.client.call.duration. `target` is the channel's (for server.address/port)."""

    def __init__(self, target: str = "") -> None:
        self._server = server_attributes(target)
        self._duration = _client_duration()

    async def intercept_unary_unary(
        self, continuation: Continuation, client_call_details: grpc.aio.ClientCallDetails, request: Any
    ) -> Any:
        name = _method_name(client_call_details.method)
        attributes: dict[str, str | int] = {**rpc_attributes(name), **self._server}
        started = time.perf_counter()
        with _TRACER.start_as_current_span(
            name,
            kind=SpanKind.CLIENT,
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            code: grpc.StatusCode | None = None
            error_type = ""
            try:
                call = await continuation(self._with_trace_context(client_call_details), request)
                await call  # the span ends with the call, not when it is sent
                code = grpc.StatusCode.OK
                return call
            except grpc.aio.AioRpcError as error:
                code = error.code()
                raise
            except asyncio.CancelledError:
                code = grpc.StatusCode.CANCELLED
                raise
            except Exception as exc:  # no status: the call failed in this process
                error_type = type(exc).__qualname__
                raise
            finally:
                self._finish(span, attributes, code, error_type, time.perf_counter() - started)

    @staticmethod
    def _with_trace_context(details: grpc.aio.ClientCallDetails) -> grpc.aio.ClientCallDetails:
        carrier: dict[str, str] = {}
        PROPAGATOR.inject(carrier)
        metadata = grpc.aio.Metadata(*(details.metadata or ()))
        for key, value in carrier.items():
            metadata.add(key, value)
        return grpc.aio.ClientCallDetails(
            details.method, details.timeout, metadata, details.credentials, details.wait_for_ready
        )

    def _finish(
        self,
        span: Span,
        attributes: dict[str, str | int],
        code: grpc.StatusCode | None,
        error_type: str,
        seconds: float,
    ) -> None:
        outcome: dict[str, str] = {}
        if code is not None:
            outcome["rpc.response.status_code"] = code.name
            if code is not grpc.StatusCode.OK:
                error_type = code.name
        if error_type:
            outcome["error.type"] = error_type
            span.set_status(Status(StatusCode.ERROR, error_type))
        span.set_attributes(outcome)
        self._duration.record(seconds, {**attributes, **outcome})


def client_interceptors(target: str = "") -> list[grpc.aio.ClientInterceptor]:
    """What a channel to `target` needs to carry traces: nothing unless tracing is on (an aio
    interceptor costs a task per call even when its spans are no-ops). Give the channel's target for
    the spans' and the metric's server.address and server.port."""
    return [TraceContextInterceptor(target)] if tracing_enabled() else []
