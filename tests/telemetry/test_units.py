"""The pure parts: the latency window, statement names and attributes for database spans, the exporter
and OTLP protocol choice, the server attributes of a gRPC target."""

from __future__ import annotations

from types import SimpleNamespace

import asyncpg
import pytest
from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter as GrpcMetrics
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpans
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter as HttpMetrics
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpans

from hindsight.telemetry import (
    TelemetryConfigError,
    _exporters,
    resolve_exporter,
    resolve_protocol,
    server_attributes,
)
from hindsight_server.store.tracing import connection_attributes, error_attributes, statement_name
from hindsight_server.telemetry.window import LatencyWindow


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_window_percentiles_are_nearest_rank_over_the_recent_samples() -> None:
    clock = FakeClock()
    window = LatencyWindow(60, 1000, clock)
    assert window.summary() is None
    for ms in range(1, 101):  # 1..100 ms
        window.add(float(ms))
    summary = window.summary()
    assert summary is not None
    assert (summary.count, summary.p50_ms, summary.p95_ms, summary.p99_ms, summary.max_ms) == (
        100,
        50.0,
        95.0,
        99.0,
        100.0,
    )
    clock.now += 61  # all of them age out
    window.add(7.0)
    summary = window.summary()
    assert summary is not None and (summary.count, summary.p99_ms) == (1, 7.0)


def test_window_keeps_only_the_newest_samples() -> None:
    window = LatencyWindow(60, 3, FakeClock())
    for ms in (500.0, 1.0, 2.0, 3.0):
        window.add(ms)
    summary = window.summary()
    assert summary is not None and (summary.count, summary.max_ms) == (3, 3.0)


@pytest.mark.parametrize(
    ("statement", "expected"),
    [
        ("SELECT id FROM memories WHERE tenant_id = $1", ("SELECT", "memories")),
        (
            "\n  INSERT INTO memories (id, content) VALUES ($1, $2) ON CONFLICT DO UPDATE SET x = 1",
            ("INSERT", "memories"),
        ),
        ("UPDATE memories SET status = 'expired'", ("UPDATE", "memories")),
        ("SELECT extract(epoch FROM now()) FROM job_runs", ("SELECT", "job_runs")),
        ("WITH t AS (SELECT 1 FROM term_df) SELECT * FROM t", ("SELECT", "term_df")),
        (
            "WITH due AS MATERIALIZED (SELECT id FROM memories LIMIT 5) UPDATE memories m SET x = 1 FROM due",
            ("UPDATE", "memories"),
        ),
        ("WITH RECURSIVE chain AS (SELECT 1 UNION ALL SELECT 2)", ("WITH", "")),
        (
            "WITH inserted AS (INSERT INTO memories (id) SELECT u.id FROM unnest($1) AS u(id) RETURNING id), "
            "stats AS (UPDATE lexical_stats SET documents = 1) SELECT id FROM inserted",
            ("INSERT", "memories"),
        ),
        (
            "WITH changed AS (UPDATE memories SET status = 'deleted' RETURNING id), "
            "feed AS (INSERT INTO change_events (memory_id) SELECT id FROM changed) SELECT * FROM changed",
            ("UPDATE", "memories"),
        ),
        ("BEGIN;", ("BEGIN", "")),
    ],
)
def test_statement_names_never_carry_the_sql(statement: str, expected: tuple[str, str]) -> None:
    assert statement_name(statement) == expected


