"""Versioned schema migrations, applied at start under an advisory lock so racing servers apply each once.

Each migration is a file `NNNN_name.sql` in `migrations/`, applied in version order and recorded in
`schema_migrations` with the SHA-256 of its text as shipped (before the placeholders are filled). A
shipped migration is never edited: a start finding an applied migration whose file changed, or one the
files no longer hold (a newer server migrated the database), refuses (MigrationRefused).

A migration runs in one transaction, unless its first line is `-- hindsight: no-transaction`: then its
statements run one by one outside any transaction (CREATE INDEX CONCURRENTLY on a populated table, which
cannot run inside one, so writes go on during an upgrade) and it is recorded only after the last one
succeeded. Such a file is split at each `;` that ends a line (a `--` comment line never ends a statement),
so it holds no function body or DO block (refused: no dollar quoting) and no `;` at a line's end inside a
string or block comment. A start after a failure runs it again from its first statement, so each statement
is safe to repeat (IF NOT EXISTS), and an index that a failed CREATE INDEX CONCURRENTLY left INVALID under
a name the file creates is dropped first (DROP INDEX CONCURRENTLY) and built again.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

import asyncpg

from hindsight_server.store.errors import translate_errors

log = logging.getLogger(__name__)

# Any constant shared by every hindsight server; chosen once, never changed.
_MIGRATION_LOCK_KEY = 0x68696E64  # "hind"
# How often a server waits for another's migrations retries the lock (see _lock).
_LOCK_RETRY_S = 0.2
_DIMENSION_PLACEHOLDERS = {
    "embedding": "{{EMBEDDING_DIM}}",
    "embedding_en": "{{ENGLISH_EMBEDDING_DIM}}",
    "embedding_zh": "{{CHINESE_EMBEDDING_DIM}}",
}
# The setting that fixes each column's dimension (HINDSIGHT_EMBEDDING__<setting>).
_DIMENSION_SETTINGS = {
    "embedding": "DIMENSION",
    "embedding_en": "ENGLISH_DIMENSION",
    "embedding_zh": "CHINESE_DIMENSION",
}
_PARTITIONS_PLACEHOLDER = "{{MEMORY_PARTITIONS}}"
NO_TRANSACTION_MARKER = "-- hindsight: no-transaction"
_DOLLAR_QUOTE = re.compile(r"\$\w*\$")
_IDENTIFIER = r'(?:"[^"]+"|[\w$]+)'
_CONCURRENT_INDEX = re.compile(
    rf"\bCREATE\s+(?:UNIQUE\s+)?INDEX\s+CONCURRENTLY\s+(?:IF\s+NOT\s+EXISTS\s+)?"
    rf"(?!ON\s)({_IDENTIFIER}(?:\s*\.\s*{_IDENTIFIER})?)",  # an unnamed index has nothing to drop
    re.IGNORECASE,
)


class SchemaMismatch(RuntimeError):
    """The database was made for a different configuration; starting would corrupt or fail later."""


class MigrationRefused(SchemaMismatch):
    """The migrations applied to the database are not the ones this server ships (a shipped file was
    edited, or a newer server migrated the database), or a migration file cannot be applied as written."""


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql: str  # the file's text as shipped, placeholders unfilled

    @property
    def checksum(self) -> str:
        """SHA-256 of the text as shipped: recorded when applied, compared at every start."""
        return hashlib.sha256(self.sql.encode("utf-8")).hexdigest()

    @property
    def in_transaction(self) -> bool:
        """False for a file whose first line is the no-transaction marker."""
        return self.sql.split("\n", 1)[0].strip() != NO_TRANSACTION_MARKER


def available_migrations(folder: Traversable | Path | None = None) -> list[Migration]:
    """The migrations in `folder` (default: the package's own), in version order."""
    if folder is None:
        folder = resources.files("hindsight_server.store") / "migrations"
    migrations = []
    for entry in folder.iterdir():
        if entry.name.endswith(".sql"):
            version = int(entry.name.split("_", 1)[0])
            migrations.append(Migration(version, entry.name, entry.read_text(encoding="utf-8")))
    return sorted(migrations, key=lambda m: m.version)


def split_statements(sql: str) -> list[str]:
    """A no-transaction migration's statements: each ends with a `;` at the end of a line (a comment
    line never ends one); pieces holding only comments and blank lines are dropped."""
    statements: list[str] = []
    current: list[str] = []
    for line in sql.splitlines():
        current.append(line)
        code = line.strip()
        if code.endswith(";") and not code.startswith("--"):
            statements.append("\n".join(current))
            current = []
    statements.append("\n".join(current))
    return [s for s in statements if any(_is_code(line) for line in s.splitlines())]


def _is_code(line: str) -> bool:
    code = line.strip()
    return bool(code) and not code.startswith("--")


@dataclass(frozen=True, slots=True)
class EmbeddingDimensions:
    """The dimension of each vector column, fixed when the column is created."""

    multilingual: int
    english: int
    chinese: int

    def by_column(self) -> dict[str, int]:
        return {"embedding": self.multilingual, "embedding_en": self.english, "embedding_zh": self.chinese}


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


async def migrate(
    dsn: str,
    shape: SchemaShape,
    connect_timeout_s: float = 10.0,
    *,
    migrations: Sequence[Migration] | None = None,
) -> list[str]:
    """Applies pending migrations in order; returns the names applied (empty when up to date).

    Runs on its own connection before the pool exists: the pool's connections register pgvector's
    codec, which needs the extension the first migration creates. `migrations` defaults to the
    package's own (available_migrations()); tests pass others.
    """
    shipped = available_migrations() if migrations is None else sorted(migrations, key=lambda m: m.version)
    _check_files(shipped)
    async with translate_errors():
        connection = await asyncpg.connect(dsn, timeout=connect_timeout_s)
    try:
        async with translate_errors():
            applied = await _apply_pending(connection, shape, shipped)
            await check_embedding_dimensions(connection, shape.dimensions)
            await _note_partitions(connection, shape.memory_partitions)
    finally:
        await connection.close()
    return applied


def _check_files(migrations: Sequence[Migration]) -> None:
    names: dict[int, str] = {}
    for migration in migrations:
        if migration.version in names:
            raise MigrationRefused(
                f"two migration files have version {migration.version:04d}: {names[migration.version]} "
                f"and {migration.name}"
            )
        names[migration.version] = migration.name
        if not migration.in_transaction and _DOLLAR_QUOTE.search(migration.sql):
            raise MigrationRefused(
                f"migration {migration.name} runs outside a transaction ({NO_TRANSACTION_MARKER}) and "
                f"holds dollar quoting ($$): its statements are split at each ';' that ends a line, which "
                f"would cut a function body or DO block apart. Put that in a migration run in a transaction."
            )


async def _apply_pending(
    connection: asyncpg.Connection, shape: SchemaShape, migrations: Sequence[Migration]
) -> list[str]:
    applied: list[str] = []
    await _lock(connection)
    try:
        await connection.execute(
            """CREATE TABLE IF NOT EXISTS schema_migrations (
                   version integer PRIMARY KEY,
                   name text NOT NULL,
                   applied_at timestamptz NOT NULL DEFAULT now(),
                   checksum text)"""
        )
        # A table made before checksums were kept.
        await connection.execute("ALTER TABLE schema_migrations ADD COLUMN IF NOT EXISTS checksum text")
        recorded = await connection.fetch(
            "SELECT version, name, applied_at, checksum FROM schema_migrations ORDER BY version"
        )
        pending = _pending(recorded, migrations)
        await _record_missing_checksums(connection, recorded, migrations)
        for migration in pending:
            if migration.in_transaction:
                async with connection.transaction():
                    await connection.execute(shape.fill(migration.sql))
                    await _record(connection, migration)
            else:
                await _apply_outside_transaction(connection, shape, migration)
            log.info("applied migration %s", migration.name)
            applied.append(migration.name)
    finally:
        await connection.execute("SELECT pg_advisory_unlock($1)", _MIGRATION_LOCK_KEY)
    return applied


async def _lock(connection: asyncpg.Connection) -> None:
    """Takes the migration lock, polling rather than waiting in pg_advisory_lock: a session waiting in a
    statement holds a snapshot, and CREATE INDEX CONCURRENTLY waits for every older snapshot in the
    database, so the holder's no-transaction migration and a server waiting for it would deadlock (one of
    them aborted after deadlock_timeout). Between tries this connection holds none."""
    waiting = False
    while not await connection.fetchval("SELECT pg_try_advisory_lock($1)", _MIGRATION_LOCK_KEY):
        if not waiting:
            log.info("waiting for another server's migrations")
            waiting = True
        await asyncio.sleep(_LOCK_RETRY_S)


def _pending(recorded: Sequence[asyncpg.Record], migrations: Sequence[Migration]) -> list[Migration]:
    """The migrations not applied yet, once every applied one is found unchanged among the files."""
    shipped = {migration.version: migration for migration in migrations}
    unknown = [row for row in recorded if row["version"] not in shipped]
    if unknown:
        names = ", ".join(f"{row['name']} (applied {row['applied_at']:%Y-%m-%d})" for row in unknown)
        raise MigrationRefused(
            f"the database has migrations this server does not ship: {names}. A newer hindsight server "
            f"migrated it; run that version or a newer one (no server undoes a migration), or restore the "
            f"backup taken before the upgrade."
        )
    for row in recorded:
        migration = shipped[row["version"]]
        if row["name"] != migration.name:
            raise MigrationRefused(
                f"migration {row['version']:04d} was applied to this database as {row['name']}, but this "
                f"server ships {migration.name} under that version. Shipped migrations must never be "
                f"renamed or replaced: restore {row['name']} as released and give a new migration the "
                f"next free version."
            )
    changed = [
        (row, shipped[row["version"]])
        for row in recorded
        if row["checksum"] is not None and row["checksum"] != shipped[row["version"]].checksum
    ]
    if changed:
        files = ", ".join(
            f"{migration.name} (applied with SHA-256 {row['checksum'][:12]}…, the file's is now "
            f"{migration.checksum[:12]}…)"
            for row, migration in changed
        )
        raise MigrationRefused(
            f"migration files changed since they were applied to this database: {files}. Shipped "
            f"migrations must never be edited: restore the file as released and add a new migration for "
            f"the change."
        )
    done = {row["version"] for row in recorded}
    return [migration for migration in migrations if migration.version not in done]


async def _record_missing_checksums(
    connection: asyncpg.Connection, recorded: Sequence[asyncpg.Record], migrations: Sequence[Migration]
) -> None:
    """Migrations applied before checksums were kept get their file's checksum, once."""
    checksums = {migration.version: migration.checksum for migration in migrations}
    missing = [row for row in recorded if row["checksum"] is None]
    if not missing:
        return
    await connection.executemany(
        "UPDATE schema_migrations SET checksum = $2 WHERE version = $1 AND checksum IS NULL",
        [(row["version"], checksums[row["version"]]) for row in missing],
    )
    log.info(
        "recorded the checksums of %d migrations applied before checksums were kept (%s): from now on a "
        "start refuses a migration whose file changed",
        len(missing),
        ", ".join(row["name"] for row in missing),
    )


async def _apply_outside_transaction(
    connection: asyncpg.Connection, shape: SchemaShape, migration: Migration
) -> None:
    """Runs a no-transaction migration statement by statement, recording it after the last one."""
    statements = split_statements(shape.fill(migration.sql))
    for index in _concurrent_indexes(statements):
        invalid = await connection.fetchval(
            "SELECT NOT indisvalid FROM pg_index WHERE indexrelid = to_regclass($1)", index
        )
        if invalid:
            log.warning(
                "dropping index %s, left invalid by a failed run of migration %s, to build it again",
                index,
                migration.name,
            )
            await connection.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {index}")
    for number, statement in enumerate(statements, 1):
        try:
            await connection.execute(statement)
        except Exception:
            log.error(
                "migration %s failed at statement %d of %d; it ran outside a transaction, so the ones "
                "before it stay applied. It is not recorded: the next start runs it again from its first "
                "statement",
                migration.name,
                number,
                len(statements),
            )
            raise
    await _record(connection, migration)


def _concurrent_indexes(statements: Sequence[str]) -> list[str]:
    """The names (as written) of the indexes the statements create concurrently."""
    code = "\n".join(line for statement in statements for line in statement.splitlines() if _is_code(line))
    return [match.group(1) for match in _CONCURRENT_INDEX.finditer(code)]


async def _record(connection: asyncpg.Connection, migration: Migration) -> None:
    await connection.execute(
        "INSERT INTO schema_migrations (version, name, checksum) VALUES ($1, $2, $3)",
        migration.version,
        migration.name,
        migration.checksum,
    )


async def check_embedding_dimensions(connection: asyncpg.Connection, dimensions: EmbeddingDimensions) -> None:
    rows = await connection.fetch(
        """SELECT attname, atttypmod FROM pg_attribute
           WHERE attrelid = 'memories'::regclass AND attname = ANY($1::text[])""",
        list(_DIMENSION_PLACEHOLDERS),
    )
    stored = {row["attname"]: row["atttypmod"] for row in rows}
    for column, wanted in dimensions.by_column().items():
        if stored.get(column) != wanted:
            setting = _DIMENSION_SETTINGS[column]
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
