"""In-process OpenTelemetry for the telemetry tests: the SDK with an in-memory span exporter and an
in-memory metric reader, installed for the process (OpenTelemetry allows one provider per process, so
once per session), and memory servers started after it, so they trace (tracing is decided at start)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import Histogram, HistogramDataPoint, InMemoryMetricReader, Metric
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanContext
from opentelemetry.util.types import AnyValue, Attributes

from hindsight.client import HindsightClient
from hindsight_server.config import Settings
from hindsight_server.process.running import RunningServer
from hindsight_server.process.server import start_server
from tests.support.eventually import eventually


@dataclass(frozen=True)
class Telemetry:
    spans: InMemorySpanExporter
    metrics: InMemoryMetricReader

    def finished(self) -> list[ReadableSpan]:
        return list(self.spans.get_finished_spans())

    def points(self, name: str) -> list[Any]:
        """The data points of metric `name` collected now (observable instruments are read now)."""
        return [point for metric in self.collected(name) for point in metric.data.data_points]

    def collected(self, name: str) -> list[Metric]:
        """Metric `name` as collected now, from every scope that has it (its unit, its points)."""
        data = self.metrics.get_metrics_data()
        found: list[Metric] = []
        for resource in data.resource_metrics if data else ():
            for scope in resource.scope_metrics:
                found.extend(metric for metric in scope.metrics if metric.name == name)
        return found


def context_of(span: ReadableSpan) -> SpanContext:
    """A finished span's own context (the SDK's spans always have one)."""
    context = span.get_span_context()
    assert context is not None, span.name
    return context


def started(span: ReadableSpan) -> int:
    assert span.start_time is not None, span.name
    return span.start_time


def ended(span: ReadableSpan) -> int:
    assert span.end_time is not None, span.name
    return span.end_time


def attributes_of(item: ReadableSpan | HistogramDataPoint) -> Mapping[str, AnyValue]:
    """The attributes of a span or a data point (the SDK's always have them, if empty)."""
    assert item.attributes is not None, item
    return item.attributes


def number(attributes: Attributes, key: str) -> float:
    """A numeric attribute (one that must be there)."""
    assert attributes is not None
    value = attributes[key]
    assert isinstance(value, int | float) and not isinstance(value, bool), (key, value)
    return value


def histogram_points(metric: Metric) -> list[HistogramDataPoint]:
    """The points of a histogram metric (asserting it is one)."""
    assert isinstance(metric.data, Histogram), (metric.name, metric.data)
    return list(metric.data.data_points)


@pytest.fixture(scope="session")
def otel() -> Iterator[Telemetry]:
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))  # exported as each span ends
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    if not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        pytest.skip("another tracer provider is installed in this process")
    trace.set_tracer_provider(tracer_provider)
    metrics.set_meter_provider(meter_provider)
    yield Telemetry(spans, reader)
    tracer_provider.shutdown()
    meter_provider.shutdown()


@pytest.fixture(scope="session")
async def traced_server(
    otel: Telemetry, make_settings: Callable[..., Settings]
) -> AsyncIterator[RunningServer]:
    # A generous target: the "met" side of the p99 gauge must hold on a busy 2-core machine.
    running = await start_server(make_settings(telemetry__recall_p99_target_ms=60_000))
    yield running
    await running.stop()


@pytest.fixture(scope="session")
async def traced_client(traced_server: RunningServer) -> AsyncIterator[HindsightClient]:
    async with HindsightClient(f"127.0.0.1:{traced_server.port}", timeout_s=10) as client:
        yield client


def database_attributes(dsn: str) -> dict[str, str | int]:
    """What a statement's span and metric say about where it ran, read from the DSN as libpq reads it:
    db.namespace the database, server.address the host (a Unix socket's path, `<dir>/.s.PGSQL.<port>`,
    with no server.port) and server.port."""
    parts = urlsplit(dsn)
    query = parse_qs(parts.query)
    host = query.get("host", [parts.hostname or ""])[0]
    port = parts.port or int(query.get("port", ["5432"])[0])
    where: dict[str, str | int] = {"db.namespace": parts.path.lstrip("/")}
    if host.startswith("/"):
        where["server.address"] = f"{host.rstrip('/')}/.s.PGSQL.{port}"
    else:
        where["server.address"], where["server.port"] = host, port
    return where


async def spans_of_trace(
    otel: Telemetry, ready: Callable[[Sequence[ReadableSpan]], bool], timeout_s: float = 10.0
) -> list[ReadableSpan]:
    """Waits until the finished spans satisfy `ready` (the server ends its spans in its own task)."""
    spans: list[ReadableSpan] = []

    def arrived() -> bool:
        spans[:] = otel.finished()
        return ready(spans)

    def missing() -> str:
        return f"the expected spans did not arrive; finished: {sorted({span.name for span in spans})}"

    await eventually(arrived, timeout_s, poll_s=0.02, message=missing)
    return spans
