"""A PostgreSQL statement that fails, on a real connection of the traced class inside a traced request:
its span and its db.client.operation.duration point carry the SQLSTATE (db.response.status_code and
error.type), or the exception's class when the database gave none, never the message."""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import pytest
from opentelemetry import trace
from opentelemetry.trace import SpanKind, StatusCode

from hindsight_server.store.tracing import TracedConnection
from tests.telemetry.conftest import Telemetry, database_attributes

DIVISION_BY_ZERO = "22012"


@pytest.fixture
async def connection(postgres_dsn: str) -> AsyncIterator[asyncpg.Connection]:
    connection = await asyncpg.connect(postgres_dsn, connection_class=TracedConnection)
    yield connection
    await connection.close()


async def test_a_failed_statement_carries_its_sqlstate(
    otel: Telemetry, connection: asyncpg.Connection, postgres_dsn: str
) -> None:
    otel.spans.clear()
    secret = 7919  # a parameter: it must not reach the span (nor would the message's text)
    with trace.get_tracer("tests").start_as_current_span("request"):
        with pytest.raises(asyncpg.DivisionByZeroError):
            await connection.fetchval("SELECT $1::int / 0 FROM pg_class LIMIT 1", secret)
        with pytest.raises(TimeoutError):
            await connection.fetchval("SELECT pg_sleep(5) FROM pg_class LIMIT 1", timeout=0.05)
        rows = await connection.fetch("SELECT relname FROM pg_class LIMIT 2")
    assert len(rows) == 2

    failed, timed_out, fine = [s for s in otel.finished() if s.kind is SpanKind.CLIENT]
    where = database_attributes(postgres_dsn)
    for span in (failed, timed_out, fine):
        assert span.name == "SELECT pg_class"
        assert span.attributes is not None
        assert span.attributes["db.system.name"] == "postgresql" and "db.system" not in span.attributes
        assert {key: span.attributes[key] for key in where} == where

    assert failed.attributes is not None
    assert failed.attributes["db.response.status_code"] == DIVISION_BY_ZERO
    assert failed.attributes["error.type"] == DIVISION_BY_ZERO
    assert failed.status.status_code is StatusCode.ERROR and failed.status.description == DIVISION_BY_ZERO
    assert str(secret) not in str(dict(failed.attributes)) and not failed.events

    # No SQLSTATE: the client gave up (asyncpg cancels the statement); the exception's class.
    assert timed_out.attributes is not None and timed_out.attributes["error.type"] == "TimeoutError"
    assert "db.response.status_code" not in timed_out.attributes

    assert fine.attributes is not None and fine.status.status_code is StatusCode.UNSET
    assert "error.type" not in fine.attributes and fine.attributes["db.response.returned_rows"] == 2

    on_pg_class = [
        p
        for p in otel.points("db.client.operation.duration")
        if p.attributes.get("db.collection.name") == "pg_class"
    ]
    outcomes = {
        (p.attributes.get("error.type"), p.attributes.get("db.response.status_code")) for p in on_pg_class
    }
    assert {(DIVISION_BY_ZERO, DIVISION_BY_ZERO), ("TimeoutError", None), (None, None)} <= outcomes
