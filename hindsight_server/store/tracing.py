"""A span per PostgreSQL statement: an asyncpg connection class whose query methods trace themselves.

Spans carry what OpenTelemetry's database conventions ask for: `db.system.name` "postgresql",
`db.operation.name` and `db.collection.name` (named like "SELECT memories"), `db.namespace` (the
database the connection was opened on: the schema would cost a query), `server.address` and
`server.port` (the host and port it connected to; a Unix socket's path, without a port), and on failure
`db.response.status_code` (the SQLSTATE) with `error.type` (the same SQLSTATE, or the exception's
class when the database gave none, e.g. a timeout) -- never the SQL text: some statements carry
literals made from the query's words (the BM25 plan), and parameters hold memory content.
Statements outside a traced request (the backfill worker's polling, health pings) make no span, so
idle servers export no traces; every statement counts in the `db.client.operation.duration` histogram
(seconds, the conventions' buckets) with the same attributes.
Used only when tracing is on (store.pool.create_pool(traced=True)); otherwise the plain class runs.
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Awaitable, Callable, Mapping, Sized
from typing import Any, TypeVar

import asyncpg
from opentelemetry import metrics, trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from hindsight_server.telemetry.recorder import TRACER
from hindsight_server.telemetry.units import DB_OPERATION_BUCKETS_S

T = TypeVar("T")

_OPERATION = re.compile(r"\s*(?:--[^\n]*\n\s*)*(\w+)")
# After WITH and its parenthesised queries, the statement's own verb.
_WORD_OR_PARENTHESIS = re.compile(r"\(|\)|\w+")
_VERBS = frozenset({"SELECT", "INSERT", "UPDATE", "DELETE", "MERGE"})
# The first table a statement reads or writes, after the verb's keyword; enough to tell statements apart.
# ("FROM now()" names a function: skipped; "INTO memories (id, ...)" lists columns.)
_TABLE = re.compile(r"\b(?:INTO|UPDATE|(FROM|JOIN))\s+([A-Za-z_][A-Za-z0-9_.]*)\s*(\()?", re.IGNORECASE)
_BASE_ATTRIBUTES = {"db.system.name": "postgresql"}
Attributes = dict[str, str | int]


@functools.cache
def _duration() -> metrics.Histogram:
    return metrics.get_meter("hindsight_server").create_histogram(
        "db.client.operation.duration",
        unit="s",
        description="PostgreSQL statements, by operation, table and outcome",
        explicit_bucket_boundaries_advisory=DB_OPERATION_BUCKETS_S,
    )


@functools.lru_cache(maxsize=256)  # statements are mostly the store's constant strings
def statement_name(query: str) -> tuple[str, str]:
    """(operation, table) of a statement: ("SELECT", "memories"); the table may be ""."""
    verb = _OPERATION.match(query)
    table = next((m.group(2) for m in _TABLE.finditer(query) if not (m.group(1) and m.group(3))), "")
    if verb is None:
        return "SQL", table
    operation = verb.group(1).upper()
    if operation == "WITH":
        operation = _main_verb(query[verb.end() :]) or operation
    return operation, table


def _main_verb(after_with: str) -> str | None:
    """What a WITH statement does: the verb outside every parenthesis (its CTEs are in parentheses),
    unless that is a SELECT over a CTE that changes rows ("WITH inserted AS (INSERT ...) SELECT id FROM
    inserted" writes memories): then the first changing verb opening a parenthesis."""
    depth, opened, changing = 0, False, None
    for match in _WORD_OR_PARENTHESIS.finditer(after_with):
        token = match.group(0)
        if token == "(":
            depth, opened = depth + 1, True
            continue
        if token == ")":
            depth -= 1
        else:
            verb = token.upper()
            if depth == 0 and verb in _VERBS:
                return changing if verb == "SELECT" and changing else verb
            if opened and changing is None and verb in _VERBS - {"SELECT"}:
                changing = verb
        opened = False
    return None


def _traced() -> bool:
    return trace.get_current_span().get_span_context().is_valid


def connection_attributes(connection: asyncpg.Connection) -> Attributes:
    """db.namespace, server.address and server.port of an open connection: where it connected (asyncpg
    keeps the address and the parameters it connected with on the connection)."""
    attributes: Attributes = {**_BASE_ATTRIBUTES}
    database = getattr(getattr(connection, "_params", None), "database", None)
    if database:
        attributes["db.namespace"] = str(database)
    address = getattr(connection, "_addr", None)
    if isinstance(address, tuple) and len(address) >= 2:  # (host, port), IPv6 with flow and scope too
        attributes["server.address"], attributes["server.port"] = str(address[0]), int(address[1])
    elif isinstance(address, str) and address:  # a Unix socket's path
        attributes["server.address"] = address
    return attributes


def error_attributes(exc: BaseException) -> dict[str, str]:
    """The SQLSTATE of a database error (its class only otherwise): a message can quote a row's values."""
    sqlstate = getattr(exc, "sqlstate", None) if isinstance(exc, asyncpg.PostgresError) else None
    if sqlstate:
        return {"db.response.status_code": str(sqlstate), "error.type": str(sqlstate)}
    kind = type(exc)
    name = kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
    return {"error.type": name}


async def _run(
    connection: Mapping[str, str | int],
    statement: str,
    call: Callable[[], Awaitable[T]],
    table: str = "",
    batch: int = 0,
) -> T:
    """Runs one statement, in its own span when a traced request runs it, and times it."""
    operation, first_table = statement_name(statement)
    table = table or first_table
    attributes: Attributes = {**connection, "db.operation.name": operation}
    if table:
        attributes["db.collection.name"] = table
    started = time.perf_counter()
    if not _traced():
        try:
            result = await call()
        except Exception as exc:
            _duration().record(time.perf_counter() - started, {**attributes, **error_attributes(exc)})
            raise
        _duration().record(time.perf_counter() - started, attributes)
        return result
    span_attributes = dict(attributes)
    if batch:
        span_attributes["db.operation.batch.size"] = batch
    with TRACER.start_as_current_span(
        f"{operation} {table}" if table else operation,
        kind=SpanKind.CLIENT,
        attributes=span_attributes,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        try:
            result = await call()
        except Exception as exc:
            failure = error_attributes(exc)
            span.set_attributes(failure)
            span.set_status(Status(StatusCode.ERROR, failure["error.type"]))
            _duration().record(time.perf_counter() - started, {**attributes, **failure})
            raise
        _duration().record(time.perf_counter() - started, attributes)
        if isinstance(result, list):
            span.set_attribute("db.response.returned_rows", len(result))
        return result


class TracedConnection(asyncpg.Connection):  # type: ignore[misc]  # asyncpg has no type information
    _otel_attributes: Attributes | None = None

    def _telemetry(self) -> Attributes:
        """This connection's attributes, read once (they do not change while it is open)."""
        if self._otel_attributes is None:
            self._otel_attributes = connection_attributes(self)
        return self._otel_attributes

    async def execute(self, query: str, *args: Any, **kwargs: Any) -> Any:
        execute = super().execute
        return await _run(self._telemetry(), query, lambda: execute(query, *args, **kwargs))

    async def executemany(self, command: str, args: Any, **kwargs: Any) -> Any:
        executemany = super().executemany
        batch = len(args) if isinstance(args, Sized) else 0
        return await _run(
            self._telemetry(), command, lambda: executemany(command, args, **kwargs), batch=batch
        )

    async def fetch(self, query: str, *args: Any, **kwargs: Any) -> Any:
        fetch = super().fetch
        return await _run(self._telemetry(), query, lambda: fetch(query, *args, **kwargs))

    async def fetchrow(self, query: str, *args: Any, **kwargs: Any) -> Any:
        fetchrow = super().fetchrow
        return await _run(self._telemetry(), query, lambda: fetchrow(query, *args, **kwargs))

    async def fetchval(self, query: str, *args: Any, **kwargs: Any) -> Any:
        fetchval = super().fetchval
        return await _run(self._telemetry(), query, lambda: fetchval(query, *args, **kwargs))

    async def fetchmany(self, query: str, args: Any, **kwargs: Any) -> Any:
        fetchmany = super().fetchmany
        batch = len(args) if isinstance(args, Sized) else 0
        return await _run(self._telemetry(), query, lambda: fetchmany(query, args, **kwargs), batch=batch)

    async def copy_records_to_table(self, table_name: str, **kwargs: Any) -> Any:
        copy = super().copy_records_to_table
        return await _run(self._telemetry(), "COPY", lambda: copy(table_name, **kwargs), table=table_name)
