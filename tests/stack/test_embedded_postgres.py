"""The embedded PostgreSQL runs with the stack's sizing: applied once by a restart, kept across starts."""

from __future__ import annotations

from pathlib import Path

import asyncpg
import pytest

from hindsight_server.config import StackSettings
from hindsight_server.stack.postgres import EmbeddedPostgres, server_settings

GB = 1024**3


@pytest.mark.parametrize(
    ("memory", "shared_buffers", "effective_cache_size"),
    [
        (24 * GB, "4096MB", "12288MB"),  # a quarter, capped at 4 GB
        (8 * GB, "2048MB", "4096MB"),
        (256 * 1024**2, "128MB", "128MB"),  # never below initdb's default
    ],
)
def test_shared_buffers_default_to_a_quarter_of_the_memory_within_bounds(
    memory: int, shared_buffers: str, effective_cache_size: str
) -> None:
    settings = server_settings(StackSettings(), memory)
    assert settings["shared_buffers"] == shared_buffers
    assert settings["effective_cache_size"] == effective_cache_size
    assert settings["max_wal_size"] == "4GB"


def test_a_configured_shared_buffers_wins() -> None:
    assert server_settings(StackSettings(postgres_shared_buffers="1GB"), 24 * GB)["shared_buffers"] == "1GB"


async def _show(dsn: str, *names: str) -> list[str]:
    connection = await asyncpg.connect(dsn)
    try:
        return [await connection.fetchval(f"SHOW {name}") for name in names]
    finally:
        await connection.close()


async def test_the_settings_take_effect_and_survive_a_restart(tmp_path: Path) -> None:
    wanted = {"shared_buffers": "64MB", "max_wal_size": "2GB"}
    postgres = EmbeddedPostgres(tmp_path / "postgres", wanted)
    try:
        dsn = postgres.start()
        assert await _show(dsn, "shared_buffers", "max_wal_size") == ["64MB", "2GB"]
        recorded = (tmp_path / "postgres" / "postgresql.auto.conf").stat().st_mtime_ns
        postgres.stop()

        dsn = postgres.start()  # nothing to change: nothing rewritten, the settings are still there
        assert await _show(dsn, "shared_buffers", "max_wal_size") == ["64MB", "2GB"]
        assert (tmp_path / "postgres" / "postgresql.auto.conf").stat().st_mtime_ns == recorded

        changed = EmbeddedPostgres(tmp_path / "postgres", {**wanted, "shared_buffers": "96MB"})
        postgres.stop()
        dsn = changed.start()
        assert await _show(dsn, "shared_buffers") == ["96MB"]
        changed.stop()
    finally:
        postgres.stop()
