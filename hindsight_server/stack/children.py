"""The processes `hindsight up` runs as its children: how each starts, when it is ready, what it said,
and how it stops.

A child is ready only when its own process is alive, its own probe answers (gRPC health, an HTTP path,
Triton's model readiness, a standby's WAL receiver) and it holds the ports it was given itself: an answer
from whoever else listens there is not its answer. Its output is passed on to ours line by line (or
appended to its log file: Triton, the replicas) and its last lines are kept, so a child that fails is
reported with what it said last. Every child is started through stack/launch.py's launcher, which ties
it to this process's life (PR_SET_PDEATHSIG) and keeps its pid.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO
from urllib.parse import urlsplit

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from embedder.triton import TritonServer
from hindsight.tls import ClientTls, open_channel
from hindsight_server.config import StackSettings
from hindsight_server.stack.launch import launched
from hindsight_server.stack.preflight import describe, held_by, owner
from hindsight_server.stack.replicas import Replica, wait_until_streaming

TAIL_LINES = 20  # of a failing child's output in the message: its traceback or its last log lines
_POLL_S = 0.1
_LINE_LIMIT = 1 << 20  # a longer line is dropped (and said so), not a reason to stop passing output on
_RELAY_DRAIN_S = 2.0  # after the child exits: what it wrote last is still in the pipe


class ChildFailed(RuntimeError):
    """A child exited before it was ready, was not ready in time, or kept failing: names it, says what
    happened and ends with the tail of its output."""

    def __init__(self, child: str, what: str, tail: list[str]) -> None:
        self.what = f"{child} {what}"
        output = "; its last output:\n" + "\n".join(f"    {line}" for line in tail) if tail else ""
        super().__init__(self.what + output)


@dataclass(frozen=True)
class RestartPolicy:
    """stack.restart_* (config.py): the pause before restarting a child, and when to stop trying."""

    backoff_s: float = 0.5
    backoff_max_s: float = 5.0
    max_failures: int = 5
    window_s: float = 60.0

    @classmethod
    def of(cls, stack: StackSettings) -> RestartPolicy:
        return cls(
            backoff_s=stack.restart_backoff_s,
            backoff_max_s=stack.restart_backoff_max_s,
            max_failures=stack.restart_max_failures,
            window_s=stack.restart_window_s,
        )

    def pause(self, recent: int) -> float:
        """Before the restart that follows the recent-th exit within the window: doubling, capped."""
        return float(min(self.backoff_max_s, self.backoff_s * 2 ** (recent - 1)))


@dataclass
class Child:
    name: str
    address: str
    argv: list[str]
    env: dict[str, str]
    process: asyncio.subprocess.Process | None = None
    restarts: int = 0
    url: str = ""  # shown in the banner; empty: grpc://address
    http_health: str = ""  # a path: ready when it answers 200 over HTTP, not through the gRPC health service
    stop_signal: int = signal.SIGTERM  # nginx: SIGQUIT, its graceful stop (SIGTERM drops calls in flight)
    # nginx: its workers are the master's children, not ours, and a worker whose master died keeps
    # serving the port; Triton: its python-backend stubs. In a process group of their own they are
    # signalled, and killed, with the child.
    own_group: bool = False
    ports: tuple[int, ...] = ()  # ready only once its own process listens on these
    # Its output is appended to this file; None: passed on to ours through pipes, for a child that starts
    # no processes of its own (in Python 3.11 process.wait() returns once every pipe to it is closed, and
    # a grandchild holds them as long as it lives).
    log_path: Path | None = None
    tls: ClientTls | None = None  # how its gRPC health probe speaks to it; None: plaintext
    exits: deque[float] = field(default_factory=deque)  # when it exited (monotonic), within the window
    tail: deque[str] = field(default_factory=lambda: deque(maxlen=TAIL_LINES))
    _relays: list[asyncio.Task[None]] = field(default_factory=list)

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

    async def spawn(self) -> None:
        self._reap()  # what a previous run left (the workers of a master that was killed)
        await self._drain()  # the previous run's last lines, before its tail is cleared
        self.tail.clear()
        argv = launched(self.argv, die_with_parent=True)
        if self.log_path is not None:
            with self.log_path.open("ab") as log:
                self.process = await asyncio.create_subprocess_exec(
                    *argv, env=self.env, stdin=asyncio.subprocess.DEVNULL, stdout=log, stderr=log,
                    start_new_session=self.own_group,
                )  # fmt: skip
            return
        self.process = await asyncio.create_subprocess_exec(
            *argv, env=self.env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            start_new_session=self.own_group, limit=_LINE_LIMIT,
        )  # fmt: skip
        self._relays = [
            asyncio.create_task(self._relay(self.process.stdout, sys.stdout)),
            asyncio.create_task(self._relay(self.process.stderr, sys.stderr)),
        ]

    async def _relay(self, stream: asyncio.StreamReader | None, to: IO[str]) -> None:
        """Passes the child's lines on to ours as they come, keeping the last ones."""
        assert stream is not None
        while True:
            try:
                line = await stream.readline()
            except ValueError:  # longer than the limit: asyncio dropped it
                line = b"[a line too long to pass on]\n"
            if not line:
                return
            self.tail.append(line.decode(errors="replace").rstrip())
            with contextlib.suppress(OSError, ValueError):  # our output closed (`up | head`): keep reading,
                _write(to, line)  # or the child would block on a full pipe

    async def _drain(self) -> None:
        relays, self._relays = self._relays, []
        if relays:
            _, pending = await asyncio.wait(relays, timeout=_RELAY_DRAIN_S)
            for relay in pending:  # a grandchild that still holds the pipe: its lines are not ours
                relay.cancel()

    def last_output(self) -> list[str]:
        if self.log_path is None:
            return list(self.tail)
        with contextlib.suppress(OSError), self.log_path.open(encoding="utf-8", errors="replace") as log:
            return [line.rstrip() for line in deque(log, maxlen=TAIL_LINES)]
        return []

    async def failure(self, what: str) -> ChildFailed:
        """What happened, with whoever holds its ports instead of it (a reason to fail on its own) and
        the tail of what it wrote (all of it: after its pipes are read)."""
        await self._drain()
        for port in self.ports:
            holder = await asyncio.to_thread(owner, port)
            if holder is not None and holder != self.pid:
                what += f"; port {port} is held by {describe(holder)}"
        return ChildFailed(self.name, what, self.last_output())

    def note_exit(self, now: float, window_s: float) -> int:
        """Records an exit; returns how many there were within the window, this one included."""
        self.exits.append(now)
        while now - self.exits[0] > window_s:
            self.exits.popleft()
        return len(self.exits)

    async def wait_ready(self, timeout_s: float) -> None:
        if self.http_health:
            host, port = _host_port(self.address)
            await self._wait_until(lambda: _http_ok(host, port, self.http_health), timeout_s)
            return
        async with open_channel(self.address, self.tls) as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            await self._wait_until(lambda: _serving(stub), timeout_s)

    async def _wait_until(self, answers: Callable[[], Awaitable[bool]], timeout_s: float) -> None:
        """Polls until the probe answers and the answer is the child's own: its process alive, holding its
        ports (a zombie holds none). Fails as soon as it exits."""
        process = self.process
        assert process is not None
        deadline = time.monotonic() + timeout_s
        answered = False
        while time.monotonic() < deadline:
            if process.returncode is not None:
                raise await self.failure(f"exited with status {process.returncode} before it was ready")
            answered = await answers()
            if answered and await asyncio.to_thread(held_by, process.pid, self.ports):
                return
            await asyncio.sleep(_POLL_S)
        raise await self.failure(
            f"is not ready after {timeout_s:.0f} s" + (" (its probe answers)" if answered else "")
        )

    async def stop(self, grace_s: float) -> None:
        process = self.process
        if process is None:
            return
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(self.stop_signal)
            try:
                async with asyncio.timeout(grace_s):
                    await process.wait()
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                await process.wait()
        self._reap()
        await self._drain()

    def _reap(self) -> None:
        """Kills what is left of the child's own process group (nothing, after a clean exit)."""
        if self.own_group and self.process is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGKILL)


