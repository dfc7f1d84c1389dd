"""Versioned schema migrations, applied at start under an advisory lock so racing servers apply each once."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from importlib import resources

import asyncpg

from hindsight_server.store.errors import translate_errors

log = logging.getLogger(__name__)

# Any constant shared by every hindsight server; chosen once, never changed.
_MIGRATION_LOCK_KEY = 0x68696E64  # "hind"
_DIMENSION_PLACEHOLDERS = {
    "embedding": "{{EMBEDDING_DIM}}",
    "embedding_en": "{{ENGLISH_EMBEDDING_DIM}}",
}
_PARTITIONS_PLACEHOLDER = "{{MEMORY_PARTITIONS}}"


class SchemaMismatch(RuntimeError):
    """The database was made for a different configuration; starting would corrupt or fail later."""


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql: str


def available_migrations() -> list[Migration]:
    folder = resources.files("hindsight_server.store") / "migrations"
    migrations = []
    for entry in folder.iterdir():
        if entry.name.endswith(".sql"):
            version = int(entry.name.split("_", 1)[0])
            migrations.append(Migration(version, entry.name, entry.read_text(encoding="utf-8")))
    return sorted(migrations, key=lambda m: m.version)


@dataclass(frozen=True, slots=True)
class EmbeddingDimensions:
    """The dimension of each vector column, fixed when the column is created."""

    multilingual: int
    english: int

    def by_column(self) -> dict[str, int]:
        return {"embedding": self.multilingual, "embedding_en": self.english}


@dataclass(frozen=True, slots=True)
class SchemaShape:
    """What the tables are built with: fixed once they exist (changing either means a new database)."""

    dimensions: EmbeddingDimensions
    memory_partitions: int  # hash partitions of the memories table by tenant (0012)

    def fill(self, sql: str) -> str:
        """A migration's text with this shape in its placeholders."""
        for column, dimension in self.dimensions.by_column().items():
            sql = sql.replace(_DIMENSION_PLACEHOLDERS[column], str(dimension))
        return sql.replace(_PARTITIONS_PLACEHOLDER, str(self.memory_partitions))


async def migrate(dsn: str, shape: SchemaShape, connect_timeout_s: float = 10.0) -> list[str]:
    """Applies pending migrations in order; returns the names applied (empty when up to date).

    Runs on its own connection before the pool exists: the pool's connections register pgvector's
    codec, which needs the extension the first migration creates.
    """
    async with translate_errors():
        connection = await asyncpg.connect(dsn, timeout=connect_timeout_s)
    try:
        async with translate_errors():
            applied = await _apply_pending(connection, shape)
            await check_embedding_dimensions(connection, shape.dimensions)
            await _note_partitions(connection, shape.memory_partitions)
    finally:
        await connection.close()
    return applied


async def _apply_pending(connection: asyncpg.Connection, shape: SchemaShape) -> list[str]:
    applied: list[str] = []
    await connection.execute("SELECT pg_advisory_lock($1)", _MIGRATION_LOCK_KEY)
    try:
        await connection.execute(
            """CREATE TABLE IF NOT EXISTS schema_migrations (
                   version integer PRIMARY KEY,
                   name text NOT NULL,
                   applied_at timestamptz NOT NULL DEFAULT now())"""
        )
        done = {row["version"] for row in await connection.fetch("SELECT version FROM schema_migrations")}
        for migration in available_migrations():
            if migration.version in done:
                continue
            async with connection.transaction():
                await connection.execute(shape.fill(migration.sql))
                await connection.execute(
                    "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)",
                    migration.version,
                    migration.name,
                )
            log.info("applied migration %s", migration.name)
            applied.append(migration.name)
    finally:
        await connection.execute("SELECT pg_advisory_unlock($1)", _MIGRATION_LOCK_KEY)
    return applied


async def check_embedding_dimensions(connection: asyncpg.Connection, dimensions: EmbeddingDimensions) -> None:
    rows = await connection.fetch(
        """SELECT attname, atttypmod FROM pg_attribute
           WHERE attrelid = 'memories'::regclass AND attname = ANY($1::text[])""",
        list(_DIMENSION_PLACEHOLDERS),
    )
    stored = {row["attname"]: row["atttypmod"] for row in rows}
    for column, wanted in dimensions.by_column().items():
        if stored.get(column) != wanted:
            setting = "DIMENSION" if column == "embedding" else "ENGLISH_DIMENSION"
            raise SchemaMismatch(
                f"the database stores {stored.get(column)}-dimensional vectors in {column} but this server "
                f"is configured for {wanted} (HINDSIGHT_EMBEDDING__{setting} or the embedding model). Use "
                f"the model the database was built with, or re-embed into a new database."
            )


async def _note_partitions(connection: asyncpg.Connection, configured: int) -> None:
    """A database built with another partition count keeps it (repartitioning is a rewrite no start-up
    should do unasked): said once at start, not an error."""
    existing = await connection.fetchval(
        "SELECT count(*) FROM pg_inherits WHERE inhparent = 'memories'::regclass"
    )
    if existing != configured:
        log.warning(
            "the memories table has %d partitions; database.memory_partitions=%d applies to a new "
            "database only",
            existing,
            configured,
        )
