"""`hindsight up` tells the truth about what it runs (stack/preflight.py, stack/children.py):

- a second `up` on the ports and data directory of a running one starts nothing: within seconds it exits
  3, naming each port, what it is for and whose it is, and the first stack keeps serving untouched;
- a Triton killed with SIGKILL is restarted, its python-backend stubs killed with it (no orphan, no
  zombie), and the stack embeds and recalls by vector again;
- a child that keeps failing stops the stack with its name, whoever holds its port and the tail of its
  output, exit 4, instead of being restarted forever;
- a child is not ready because someone else answers on its port, nor once it has exited.

One stack with Triton (the multilingual model only: it starts and restarts fastest) for the first two;
the third runs a light one (no Triton) on the session's PostgreSQL."""

from __future__ import annotations

import asyncio
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from hindsight_server.config import load_settings
from hindsight_server.stack.children import Child, ChildFailed, RestartPolicy
from hindsight_server.stack.preflight import Binding, DataDirLock, busy, describe
from hindsight_server.stack.supervisor import Stack
from tests.support.eventually import eventually
from tests.support.processes import Background, free_ports, pid_alive, run_cli

BANNER = r"hindsight is up:[\s\S]*Ctrl-C stops everything"


@dataclass
class Running:
    stack: Background
    data_dir: Path
    env: dict[str, str]
    port: int  # the memory server's
    triton_ports: tuple[int, int, int]  # HTTP, gRPC, metrics
    mcp_port: int

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def supervisor(self) -> int:
        assert self.stack.process is not None
        return self.stack.process.pid

    def pid(self, part: str) -> int:
        """The pid the banner shows for a part (triton, memory server, mcp gateway)."""
        match = re.search(rf"^  {re.escape(part)}\s+\S.*, pid (\d+)$", self.stack.output, re.MULTILINE)
        assert match, self.stack.output
        return int(match.group(1))


@pytest.fixture(scope="module")
async def running(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Running]:
    port, http, grpc, metrics, mcp, console = free_ports(6)
    env = {
        "HINDSIGHT_STACK__TRITON_HTTP_PORT": str(http),
        "HINDSIGHT_STACK__TRITON_GRPC_PORT": str(grpc),
        "HINDSIGHT_STACK__TRITON_METRICS_PORT": str(metrics),
        "HINDSIGHT_STACK__RERANK": "false",
        "HINDSIGHT_STACK__ENGLISH_ENCODER": "false",
        "HINDSIGHT_STACK__POSTGRES_SHARED_BUFFERS": "128MB",
        "HINDSIGHT_MCP__PORT": str(mcp),
        "HINDSIGHT_MCP__TENANT": "acme",
        "HINDSIGHT_CONSOLE__PORT": str(console),
    }
    data_dir = tmp_path_factory.mktemp("launcher").resolve()
    stack = Background(["up", "--data-dir", str(data_dir), "--port", str(port)], env=env)
    await stack.start()
    try:
        await stack.wait_for(BANNER, timeout_s=120)
        yield Running(stack, data_dir, env, port, (http, grpc, metrics), mcp)
    finally:
        code = await stack.stop(signal.SIGINT)
    assert code == 0, stack.output


@pytest.mark.timeout(180)  # with the module's stack start
async def test_a_second_up_beside_a_running_one_names_each_port_and_its_owner(
    running: Running, tmp_path: Path
) -> None:
    pids = {part: running.pid(part) for part in ("triton", "memory server", "mcp gateway")}
    restarts_before = running.stack.output.count(" exited (status ")
    started = time.monotonic()
    second = await run_cli(
        ["up", "--data-dir", str(running.data_dir), "--port", str(running.port)], env=running.env
    )
    assert second.code == 3, second.stderr
    assert time.monotonic() - started < 10  # the interpreter's start-up, then a look at /proc
    assert "hindsight is up" not in second.stdout and "Traceback" not in second.stderr
    lines = second.stderr.splitlines()

    def about(port: int) -> str:
        (line,) = [line for line in lines if line.startswith(f"hindsight up failed: port {port} (")]
        return line

    started_by = f"started by pid {running.supervisor} ("
    server = about(running.port)
    assert f"(memory server gRPC) is in use: pid {pids['memory server']} (" in server, server
    assert "-m hindsight_server serve" in server and started_by in server
    for port, purpose in zip(running.triton_ports, ("HTTP", "gRPC", "metrics"), strict=True):
        line = about(port)
        assert f"(Triton {purpose}) is in use: pid {pids['triton']} (" in line and "tritonserver" in line
        assert started_by in line
    assert f"(MCP gateway) is in use: pid {pids['mcp gateway']} (" in about(running.mcp_port)
    assert (
        f"data directory {running.data_dir} is in use by another `hindsight up`: pid {running.supervisor} ("
        in second.stderr
    )
    assert lines[-1] == "hindsight up: nothing was started"

    # The ports alone stop it, on a data directory of its own, where it leaves nothing.
    elsewhere = tmp_path / "elsewhere"
    third = await run_cli(["up", "--data-dir", str(elsewhere), "--port", str(running.port)], env=running.env)
    assert third.code == 3, third.stderr
    assert f"port {running.port} (memory server gRPC) is in use: pid {pids['memory server']}" in third.stderr
    assert "data directory" not in third.stderr and not elsewhere.exists()

    # The first stack did not notice: the same processes, none restarted, serving.
    assert all(pid_alive(pid) for pid in pids.values())
    assert running.stack.output.count(" exited (status ") == restarts_before
    listed = await run_cli(["list", "--target", running.target, "--tenant", "acme"])
    assert listed.code == 0, listed.stderr