def test_exporter_choice_follows_the_setting_then_the_standard_variables() -> None:
    assert resolve_exporter("console", {"OTEL_TRACES_EXPORTER": "otlp"}) == "console"
    assert resolve_exporter("", {"OTEL_TRACES_EXPORTER": "console"}) == "console"
    assert resolve_exporter("", {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4317"}) == "otlp"
    assert resolve_exporter("", {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}) == "otlp"
    assert resolve_exporter("", {}) == "none"
    with pytest.raises(TelemetryConfigError, match="unknown telemetry exporter 'zipkin'"):
        resolve_exporter("", {"OTEL_TRACES_EXPORTER": "zipkin"})


def test_the_protocol_follows_the_signal_variable_then_the_general_one_then_grpc() -> None:
    assert resolve_protocol("traces", {}) == "grpc"
    assert resolve_protocol("traces", {"OTEL_EXPORTER_OTLP_PROTOCOL": " http/protobuf "}) == "http/protobuf"
    both = {"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf", "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL": "grpc"}
    assert (resolve_protocol("traces", both), resolve_protocol("metrics", both)) == ("http/protobuf", "grpc")
    assert resolve_protocol("metrics", {"OTEL_EXPORTER_OTLP_METRICS_PROTOCOL": ""}) == "grpc"  # empty: unset
    with pytest.raises(TelemetryConfigError) as refused:
        resolve_protocol("traces", {"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json"})
    assert str(refused.value) == (
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL='http/json' is not supported (http/json has no Python exporter): "
        "grpc or http/protobuf"
    )


def test_each_protocol_gets_its_exporter_and_a_configured_endpoint_its_signal_path() -> None:
    http = {"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}
    spans, metrics = _exporters("otlp", "http://collector:4318/", http)
    assert isinstance(spans, HttpSpans) and isinstance(metrics, HttpMetrics)
    assert (spans._endpoint, metrics._endpoint) == (
        "http://collector:4318/v1/traces",
        "http://collector:4318/v1/metrics",
    )
    spans, metrics = _exporters("otlp", "http://collector:4317", {})
    assert isinstance(spans, GrpcSpans) and isinstance(metrics, GrpcMetrics)
    spans.shutdown()
    metrics.shutdown()


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        ("127.0.0.1:50051", {"server.address": "127.0.0.1", "server.port": 50051}),
        ("nginx:50051", {"server.address": "nginx", "server.port": 50051}),
        ("[::1]:50051", {"server.address": "::1", "server.port": 50051}),
        (
            "dns:///memory.svc.cluster.local:50051",
            {"server.address": "memory.svc.cluster.local", "server.port": 50051},
        ),
        ("dns://8.8.8.8/grpc.io:443", {"server.address": "grpc.io", "server.port": 443}),
        ("unix:///run/hindsight.sock", {"server.address": "/run/hindsight.sock"}),
        ("ipv4:10.0.0.1:50051,10.0.0.2:50051", {"server.address": "ipv4:10.0.0.1:50051,10.0.0.2:50051"}),
        ("", {}),
    ],
)
def test_server_attributes_of_a_grpc_target(target: str, expected: dict[str, str | int]) -> None:
    assert server_attributes(target) == expected


def test_database_attributes_name_where_a_connection_went_and_why_a_statement_failed() -> None:
    tcp = SimpleNamespace(_addr=("db.internal", 6432), _params=SimpleNamespace(database="hindsight"))
    assert connection_attributes(tcp) == {
        "db.system.name": "postgresql",
        "db.namespace": "hindsight",
        "server.address": "db.internal",
        "server.port": 6432,
    }
    socket = SimpleNamespace(_addr="/run/postgresql/.s.PGSQL.5432", _params=SimpleNamespace(database="h"))
    assert connection_attributes(socket)["server.address"] == "/run/postgresql/.s.PGSQL.5432"
    assert "server.port" not in connection_attributes(socket)
    assert error_attributes(asyncpg.exceptions.QueryCanceledError("canceling statement")) == {
        "db.response.status_code": "57014",
        "error.type": "57014",
    }
    assert error_attributes(asyncpg.InterfaceError("the connection is closed")) == {
        "error.type": f"{asyncpg.InterfaceError.__module__}.InterfaceError"
    }
    assert error_attributes(TimeoutError()) == {"error.type": "TimeoutError"}
