"""How long a statement may run: the time the gRPC call it serves has left (capped), or the configured
default for work outside a call (the lifecycle jobs, the embedding worker) and calls without a deadline.
A caller that allows a WriteBatch 30 s gets its statements 30 s; one that allows 200 ms gets its
statements cancelled at 200 ms, with DEADLINE_EXCEEDED from the server itself.

The transport binds each call's deadline (rpc/interceptors.py, into domain/deadline.py); the pool's
connections apply the budget to every statement as asyncpg's timeout, which cancels the statement on the
server when it passes."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar, TypeVar

import asyncpg

from hindsight_server.domain.deadline import call_deadline
from hindsight_server.store.tracing import TracedConnection

T = TypeVar("T")

# Left for the answer to travel back before the caller's deadline.
ANSWER_MARGIN_S = 0.02
MIN_BUDGET_S = 0.001  # asyncpg treats 0 as no timeout


def acquire_budget_s(limit_s: float) -> float:
    """How long a wait for a pooled connection may last: `limit_s`, or less when the call has less
    left (a caller that allows 200 ms is not kept waiting a second for a connection)."""
    deadline = call_deadline()
    if deadline is None:
        return limit_s
    return max(min(limit_s, deadline - time.monotonic() - ANSWER_MARGIN_S), MIN_BUDGET_S)


class PoolExhausted(Exception):
    """No pooled connection came free within the wait's budget (store/errors.py: ResourceExhausted)."""

    def __init__(self, waited_s: float) -> None:
        super().__init__(f"no database connection came free within {waited_s * 1000:.0f} ms")
        self.waited_s = waited_s


class StatementTimedOut(Exception):
    """A statement ran past its budget and was cancelled (store/errors.py: DeadlineExceeded)."""

    def __init__(self, budget_s: float, by_deadline: bool) -> None:
        bound = "the call's deadline" if by_deadline else "the statement timeout"
        super().__init__(f"the database did not answer within {bound} ({budget_s * 1000:.0f} ms)")


class BudgetedConnection(asyncpg.Connection):  # type: ignore[misc]  # asyncpg has no type information
    """Every statement gets the budget unless its caller passed a timeout of its own."""

    # Set by connection_class() from the configuration.
    default_budget_s: ClassVar[float]
    max_budget_s: ClassVar[float]
    # On a replica's connection, the replay position last seen on it (store/routing.py); -1: none yet.
    # A connection stays with its server, and a server's replay only moves on.
    replayed: int = -1

    def saw_replayed(self, position: int) -> None:
        self.replayed = max(self.replayed, position)

    def _budget(self) -> tuple[float, bool]:
        deadline = call_deadline()
        if deadline is None:
            return self.default_budget_s, False
        left = deadline - time.monotonic() - ANSWER_MARGIN_S
        return max(min(left, self.max_budget_s), MIN_BUDGET_S), left <= self.max_budget_s

    async def _bounded(self, run: Callable[[float], Awaitable[T]], given: float | None) -> T:
        """`run` with the caller's own timeout when it gave one, else with the budget."""
        if given is not None:
            return await run(given)
        budget, by_deadline = self._budget()
        try:
            return await run(budget)
        except TimeoutError as exc:
            raise StatementTimedOut(budget, by_deadline) from exc

    # asyncpg's signatures; `timeout` stays a keyword as callers (the pool) pass it.
    async def execute(self, query: str, *args: Any, **kwargs: Any) -> Any:
        execute, given = super().execute, kwargs.pop("timeout", None)
        return await self._bounded(lambda t: execute(query, *args, timeout=t, **kwargs), given)

    async def executemany(self, command: str, args: Any, **kwargs: Any) -> Any:
        executemany, given = super().executemany, kwargs.pop("timeout", None)
        return await self._bounded(lambda t: executemany(command, args, timeout=t, **kwargs), given)

    async def fetch(self, query: str, *args: Any, **kwargs: Any) -> Any:
        fetch, given = super().fetch, kwargs.pop("timeout", None)
        return await self._bounded(lambda t: fetch(query, *args, timeout=t, **kwargs), given)

    async def fetchrow(self, query: str, *args: Any, **kwargs: Any) -> Any:
        fetchrow, given = super().fetchrow, kwargs.pop("timeout", None)
        return await self._bounded(lambda t: fetchrow(query, *args, timeout=t, **kwargs), given)

    async def fetchval(self, query: str, *args: Any, **kwargs: Any) -> Any:
        fetchval, given = super().fetchval, kwargs.pop("timeout", None)
        return await self._bounded(lambda t: fetchval(query, *args, timeout=t, **kwargs), given)


def connection_class(default_s: float, max_s: float, traced: bool) -> type[asyncpg.Connection]:
    """The pool's connection class: budgeted, and traced (store/tracing.py) when tracing is on."""
    bases: tuple[type[asyncpg.Connection], ...] = (
        (BudgetedConnection, TracedConnection) if traced else (BudgetedConnection,)
    )
    return type("PoolConnection", bases, {"default_budget_s": default_s, "max_budget_s": max_s})