def _reaped(pid: int) -> bool:
    """Gone from /proc: neither running nor a zombie its parent never waited for."""
    return not Path(f"/proc/{pid}").exists()


def _process_group(pgid: int) -> set[int]:
    members = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rpartition(")")[2].split()
            except OSError:
                continue
            if int(fields[2]) == pgid:  # state, ppid, pgrp
                members.add(int(entry.name))
    return members


@pytest.mark.timeout(180)  # with the module's stack stop
async def test_a_killed_triton_is_restarted_without_orphans_and_embeds_again(running: Running) -> None:
    old = running.pid("triton")
    group = _process_group(old)
    assert len(group) > 1, group  # tritonserver and its python-backend stubs
    os.kill(old, signal.SIGKILL)
    ready = await running.stack.wait_for(r"triton restarted: ready again, pid (\d+)", timeout_s=120)
    assert "triton exited (status -9); restarting" in running.stack.output
    new = int(ready.group(1))
    assert new != old and pid_alive(new)
    await eventually(lambda: not any(pid_alive(pid) for pid in group), timeout_s=10)  # no stub orphaned
    assert _reaped(old)  # no zombie

    common = ["--target", running.target, "--tenant", "acme"]
    written = await run_cli(
        ["write", *common, *"--subject user-7 --session s1 --tier semantic --kind preference".split(),
         "--content", "用户偏好靠窗座位", "--json"]
    )  # fmt: skip
    assert written.code == 0, written.stderr
    memory_id = re.search(r'"id": "([0-9a-f-]{36})"', written.stdout).group(1)  # type: ignore[union-attr]

    async def embedded() -> bool:  # inline, or by the worker once the server sees the tier again
        got = await run_cli(["get", *common, memory_id, "--json"])
        return '"embedding_state": "EMBEDDING_STATE_READY"' in got.stdout

    await eventually(embedded, timeout_s=60, poll_s=0.5)
    recalled = await run_cli(["recall", *common, "--query", "window seat", "--json"])
    assert memory_id in recalled.stdout and "CHANNEL_VECTOR" in recalled.stdout, recalled.stdout


async def _take_port(port: int, timeout_s: float = 10) -> socket.socket:
    """Listens on the port as soon as whoever held it lets go (a killed process's threads close its
    sockets a moment after it died)."""
    taken: list[socket.socket] = []

    def bound() -> bool:
        taker = socket.socket()
        taker.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            taker.bind(("127.0.0.1", port))
        except OSError:
            taker.close()
            return False
        taken.append(taker)
        return True

    await eventually(bound, timeout_s, poll_s=0.01, message=f"port {port} never freed")
    (taker,) = taken
    taker.listen()
    return taker


@pytest.mark.timeout(120)
async def test_a_child_that_keeps_failing_stops_the_stack_with_its_name_and_output(
    fresh_database: Callable[[], Awaitable[str]], tmp_path: Path
) -> None:
    dsn = await fresh_database()
    port, mcp, console = free_ports(3)
    env = {
        "HINDSIGHT_STACK__INFERENCE": "false",
        "HINDSIGHT_MCP__PORT": str(mcp),
        "HINDSIGHT_CONSOLE__PORT": str(console),
        "HINDSIGHT_STACK__RESTART_MAX_FAILURES": "3",
        "HINDSIGHT_STACK__RESTART_BACKOFF_S": "0.1",
        "HINDSIGHT_STACK__RESTART_BACKOFF_MAX_S": "0.2",
        "HINDSIGHT_DATABASE__POOL_MIN": "1",
        "HINDSIGHT_DATABASE__POOL_MAX": "2",
    }
    stack = Background(["up", "--data-dir", str(tmp_path), "--port", str(port), "--dsn", dsn], env=env)
    await stack.start()
    assert stack.process is not None
    try:
        await stack.wait_for(BANNER, timeout_s=60)
        server = int(re.search(r"memory server\s+\S+, pid (\d+)", stack.output).group(1))  # type: ignore[union-attr]
        gateway = int(re.search(r"mcp gateway\s+\S+, pid (\d+)", stack.output).group(1))  # type: ignore[union-attr]
        os.kill(server, signal.SIGKILL)
        # Every restart now fails: its port is taken.
        with await _take_port(port):
            await asyncio.wait_for(stack.process.wait(), timeout=60)
    finally:
        code = await stack.stop(signal.SIGTERM)
    output = stack.output
    assert code == 4, output
    assert output.count("memory server exited (status ") == 2, output  # restarted twice, then given up
    failure = output[output.index("hindsight up failed: ") :]
    assert failure.startswith(
        "hindsight up failed: memory server exited 3 times within 60 s (the last with status 1); stopping "
        f"the stack; port {port} is held by pid {os.getpid()} ("
    ), failure
    assert "its last output:\n" in failure and "Failed to bind to address" in failure  # its traceback
    assert "hindsight stopped" in failure
    assert not pid_alive(gateway) and not pid_alive(server)


