"""The pure parts: the latency window, statement names for database spans, the exporter choice."""

from __future__ import annotations

import pytest

from hindsight.telemetry import resolve_exporter
from hindsight_server.store.tracing import statement_name
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
        ("BEGIN;", ("BEGIN", "")),
    ],
)
def test_statement_names_never_carry_the_sql(statement: str, expected: tuple[str, str]) -> None:
    assert statement_name(statement) == expected


def test_exporter_choice_follows_the_setting_then_the_standard_variables() -> None:
    assert resolve_exporter("console", {"OTEL_TRACES_EXPORTER": "otlp"}) == "console"
    assert resolve_exporter("", {"OTEL_TRACES_EXPORTER": "console"}) == "console"
    assert resolve_exporter("", {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4317"}) == "otlp"
    assert resolve_exporter("", {}) == "none"
    with pytest.raises(ValueError, match="unknown telemetry exporter 'zipkin'"):
        resolve_exporter("", {"OTEL_TRACES_EXPORTER": "zipkin"})