@dataclass
class TritonChild(Child):
    """tritonserver (the embedded inference tier), supervised like the other children: restarted when it
    dies, its python-backend stubs killed with it. Ready when every model it serves answers ready over
    HTTP and it holds its HTTP and gRPC ports itself."""

    triton: TritonServer = field(kw_only=True)

    @classmethod
    def of(cls, triton: TritonServer) -> TritonChild:
        """Prepares its backend directory (file copies: call it off the event loop)."""
        argv, env = triton.command()
        ports = triton.options.ports
        return cls(
            "triton", triton.grpc_url, argv, env,
            url=f"grpc://{triton.grpc_url} ({', '.join(triton.options.models)})",
            own_group=True, ports=(ports.http, ports.grpc), log_path=triton.log_path, triton=triton,
        )  # fmt: skip

    @property
    def stop_grace_s(self) -> float:
        return self.triton.options.stop_timeout_s

    async def wait_ready(self, timeout_s: float) -> None:
        host, port = _host_port(urlsplit(self.triton.http_url).netloc)
        paths = [f"/v2/models/{model}/ready" for model in self.triton.options.models]

        async def models_ready() -> bool:
            return all([await _http_ok(host, port, path) for path in paths])

        await self._wait_until(models_ready, timeout_s)


@dataclass
class ReplicaChild(Child):
    """A streaming standby of the embedded PostgreSQL, postgres in the foreground. Each start (the first,
    and the supervisor's restarts) first reuses its directory or makes it anew (Replica.prepare); it is
    ready when its WAL receiver streams from the primary (on its own unix socket, in its own directory:
    nobody else answers there); SIGINT is PostgreSQL's fast shutdown."""

    replica: Replica = field(kw_only=True)

    @classmethod
    def of(cls, replica: Replica) -> ReplicaChild:
        env = dict(os.environ)
        return cls(
            replica.name, replica.dsn, [], env, stop_signal=signal.SIGINT, log_path=replica.log_path,
            replica=replica,
        )  # fmt: skip

    async def spawn(self) -> None:
        await self.replica.prepare()
        self.address = self.replica.dsn
        self.argv = self.replica.argv()
        output = self.replica.open_log()  # its server log, as the primary's: <its data dir>/log
        try:
            self.process = await asyncio.create_subprocess_exec(
                *launched(self.argv, user=self.replica.primary.system_user, die_with_parent=True),
                env=self.env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=output,
                stderr=output,
            )
        finally:
            output.close()

    async def wait_ready(self, timeout_s: float) -> None:
        assert self.process is not None
        try:
            await wait_until_streaming(self.replica.dsn, timeout_s, self.process)
        except RuntimeError as exc:
            raise await self.failure(f"is not streaming: {exc}") from exc


def _write(to: IO[str], line: bytes) -> None:
    """The child's bytes as they are (a Chinese log line survives any locale), after what ours wrote."""
    to.flush()
    buffer = getattr(to, "buffer", None)
    if buffer is None:  # a captured stream (tests): text only
        to.write(line.decode(errors="replace"))
        to.flush()
        return
    buffer.write(line)
    buffer.flush()


def _host_port(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


async def _serving(stub: health_pb2_grpc.HealthStub) -> bool:
    with contextlib.suppress(grpc.aio.AioRpcError):
        reply = await stub.Check(health_pb2.HealthCheckRequest(), timeout=1.0)
        return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)
    return False


async def _http_ok(host: str, port: int, path: str) -> bool:
    """Whether GET path answers 200 (within a second)."""
    with contextlib.suppress(OSError, IndexError, TimeoutError):
        async with asyncio.timeout(1.0):
            return await _http_status(host, port, path) == b"200"
    return False


async def _http_status(host: str, port: int, path: str) -> bytes:
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n\r\n".encode())
        await writer.drain()
        return (await reader.readline()).split(b" ")[1]
    finally:
        writer.close()
