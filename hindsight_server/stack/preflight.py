"""What `hindsight up` checks before it starts anything, and how it tells whose a port is.

A child that cannot bind its port exits, but whoever holds the port answers the health check in its
place: a second `up` beside a running one once reported the other stack's processes as its own and then
restarted its servers forever. So `up` first checks that every TCP port it will bind is free and that no
other `up` runs on its data directory, and names the owner of what is taken; a child is ready only once
it holds its ports itself (`held_by`).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import socket
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import psutil

_COMMAND_CHARS = 160  # of an owner's command line in a message: enough to tell which program it is


@dataclass(frozen=True)
class Binding:
    """A TCP port one of the children will listen on."""

    purpose: str  # what it is for, in the message: "Triton gRPC", "memory server", "MCP gateway"
    host: str
    port: int


def busy(bindings: list[Binding]) -> list[str]:
    """One line per port that cannot be used: named twice in the configuration, or held by a process
    (named, with its command line, where it can be found)."""
    problems = _named_twice(bindings)
    for binding in bindings:
        if binding.port and not _can_bind(binding.host, binding.port):
            holder = describe(owner(binding.port))
            problems.append(f"port {binding.port} ({binding.purpose}) is in use: {holder}")
    return problems


def _named_twice(bindings: list[Binding]) -> list[str]:
    first: dict[int, Binding] = {}
    problems = []
    for binding in bindings:
        if not binding.port:
            continue
        earlier = first.setdefault(binding.port, binding)
        if earlier is not binding:
            problems.append(
                f"port {binding.port} is configured for both {earlier.purpose} and {binding.purpose}"
            )
    return problems


def _can_bind(host: str, port: int) -> bool:
    """Whether a listener could bind host:port now. SO_REUSEADDR, as the servers set it: a port whose
    last connections linger in TIME_WAIT (a stack just stopped) is free, one with a listener is not."""
    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror:
        return True  # not ours to judge: the child reports a host it cannot resolve
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            return exc.errno != errno.EADDRINUSE
    return True


# The kernel's tables of TCP sockets, every user's: gRPC binds 127.0.0.1 as a v4-mapped IPv6 socket, listed
# in tcp6. Read directly, not through psutil: it names one process per socket, and a listening socket is
# shared (nginx's master and its workers), so it may name a worker where the master is the child.
_TCP_TABLES = (Path("/proc/net/tcp"), Path("/proc/net/tcp6"))
_LISTEN = "0A"


def _listening_inodes() -> dict[int, set[str]]:
    """Listening TCP port -> the inodes of its sockets."""
    found: dict[int, set[str]] = {}
    for table in _TCP_TABLES:
        with contextlib.suppress(OSError):
            for line in table.read_text().splitlines()[1:]:
                fields = line.split()  # sl, local address, remote address, state, ..., inode (10th)
                if fields[3] == _LISTEN:
                    found.setdefault(int(fields[1].rpartition(":")[2], 16), set()).add(fields[9])
    return found


def _socket_inodes(pid: int) -> set[str]:
    """The inodes of the sockets a process has open (none readable: another user's, unprivileged)."""
    inodes = set()
    with contextlib.suppress(OSError):
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            with contextlib.suppress(OSError):
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    inodes.add(target[len("socket:[") : -1])
    return inodes


def _holders(inodes: set[str]) -> set[int]:
    """The processes that have one of these sockets open."""
    return {
        int(entry.name)
        for entry in Path("/proc").iterdir()
        if entry.name.isdigit() and _socket_inodes(int(entry.name)) & inodes
    }


def _eldest(holders: set[int]) -> int | None:
    """Of the processes sharing a listening socket, the one that opened it: not a child of another."""
    for pid in sorted(holders):
        with contextlib.suppress(psutil.Error):
            if psutil.Process(pid).ppid() not in holders:
                return pid
    return min(holders, default=None)


def owner(port: int) -> int | None:
    """The process listening on the port, where it can be read."""
    inodes = _listening_inodes().get(port)
    return _eldest(_holders(inodes)) if inodes else None


def held_by(pid: int, ports: tuple[int, ...]) -> bool:
    """Whether process `pid` itself listens on every one of the ports (not merely someone)."""
    if not ports:
        return True
    listening, mine = _listening_inodes(), _socket_inodes(pid)
    return all(listening.get(port, set()) & mine for port in ports)


def describe(pid: int | None) -> str:
    """The owner in a message: its pid and command line, and the parent that started it unless that is
    init; "held by another process" when it cannot be read (another user's, without privileges)."""
    if pid is None:
        return "held by another process"
    line = f"pid {pid} ({_command(pid)})"
    with contextlib.suppress(psutil.Error):
        parent = psutil.Process(pid).ppid()
        if parent > 1:
            line += f", started by pid {parent} ({_command(parent)})"
    return line


def _command(pid: int) -> str:
    try:
        text = " ".join(psutil.Process(pid).cmdline())
    except psutil.Error:
        return "command line not readable"
    return text if len(text) <= _COMMAND_CHARS else text[: _COMMAND_CHARS - 3] + "..."


class DataDirLock:
    """An exclusive lock on <data_dir>/up.lock for as long as this `up` runs: a second `up` on the
    directory would share its PostgreSQL and stop its replicas (stack/replicas.py stops a standby left
    running on a directory). flock(2): released by the kernel when this process ends, however it ends,
    so a crashed `up` leaves no stale lock; the pid written in the file only names the holder."""

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / "up.lock"
        self._file: IO[str] | None = None

    def acquire(self) -> str | None:
        """Takes the lock; else the line saying who holds it."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lock = self.path.open("a+")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            holder = lock.read().strip()
            lock.close()
            owner = describe(int(holder)) if holder.isdigit() else "held by another process"
            return f"data directory {self.path.parent} is in use by another `hindsight up`: {owner}"
        except OSError as exc:  # a file system without flock (some NFS): the ports are still checked
            print(f"hindsight up: could not lock {self.path} ({exc}); going on", file=sys.stderr)
        lock.truncate(0)
        lock.write(f"{os.getpid()}\n")
        lock.flush()
        self._file = lock
        return None

    def release(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
