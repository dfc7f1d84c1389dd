"""Migrations (store/migrate.py): the checksum of each applied migration, refusing an edited or unknown one,
and migrations run outside a transaction (CREATE INDEX CONCURRENTLY), on real PostgreSQL."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
import shutil
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import asyncpg
import pytest

import hindsight_server.store.migrate as migrate_module
from hindsight_server.store.migrate import (
    NO_TRANSACTION_MARKER,
    EmbeddingDimensions,
    Migration,
    MigrationRefused,
    SchemaMismatch,
    SchemaShape,
    available_migrations,
    migrate,
    split_statements,
)

SHAPE = SchemaShape(EmbeddingDimensions(multilingual=3, english=2, chinese=2), 4)
SHIPPED = Path(migrate_module.__file__).parent / "migrations"
LOGGER = "hindsight_server.store.migrate"

# A populated table of the tests' own, made by a migration run in a transaction.
NOTES = """-- A test table: three notes, two with the same code.
CREATE TABLE notes (id integer PRIMARY KEY, code text NOT NULL, body text NOT NULL);
INSERT INTO notes SELECT n, CASE WHEN n = 1 THEN 'b' ELSE 'a' END, 'note ' || n FROM generate_series(1, 3) n;
"""


@asynccontextmanager
async def _connected(dsn: str) -> AsyncIterator[asyncpg.Connection]:
    connection = await asyncpg.connect(dsn)
    try:
        yield connection
    finally:
        await connection.close()


def _folder(tmp_path: Path, extra: dict[str, str] | None = None) -> Path:
    """A copy of the shipped migrations plus the tests' own files."""
    folder = tmp_path / "migrations"
    shutil.copytree(SHIPPED, folder)
    for name, sql in (extra or {}).items():
        (folder / name).write_text(sql, encoding="utf-8")
    return folder


async def _recorded(dsn: str) -> dict[str, str | None]:
    async with _connected(dsn) as connection:
        rows = await connection.fetch("SELECT name, checksum FROM schema_migrations ORDER BY version")
    return {row["name"]: row["checksum"] for row in rows}


async def _index_valid(dsn: str, index: str) -> bool | None:
    """None when there is no such index."""
    async with _connected(dsn) as connection:
        valid: bool | None = await connection.fetchval(
            "SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass($1)", index
        )
    return valid


async def test_every_applied_migration_is_recorded_with_the_sha256_of_its_file_as_shipped(
    fresh_database: Callable[[], Awaitable[str]],
) -> None:
    dsn = await fresh_database()
    applied = await migrate(dsn, SHAPE)

    files = sorted(SHIPPED.glob("*.sql"))
    assert applied == [path.name for path in files]
    recorded = await _recorded(dsn)
    assert recorded == {path.name: hashlib.sha256(path.read_bytes()).hexdigest() for path in files}
    first = files[0].read_text(encoding="utf-8")  # before its placeholders are filled
    assert "{{EMBEDDING_DIM}}" in first
    assert recorded[files[0].name] != hashlib.sha256(SHAPE.fill(first).encode()).hexdigest()
    assert await migrate(dsn, SHAPE) == []  # the next start finds them unchanged


async def test_an_edited_migration_file_is_refused_naming_the_file(
    fresh_database: Callable[[], Awaitable[str]], tmp_path: Path
) -> None:
    dsn = await fresh_database()
    folder = _folder(tmp_path)
    await migrate(dsn, SHAPE, migrations=available_migrations(folder))
    edited = folder / "0003_term_df.sql"
    edited.write_text(edited.read_text(encoding="utf-8") + "-- a comment added later\n", encoding="utf-8")
    (folder / "9001_pending.sql").write_text("CREATE TABLE never_made (id integer);\n", encoding="utf-8")

    with pytest.raises(MigrationRefused) as refused:
        await migrate(dsn, SHAPE, migrations=available_migrations(folder))

    message = str(refused.value)
    assert isinstance(refused.value, SchemaMismatch)  # what `hindsight migrate` and `serve` print
    assert "0003_term_df.sql" in message
    assert "must never be edited" in message and "add a new migration" in message
    assert "9001_pending.sql" not in await _recorded(dsn)  # refused before applying anything


async def test_migrations_recorded_without_a_checksum_get_their_files_and_are_not_refused(
    fresh_database: Callable[[], Awaitable[str]], caplog: pytest.LogCaptureFixture
) -> None:
    """A database migrated before checksums were kept: its table has no checksum column."""
    dsn = await fresh_database()
    await migrate(dsn, SHAPE)
    async with _connected(dsn) as connection:
        await connection.execute("ALTER TABLE schema_migrations DROP COLUMN checksum")

    with caplog.at_level(logging.INFO, logger=LOGGER):
        assert await migrate(dsn, SHAPE) == []

    shipped = available_migrations()
    assert f"recorded the checksums of {len(shipped)} migrations applied before" in caplog.text
    assert await _recorded(dsn) == {m.name: m.checksum for m in shipped}
    caplog.clear()
    with caplog.at_level(logging.INFO, logger=LOGGER):
        assert await migrate(dsn, SHAPE) == []
    assert "recorded the checksums" not in caplog.text  # once


async def test_a_migration_the_files_no_longer_hold_is_refused_as_a_downgrade(
    fresh_database: Callable[[], Awaitable[str]], tmp_path: Path
) -> None:
    dsn = await fresh_database()
    newer = _folder(tmp_path, {"0099_newer_server.sql": "CREATE TABLE from_the_future (id integer);\n"})
    await migrate(dsn, SHAPE, migrations=available_migrations(newer))

    with pytest.raises(MigrationRefused) as refused:
        await migrate(dsn, SHAPE)  # the shipped migrations: an older server

    assert "0099_newer_server.sql" in str(refused.value)
    assert "newer hindsight server" in str(refused.value)


