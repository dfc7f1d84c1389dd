"""Runs `hindsight` as real child processes from async tests, and checks that none are left behind."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import socket
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tests.support.eventually import eventually

HINDSIGHT = [sys.executable, "-m", "hindsight_server"]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def free_ports(count: int) -> list[int]:
    """`count` different free ports (each held until all are chosen: the OS never hands one out twice)."""
    with contextlib.ExitStack() as held:
        probes = [held.enter_context(socket.socket()) for _ in range(count)]
        for probe in probes:
            probe.bind(("127.0.0.1", 0))
        return [int(probe.getsockname()[1]) for probe in probes]


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with contextlib.suppress(OSError), open(f"/proc/{pid}/stat") as stat:
        return stat.read().split()[2] != "Z"  # a zombie has exited
    return True


@dataclass
class CliResult:
    code: int
    stdout: str
    stderr: str


async def run_cli(
    args: Sequence[str], env: Mapping[str, str] | None = None, timeout_s: float = 30
) -> CliResult:
    process = await asyncio.create_subprocess_exec(
        *HINDSIGHT,
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, **(env or {})},
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), timeout_s)
    assert process.returncode is not None
    return CliResult(process.returncode, stdout.decode(), stderr.decode())


async def create_key(dsn: str, tenant: str, *options: str) -> dict[str, Any]:
    """`hindsight tenants create` for the tenant (with `--scopes`, `--agent`...): its JSON answer."""
    made = await run_cli(["tenants", "create", tenant, "--dsn", dsn, "--label", "test", "--json", *options])
    assert made.code == 0, made.stderr
    created: dict[str, Any] = json.loads(made.stdout)
    return created


class Background:
    """A long-running `hindsight` command whose output is collected while it runs."""

    def __init__(self, args: Sequence[str], env: Mapping[str, str] | None = None) -> None:
        self.args = list(args)
        self.env = {**os.environ, **(env or {})}
        self.output = ""
        self.process: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self.process = await asyncio.create_subprocess_exec(
            *HINDSIGHT,
            *self.args,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env=self.env,
            start_new_session=True,
        )
        self._reader = asyncio.create_task(self._collect())

    async def _collect(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        while line := await self.process.stdout.readline():
            self.output += line.decode(errors="replace")

    async def wait_for(self, pattern: str, timeout_s: float = 60) -> re.Match[str]:
        def not_seen() -> str:
            return f"{pattern!r} not seen; output so far:\n{self.output}"

        def seen() -> bool:
            if re.search(pattern, self.output):
                return True
            assert self.process is None or self.process.returncode is None, not_seen()  # it exited
            return False

        await eventually(seen, timeout_s, message=not_seen)
        match = re.search(pattern, self.output)
        assert match is not None
        return match

    async def stop(self, signum: int = signal.SIGINT, timeout_s: float = 30) -> int:
        assert self.process is not None
        if self.process.returncode is None:
            self.process.send_signal(signum)
        try:
            code = await asyncio.wait_for(self.process.wait(), timeout_s)
        finally:
            if self.process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
        if self._reader is not None:
            await self._reader
        return code
