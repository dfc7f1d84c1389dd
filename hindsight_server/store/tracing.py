"""A span per PostgreSQL statement: an asyncpg connection class whose query methods trace themselves.

Spans carry what OpenTelemetry's database conventions ask for (db.system, the operation and the
table), named like "SELECT memories", and never the SQL text: some statements carry literals made from
the query's words (the BM25 plan), and parameters hold memory content. Statements outside a traced
request (the backfill worker's polling, health pings) make no span, so idle servers export nothing.
Used only when tracing is on (store.pool.create_pool(traced=True)); otherwise the plain class runs.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Awaitable, Callable, Sized
from typing import Any, TypeVar

import asyncpg
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from hindsight_server.telemetry.recorder import TRACER

T = TypeVar("T")

_OPERATION = re.compile(r"\s*(?:--[^\n]*\n\s*)*(\w+)")
# After WITH and its parenthesised queries, the statement's own verb.
_WORD_OR_PARENTHESIS = re.compile(r"\(|\)|\w+")
_VERBS = frozenset({"SELECT", "INSERT", "UPDATE", "DELETE", "MERGE"})
# The first table a statement reads or writes, after the verb's keyword; enough to tell statements apart.
# ("FROM now()" names a function: skipped; "INTO memories (id, ...)" lists columns.)
_TABLE = re.compile(r"\b(?:INTO|UPDATE|(FROM|JOIN))\s+([A-Za-z_][A-Za-z0-9_.]*)\s*(\()?", re.IGNORECASE)
_BASE_ATTRIBUTES = {"db.system": "postgresql", "db.system.name": "postgresql"}


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
    """The verb outside every parenthesis: what a WITH statement does (its CTEs are in parentheses)."""
    depth = 0
    for match in _WORD_OR_PARENTHESIS.finditer(after_with):
        token = match.group(0)
        if token == "(":
            depth += 1
        elif token == ")":
            depth -= 1
        elif depth == 0 and token.upper() in _VERBS:
            return token.upper()
    return None


def _traced() -> bool:
    return trace.get_current_span().get_span_context().is_valid


async def _run(statement: str, call: Callable[[], Awaitable[T]], table: str = "", batch: int = 0) -> T:
    """Runs one statement, in its own span when a traced request runs it."""
    if not _traced():
        return await call()
    operation, first_table = statement_name(statement)
    table = table or first_table
    attributes: dict[str, str | int] = {**_BASE_ATTRIBUTES, "db.operation.name": operation}
    if table:
        attributes["db.collection.name"] = table
    if batch:
        attributes["db.operation.batch.size"] = batch
    with TRACER.start_as_current_span(
        f"{operation} {table}" if table else operation,
        kind=SpanKind.CLIENT,
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        try:
            result = await call()
        except Exception as exc:
            # The class only (e.g. QueryCanceledError): a database message can quote a row's values.
            span.set_attribute("error.type", type(exc).__name__)
            span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
            raise
        if isinstance(result, list):
            span.set_attribute("db.response.returned_rows", len(result))
        return result


class TracedConnection(asyncpg.Connection):  # type: ignore[misc]  # asyncpg has no type information
    async def execute(self, query: str, *args: Any, **kwargs: Any) -> Any:
        execute = super().execute
        return await _run(query, lambda: execute(query, *args, **kwargs))

    async def executemany(self, command: str, args: Any, **kwargs: Any) -> Any:
        executemany = super().executemany
        batch = len(args) if isinstance(args, Sized) else 0
        return await _run(command, lambda: executemany(command, args, **kwargs), batch=batch)

    async def fetch(self, query: str, *args: Any, **kwargs: Any) -> Any:
        fetch = super().fetch
        return await _run(query, lambda: fetch(query, *args, **kwargs))

    async def fetchrow(self, query: str, *args: Any, **kwargs: Any) -> Any:
        fetchrow = super().fetchrow
        return await _run(query, lambda: fetchrow(query, *args, **kwargs))

    async def fetchval(self, query: str, *args: Any, **kwargs: Any) -> Any:
        fetchval = super().fetchval
        return await _run(query, lambda: fetchval(query, *args, **kwargs))

    async def fetchmany(self, query: str, args: Any, **kwargs: Any) -> Any:
        fetchmany = super().fetchmany
        batch = len(args) if isinstance(args, Sized) else 0
        return await _run(query, lambda: fetchmany(query, args, **kwargs), batch=batch)

    async def copy_records_to_table(self, table_name: str, **kwargs: Any) -> Any:
        copy = super().copy_records_to_table
        return await _run("COPY", lambda: copy(table_name, **kwargs), table=table_name)