async def test_an_answer_on_its_port_from_another_process_does_not_make_a_child_ready() -> None:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readline()
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()
        writer.close()

    impostor = await asyncio.start_server(answer, "127.0.0.1", 0)  # this test answers on the port
    port = impostor.sockets[0].getsockname()[1]
    held = f"port {port} is held by pid {os.getpid()} ("

    def child(name: str, argv: list[str]) -> Child:  # its probe: GET /health on the impostor's port
        return Child(name, f"127.0.0.1:{port}", argv, dict(os.environ), http_health="/health", ports=(port,))

    alive, exited = child("sleeper", ["sleep", "30"]), child("quitter", ["sh", "-c", "echo bye >&2; exit 3"])
    try:
        await asyncio.gather(alive.spawn(), exited.spawn())
        with pytest.raises(ChildFailed) as not_ready:
            await alive.wait_ready(1.0)
        assert str(not_ready.value).startswith(f"sleeper is not ready after 1 s (its probe answers); {held}")
        with pytest.raises(ChildFailed) as gone:
            await exited.wait_ready(10.0)
        assert str(gone.value).startswith(f"quitter exited with status 3 before it was ready; {held}")
        assert str(gone.value).endswith("; its last output:\n    bye")
    finally:
        await asyncio.gather(alive.stop(2), exited.stop(2))
        impostor.close()
        await impostor.wait_closed()


def test_busy_ports_are_named_with_their_owner_and_a_port_named_twice_is_refused() -> None:
    (free,) = free_ports(1)
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        taken = held.getsockname()[1]
        problems = busy(
            [
                Binding("memory server gRPC", "127.0.0.1", taken),
                Binding("MCP gateway", "127.0.0.1", free),
                Binding("Triton gRPC", "127.0.0.1", free),
            ]
        )
    ours = describe(os.getpid())
    assert ours.startswith(f"pid {os.getpid()} (") and "pytest" in ours
    assert problems == [
        f"port {free} is configured for both MCP gateway and Triton gRPC",
        f"port {taken} (memory server gRPC) is in use: {ours}",
    ]
    assert busy([Binding("memory server gRPC", "127.0.0.1", free)]) == []


HOLD_THE_LOCK = """
import sys, time
from pathlib import Path
from hindsight_server.stack.preflight import DataDirLock
lock = DataDirLock(Path(sys.argv[1]))  # held while the object lives
assert lock.acquire() is None
print("held", flush=True)
time.sleep(60)
"""


def test_the_data_directory_lock_names_its_holder_and_goes_with_it(tmp_path: Path) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_THE_LOCK, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        refused = DataDirLock(tmp_path).acquire()
        assert refused is not None and f"another `hindsight up`: pid {holder.pid} (" in refused
    finally:
        holder.kill()  # no chance to unlock: the kernel releases a dead process's flock
        holder.wait()
    lock = DataDirLock(tmp_path)
    assert lock.acquire() is None
    lock.release()


def test_restarts_back_off_doubling_up_to_the_cap() -> None:
    policy = RestartPolicy(backoff_s=0.5, backoff_max_s=5.0)
    assert [policy.pause(recent) for recent in range(1, 7)] == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0]


async def test_a_restarted_child_that_never_gets_ready_is_stopped_and_started_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Its first run crashes, its second hangs without ever answering (as a tritonserver once did, stuck
    loading a model after a crash), its third serves: the stack ends up with the third."""
    (port,) = free_ports(1)
    runs = tmp_path / "runs"
    script = (
        f"n=$(cat {runs} 2>/dev/null || echo 0); n=$((n + 1)); echo $n > {runs}; "
        f"case $n in 1) exit 6;; 2) exec sleep 60;; *) exec {sys.executable} -m http.server {port} "
        "--bind 127.0.0.1;; esac"
    )
    child = Child("flaky", f"127.0.0.1:{port}", ["sh", "-c", script], dict(os.environ), http_health="/")
    settings = load_settings(
        None,
        data_dir=str(tmp_path),
        stack__start_timeout_s=1.0,
        stack__restart_backoff_s=0.1,
        stack__restart_backoff_max_s=0.1,
    )
    stack, stop = Stack(settings), asyncio.Event()
    await child.spawn()
    keeping = asyncio.create_task(stack._keep_running(child, stop))
    try:
        with caplog.at_level(logging.INFO, logger="hindsight_server.stack.supervisor"):
            await eventually(lambda: "flaky restarted: ready again" in caplog.text, 30, message=caplog.text)
        assert "flaky is not ready after 1 s; stopping it to start it again" in caplog.text
        assert runs.read_text().strip() == "3"
    finally:
        stop.set()
        await child.stop(2)
        await asyncio.wait_for(keeping, 10)