async def test_a_no_transaction_migration_builds_indexes_concurrently_and_is_recorded_after_them(
    fresh_database: Callable[[], Awaitable[str]], tmp_path: Path
) -> None:
    concurrent = f"""{NO_TRANSACTION_MARKER}
-- Indexes on a populated table, built without blocking its writes; a comment line ending in ';' stays;
CREATE INDEX CONCURRENTLY IF NOT EXISTS notes_body
    ON notes (body);
CREATE INDEX CONCURRENTLY IF NOT EXISTS notes_code ON notes (code);
"""
    folder = _folder(tmp_path, {"9001_notes.sql": NOTES, "9002_concurrent.sql": concurrent})
    migrations = available_migrations(folder)
    dsn = await fresh_database()

    # Two servers starting together: the one waiting for the lock must not hold a snapshot that
    # CREATE INDEX CONCURRENTLY would wait for (a deadlock, one of them aborted).
    first, second = await asyncio.gather(
        migrate(dsn, SHAPE, migrations=migrations), migrate(dsn, SHAPE, migrations=migrations)
    )

    assert sorted([first, second], key=len) == [[], [m.name for m in migrations]]
    assert await _index_valid(dsn, "notes_body") is True
    assert await _index_valid(dsn, "notes_code") is True
    assert (await _recorded(dsn))["9002_concurrent.sql"] == hashlib.sha256(concurrent.encode()).hexdigest()
    assert await migrate(dsn, SHAPE, migrations=migrations) == []


async def test_a_no_transaction_migration_failing_midway_is_not_recorded_and_applies_once_fixed(
    fresh_database: Callable[[], Awaitable[str]], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    concurrent = f"""{NO_TRANSACTION_MARKER}
CREATE INDEX CONCURRENTLY IF NOT EXISTS notes_body ON notes (body);
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS notes_code ON notes (code);
CREATE TABLE IF NOT EXISTS after_the_indexes (id integer);
"""
    folder = _folder(tmp_path, {"9001_notes.sql": NOTES, "9002_concurrent.sql": concurrent})
    dsn = await fresh_database()

    with caplog.at_level(logging.INFO, logger=LOGGER), pytest.raises(asyncpg.UniqueViolationError):
        await migrate(dsn, SHAPE, migrations=available_migrations(folder))

    assert "9002_concurrent.sql failed at statement 2 of 3" in caplog.text
    recorded = await _recorded(dsn)
    assert "9001_notes.sql" in recorded and "9002_concurrent.sql" not in recorded
    assert await _index_valid(dsn, "notes_body") is True  # the statement before the failure stays
    assert await _index_valid(dsn, "notes_code") is False  # what a failed CONCURRENTLY leaves
    async with _connected(dsn) as connection:
        assert await connection.fetchval("SELECT to_regclass('after_the_indexes')") is None
        await connection.execute("DELETE FROM notes WHERE id = 3")  # the cause: a duplicate code

    caplog.clear()
    with caplog.at_level(logging.INFO, logger=LOGGER):
        assert await migrate(dsn, SHAPE, migrations=available_migrations(folder)) == ["9002_concurrent.sql"]

    assert "dropping index notes_code, left invalid" in caplog.text
    assert await _index_valid(dsn, "notes_code") is True
    assert "9002_concurrent.sql" in await _recorded(dsn)
    async with _connected(dsn) as connection:
        assert await connection.fetchval("SELECT to_regclass('after_the_indexes')") is not None
        with pytest.raises(asyncpg.UniqueViolationError):
            await connection.execute("INSERT INTO notes VALUES (4, 'a', 'a duplicate code')")


async def test_a_no_transaction_migration_with_dollar_quoting_is_refused_before_connecting() -> None:
    body = f"{NO_TRANSACTION_MARKER}\nDO $$ BEGIN PERFORM 1; END $$;\n"
    with pytest.raises(MigrationRefused, match=re.escape("0013_do_block.sql")):
        await migrate(
            "postgresql://nowhere.invalid/none", SHAPE, migrations=[Migration(13, "0013_do_block.sql", body)]
        )


async def test_two_migration_files_with_one_version_are_refused() -> None:
    twins = [Migration(13, "0013_a.sql", "SELECT 1;"), Migration(13, "0013_b.sql", "SELECT 2;")]
    with pytest.raises(MigrationRefused, match=re.escape("0013_a.sql and 0013_b.sql")):
        await migrate("postgresql://nowhere.invalid/none", SHAPE, migrations=twins)


def test_only_the_marker_on_the_first_line_takes_a_migration_out_of_its_transaction() -> None:
    assert not Migration(1, "a.sql", f"{NO_TRANSACTION_MARKER}\nSELECT 1;\n").in_transaction
    assert Migration(1, "a.sql", f"-- comment\n{NO_TRANSACTION_MARKER}\nSELECT 1;\n").in_transaction
    assert all(m.in_transaction for m in available_migrations())  # the shipped ones, unconverted


def test_statements_end_at_a_semicolon_ending_a_line_never_in_a_comment_line() -> None:
    lines = [
        NO_TRANSACTION_MARKER,
        "-- first; still a comment;",
        "CREATE INDEX CONCURRENTLY a",
        "    ON t (x);",
        "",
        "CREATE INDEX CONCURRENTLY b ON t (y);   ",  # spaces after the semicolon
        "-- a trailing comment;",
        "SELECT 'no semicolon at the end'",
    ]
    assert split_statements("\n".join(lines) + "\n") == [
        "\n".join(lines[0:4]),
        "\n".join(lines[4:6]),
        "\n".join(lines[6:8]),
    ]
