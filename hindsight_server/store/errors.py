"""Translates database failures into domain errors, by exception class (never by message text)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg

from hindsight_server.domain.errors import DeadlineExceeded, InvalidArgument, Unavailable

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


@asynccontextmanager
async def translate_errors() -> AsyncIterator[None]:
    try:
        yield
    except asyncpg.QueryCanceledError as exc:  # statement_timeout
        raise DeadlineExceeded("the database did not answer within the statement timeout") from exc
    except asyncpg.CheckViolationError as exc:
        field = _CONSTRAINT_FIELDS.get(exc.constraint_name or "", "memory")
        raise InvalidArgument(field, "violates a constraint of the memory record") from exc
    except asyncpg.CharacterNotInRepertoireError as exc:
        raise InvalidArgument("memory", "text is not valid UTF-8") from exc
    except _UNREACHABLE as exc:
        raise Unavailable("the database is unavailable; retry later") from exc
