"""The offline commands' parts (`hindsight jobs`, `hindsight tenants`): against the configured database,
without serving."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from hindsight_server.config import Settings
from hindsight_server.domain.clock import Clock, system_clock
from hindsight_server.domain.errors import HindsightError
from hindsight_server.pipelines.jobs import JobRunner
from hindsight_server.pipelines.tenants import ApiKeys
from hindsight_server.pipelines.write import WritePipeline
from hindsight_server.process.builders import (
    build_jobs,
    erasure_pipeline,
    schema_shape,
    server_name,
    session_pipeline,
    write_settings,
)
from hindsight_server.process.errors import StartupError
from hindsight_server.process.inference import connect_inference
from hindsight_server.store.memories import MemoryStore
from hindsight_server.store.migrate import migrate
from hindsight_server.store.pool import create_pool
from hindsight_server.store.tenants import ApiKeyStore


@contextlib.asynccontextmanager
async def open_jobs(settings: Settings, *, clock: Clock = system_clock) -> AsyncIterator[JobRunner]:
    """The lifecycle jobs against the configured database, without serving (`hindsight jobs`); with
    the inference tier when one is configured, so derived memories get their embeddings."""
    db = settings.database
    try:
        await migrate(db.dsn, schema_shape(settings), db.connect_timeout_s)
    except HindsightError as exc:
        raise StartupError(f"cannot reach the database: {exc}") from exc
    inference = await connect_inference(settings)
    try:
        pool = await create_pool(
            db.dsn,
            min_size=1,
            max_size=max(2, min(db.pool_max, 4)),  # the job's lock holds one connection
            statement_timeout_ms=db.statement_timeout_ms,
            max_statement_timeout_ms=db.max_statement_timeout_ms,
            connect_timeout_s=db.connect_timeout_s,
        )
    except HindsightError as exc:
        if inference is not None:
            await inference.close()
        raise StartupError(f"cannot reach the database: {exc}") from exc
    try:
        store = MemoryStore(pool)
        store.feed_content_tenants = frozenset(settings.feed.content_tenants)
        writes = WritePipeline(store, write_settings(settings), clock, inference)
        sessions = session_pipeline(settings, pool, writes, clock)
        erasures = erasure_pipeline(settings, pool, clock)
        yield build_jobs(settings, pool, writes, sessions, erasures, clock, f"{server_name()} (cli)")
    finally:
        await pool.close()
        if inference is not None:
            await inference.close()


@contextlib.asynccontextmanager
async def open_api_keys(settings: Settings, *, clock: Clock = system_clock) -> AsyncIterator[ApiKeys]:
    """The API keys against the configured database, without serving (`hindsight tenants`)."""
    db = settings.database
    try:
        await migrate(db.dsn, schema_shape(settings), db.connect_timeout_s)
        pool = await create_pool(
            db.dsn,
            min_size=1,
            max_size=2,
            statement_timeout_ms=db.statement_timeout_ms,
            max_statement_timeout_ms=db.max_statement_timeout_ms,
            connect_timeout_s=db.connect_timeout_s,
        )
    except HindsightError as exc:
        raise StartupError(f"cannot reach the database: {exc}") from exc
    try:
        yield ApiKeys(ApiKeyStore(pool), clock, settings.limits, settings.security.api_key_cache_s)
    finally:
        await pool.close()
