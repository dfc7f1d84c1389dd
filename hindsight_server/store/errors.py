"""Translates database failures into domain errors, by exception class (never by message text)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg

from hindsight_server.domain.errors import (
    Aborted,
    DeadlineExceeded,
    InvalidArgument,
    ResourceExhausted,
    Unavailable,
)
from hindsight_server.store.budget import PoolExhausted, StatementTimedOut

# Constraint name -> the request field it guards.
_CONSTRAINT_FIELDS = {
    "memories_valid_range": "memory.valid_to",
    "memories_confidence_check": "memory.confidence",
}

_UNREACHABLE = (
    OSError,
    asyncio.TimeoutError,
    asyncpg.PostgresConnectionError,
    asyncpg.CannotConnectNowError,
    asyncpg.TooManyConnectionsError,
    asyncpg.ConnectionDoesNotExistError,
    asyncpg.AdminShutdownError,
    asyncpg.CrashShutdownError,
)

# A maintenance step that yields rather than waits, and runs again at the job's next round: a lock not
# taken within its short lock_timeout (the DDL would queue every write behind it), or a partition that
# cannot be made because the default partition holds rows of its range, or was made meanwhile by an
# operator's hand (store/feed.py).
MAINTENANCE_DEFERRED = (
    asyncpg.LockNotAvailableError,
    asyncpg.CheckViolationError,
    asyncpg.DuplicateTableError,
)

# Two transactions that locked the same rows in different orders (a purge and a write of one tenant's
# BM25 rows and version links): PostgreSQL aborted one; retrying it whole is safe (store/lifecycle.py).
LOCK_CONFLICTS = (asyncpg.DeadlockDetectedError, asyncpg.SerializationError)

# A statement on a replica cancelled because replay needed the rows it read (SQLSTATE 40001): the read
# goes to the primary instead (store/routing.py).
REPLICA_CONFLICT = asyncpg.SerializationError

# A connection whose last statement failed in any of these ways cannot be trusted to hold or release a
# session's state (an advisory lock): it is ended (store/jobs.py).
CONNECTION_FAILURES = (asyncpg.PostgresError, asyncpg.InterfaceError, OSError)


@asynccontextmanager
async def translate_errors() -> AsyncIterator[None]:
    try:
        yield
    except asyncpg.QueryCanceledError as exc:  # statement_timeout
        raise DeadlineExceeded("the database did not answer within the statement timeout") from exc
    except StatementTimedOut as exc:  # its budget (store/budget.py): the call's deadline, or the default
        raise DeadlineExceeded(str(exc)) from exc
    except PoolExhausted as exc:  # every connection busy: this server is loaded, another may not be
        raise ResourceExhausted(f"{exc}; retry later", retry_after_s=max(exc.waited_s, 0.05)) from exc
    except asyncpg.DeadlockDetectedError as exc:
        # PostgreSQL ended this statement to break a cycle of row locks with another transaction (the
        # ordered locks of store/sql.py keep the known pairs out of it): nothing of it was written, and
        # run again it finds the rows free.
        raise Aborted("the change collided with a concurrent change of the same rows; retry it") from exc
    except asyncpg.CheckViolationError as exc:
        field = _CONSTRAINT_FIELDS.get(exc.constraint_name or "", "memory")
        raise InvalidArgument(field, "violates a constraint of the memory record") from exc
    except asyncpg.CharacterNotInRepertoireError as exc:
        raise InvalidArgument("memory", "text is not valid UTF-8") from exc
    except _UNREACHABLE as exc:
        raise Unavailable("the database is unavailable; retry later") from exc
    except asyncpg.InternalClientError as exc:
        # asyncpg's protocol refusing an operation on a connection that a lost PostgreSQL left between
        # two states ("cannot switch to state ...; another operation is in progress"): on BEGIN, on
        # the reset that gives it back to the pool. Seen only restarting PostgreSQL under write load
        # (tests/faults/test_postgres_restart.py). A retry is safe: the statement did not run, or (on the
        # reset) it committed and the retry's idempotency key finds what it wrote.
        raise Unavailable("the database connection was lost; retry later") from exc
    except asyncpg.InterfaceError as exc:
        # Leaving a transaction block whose connection died under it: InterfaceError ("the underlying
        # connection is closed") with the loss as its context.
        if _caused_by(exc, (*_UNREACHABLE, asyncpg.InternalClientError)):
            raise Unavailable("the database is unavailable; retry later") from exc
        raise


def _caused_by(error: BaseException, classes: tuple[type[BaseException], ...]) -> bool:
    cause = error.__cause__ or error.__context__
    for _ in range(8):
        if cause is None:
            return False
        if isinstance(cause, classes):
            return True
        cause = cause.__cause__ or cause.__context__
    return False
