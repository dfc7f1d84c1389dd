"""`hindsight up --servers 3`: three memory servers behind nginx as the gRPC gateway on one port. Calls
through it are spread over the servers (nginx's access log names the server of each call), the MCP
gateway `up` starts calls through it, and a server killed (SIGKILL) under a write load loses no
acknowledged write while the load keeps going; the supervisor restarts it and nginx uses it again.

One cluster for the module (on the session's PostgreSQL, without Triton, to stay light on 2 cores);
stopping it cleanly, with nothing left behind, is checked when it is torn down."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import socket
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import grpc
import httpx2
import pytest

from hindsight.client import HindsightClient
from hindsight_server.bench.recall import server_pids
from hindsight_server.stack.nginx import (
    NginxGateway,
    NginxNotFound,
    check_config,
    find_nginx,
    render_config,
    write_config,
)
from tests.fixtures.postgres import dsn_for_database
from tests.support.eventually import eventually
from tests.support.mcp_sessions import http_session
from tests.support.processes import Background, free_port, free_ports, pid_alive

SERVERS = 3

try:
    find_nginx()
except NginxNotFound as missing:  # `make` installs it; a bare checkout without root may lack it
    pytest.skip(str(missing), allow_module_level=True)


def _free_consecutive_ports(count: int) -> int:
    """The first of `count` consecutive free ports (the servers listen on consecutive ports)."""
    for _ in range(50):
        first = free_port()
        if first + count > 65535:
            continue
        probes = []
        try:
            for port in range(first, first + count):
                probe = socket.socket()
                probes.append(probe)
                probe.bind(("127.0.0.1", port))
            return first
        except OSError:
            continue
        finally:
            for probe in probes:
                probe.close()
    raise RuntimeError("no run of free ports")


@dataclass
class Cluster:
    stack: Background
    target: str  # nginx
    servers: list[str]  # each memory server's HOST:PORT
    mcp_url: str
    data_dir: Path

    def server_pid(self, address: str) -> int:
        """The pid of the process listening on a server's port (the current one, after restarts)."""
        (pid,) = listeners(address)
        return pid

    def access_log(self) -> list[str]:
        path = self.data_dir / "nginx" / "access.log"
        return path.read_text().splitlines() if path.exists() else []


def listeners(address: str) -> set[int]:
    """The processes holding the listening socket of HOST:PORT (nginx: its master and its workers)."""
    inode = _listening_inode(int(address.rpartition(":")[2]))
    holders: set[int] = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if any(os.readlink(fd) == f"socket:[{inode}]" for fd in (entry / "fd").iterdir()):
                holders.add(int(entry.name))
    if not holders:
        raise AssertionError(f"nothing listens on {address}")
    return holders


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1])


def _listening_inode(port: int) -> str:
    # gRPC binds 127.0.0.1 as a v4-mapped IPv6 socket: it is listed in tcp6.
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == "0A" and int(local.rpartition(":")[2], 16) == port:  # 0A: LISTEN
                return inode
    raise AssertionError(f"nothing listens on port {port}")


@pytest.fixture(scope="module")
async def cluster(postgres_dsn: str, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Cluster]:
    database = f"cluster_{uuid.uuid4().hex[:10]}"
    connection = await asyncpg.connect(postgres_dsn)
    await connection.execute(f'CREATE DATABASE "{database}"')
    await connection.close()
    data_dir = tmp_path_factory.mktemp("cluster")
    port, mcp_port, console_port = free_ports(3)
    first_server = _free_consecutive_ports(SERVERS)
    env = {
        "HINDSIGHT_STACK__INFERENCE": "false",
        "HINDSIGHT_STACK__SERVERS_PORT": str(first_server),
        "HINDSIGHT_STACK__GATEWAY_ACCESS_LOG": "true",
        "HINDSIGHT_MCP__PORT": str(mcp_port),
        "HINDSIGHT_MCP__TENANT": "acme-mcp",
        "HINDSIGHT_CONSOLE__PORT": str(console_port),
        "HINDSIGHT_DATABASE__POOL_MIN": "1",
        "HINDSIGHT_DATABASE__POOL_MAX": "4",
    }
    dsn = dsn_for_database(postgres_dsn, database)
    args = ["up", "--servers", str(SERVERS), "--data-dir", str(data_dir), "--port", str(port), "--dsn", dsn]
    stack = Background(args, env=env)
    await stack.start()
    try:
        await stack.wait_for(r"hindsight is up:[\s\S]*Ctrl-C stops everything", timeout_s=60)
    except BaseException:
        await stack.stop(signal.SIGTERM)
        raise
    servers = [f"127.0.0.1:{first_server + i}" for i in range(SERVERS)]
    yield Cluster(stack, f"127.0.0.1:{port}", servers, f"http://127.0.0.1:{mcp_port}/mcp", data_dir)

    children = [*listeners(f"127.0.0.1:{port}"), *(listeners(server).pop() for server in servers)]
    code = await stack.stop(signal.SIGINT)
    assert code == 0, stack.output
    assert "hindsight stopped" in stack.output
    assert not [pid for pid in children if pid_alive(pid)], stack.output
    connection = await asyncpg.connect(postgres_dsn)
    await connection.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
    await connection.close()


def test_the_rendered_configuration_is_valid_and_retries_only_calls_no_server_received(
    tmp_path: Path,
) -> None:
    gateway = NginxGateway("127.0.0.1:50051", ("127.0.0.1:50052", "[::1]:50053"), tmp_path, access_log=True)
    write_config(gateway)
    check_config(gateway, find_nginx())  # nginx -t, as the supervisor runs it
    text = render_config(gateway)
    directives = [line.split("#")[0].strip() for line in text.splitlines()]
    assert "grpc_next_upstream error;" in directives  # never timeout or non_idempotent: no call runs twice
    assert "least_conn;" in directives and "listen 127.0.0.1:50051 http2;" in directives
    assert "server [::1]:50053 max_fails=1 fail_timeout=2s;" in directives
    # Everything nginx writes stays in its work directory: it runs without privileges.
    paths = re.findall(r"(?m)^\s*(?:pid|error_log|access_log|\w+_temp_path) (\S+)", text)
    assert len(paths) == 8 and all(path.startswith(str(tmp_path)) for path in paths), paths


@pytest.mark.timeout(90)  # with the module's cluster start (first test) or stop (last)
async def test_calls_through_the_gateway_are_spread_over_the_servers(cluster: Cluster) -> None:
    output = cluster.stack.output
    assert re.search(
        rf"gateway \(nginx\)\s+grpc://{cluster.target} \(least_conn over 3 memory servers", output
    )
    for number, address in enumerate(cluster.servers, start=1):
        assert f"memory server {number}  grpc://{address}" in output
    # The MCP gateway calls the servers through nginx, not around it.
    assert re.search(
        rf"hindsight mcp listening on {re.escape(cluster.mcp_url)} .*-> {cluster.target}", output
    )

    tenant = f"t-{uuid.uuid4().hex[:8]}"
    before = len(cluster.access_log())
    async with HindsightClient(cluster.target, timeout_s=10) as client:
        written = await client.write(tenant, "用户偏好靠窗座位", tier="semantic", kind="preference")
        for _ in range(29):  # one call at a time: least_conn's ties go round robin
            assert (await client.get(tenant, written.memory.id)).content == "用户偏好靠窗座位"
        hits = (await client.recall(tenant, "靠窗")).hits
        assert [hit.memory.id for hit in hits] == [written.memory.id]
    async with http_session(cluster.mcp_url) as session:
        through_mcp = await session.call_tool("memory_recall", {"session_id": "s1", "query": "靠窗"})
    assert through_mcp.structured_content is not None and not through_mcp.is_error, through_mcp
    # So does the web console, and `up` waited for it.
    console = re.search(
        rf"hindsight console listening on (http://127\.0\.0\.1:\d+/) -> {cluster.target},", output
    )
    assert console is not None and f"web console      {console.group(1)}" in output, output
    async with httpx2.AsyncClient(base_url=console.group(1), timeout=10) as http:
        assert (await http.get("/healthz")).text == "ok"

    # The benches count every server's CPU, not only the one that answered their first Status.
    assert set(await server_pids(cluster.target)) == {cluster.server_pid(a) for a in cluster.servers}

    # The access log is flushed every second: each line names the server that answered the call.
    logged, waited = before + 32, "timed out waiting for the access log"
    await eventually(lambda: len(cluster.access_log()) >= logged, 10, 0.1, message=waited)
    lines = cluster.access_log()[before:]
    per_server = Counter(line.split()[3] for line in lines if "/hindsight.v1.MemoryService/" in line)
    assert set(per_server) == set(cluster.servers), lines
    assert min(per_server.values()) >= 5, per_server  # 31 gRPC calls and one MCP recall over 3 servers
    assert all(line.split()[5] == "0" for line in lines if "MemoryService/Get" in line)  # grpc-status OK


@pytest.mark.timeout(90)  # with the module's cluster start (first test) or stop (last)
async def test_a_server_killed_under_write_load_loses_no_acknowledged_write(cluster: Cluster) -> None:
    tenant = f"t-{uuid.uuid4().hex[:8]}"
    acknowledged: dict[str, str] = {}  # idempotency key -> id
    errors: Counter[str] = Counter()
    details: list[str] = []
    acked_after_kill = 0
    killed = asyncio.Event()
    stop = asyncio.Event()

    async with HindsightClient(cluster.target, timeout_s=10) as client:

        async def writer(number: int) -> None:
            nonlocal acked_after_kill
            count = 0
            while not stop.is_set():
                count += 1
                key = f"w{number}-{count}"
                try:
                    response = await client.write(
                        tenant, f"writer {number} memory {count}", tier="episodic", kind="event",
                        idempotency_key=key,
                    )  # fmt: skip
                except grpc.aio.AioRpcError as error:
                    errors[error.code().name] += 1
                    details.append(f"{error.code().name}: {error.details()}")
                    continue
                acknowledged[key] = response.memory.id
                acked_after_kill += killed.is_set()

        writers = [asyncio.create_task(writer(n)) for n in range(6)]
        before_kill = "timed out waiting for writes before the kill"
        await eventually(lambda: len(acknowledged) >= 60, 20, 0.1, message=before_kill)
        victim = cluster.servers[1]
        victim_pid = cluster.server_pid(victim)
        os.kill(victim_pid, signal.SIGKILL)
        killed.set()
        # The load keeps going through the other two while the supervisor restarts the victim.
        await cluster.stack.wait_for(r"memory server 2 exited \(status -9\); restarting", timeout_s=10)
        after_kill = "timed out waiting for writes after the kill"
        await eventually(lambda: acked_after_kill >= 100, 20, 0.1, message=after_kill)

        def restarted() -> bool:
            with contextlib.suppress(AssertionError):
                return cluster.server_pid(victim) != victim_pid
            return False

        await eventually(restarted, 20, 0.1, message="timed out waiting for the restarted server")
        # ... and nginx sends it calls again (fail_timeout 2 s).
        log_mark = len(cluster.access_log())
        await eventually(
            lambda: any(f" {victim} " in line for line in cluster.access_log()[log_mark:]),
            20,
            0.1,
            message="timed out waiting for calls to it",
        )
        stop.set()
        await asyncio.gather(*writers)

        # Only calls in flight on the killed server can fail: at most one per writer. nginx answers 502
        # (UNAVAILABLE, which the client retries with the same idempotency key) when the server died
        # before its response headers, and resets the stream (INTERNAL, not retried: the write may have
        # committed) when it had already sent them (the request id goes out first).
        assert sum(errors.values()) <= len(writers), details
        assert all(
            line.startswith("UNAVAILABLE") or (line.startswith("INTERNAL") and "RST_STREAM" in line)
            for line in details
        ), details
        # Every acknowledged write is there, once.
        stored = {
            memory.idempotency_key: memory.id async for memory in client.list_all(tenant, page_size=500)
        }
        missing = {key for key, memory_id in acknowledged.items() if stored.get(key) != memory_id}
        assert not missing, f"{len(missing)} acknowledged writes lost of {len(acknowledged)}"
        assert len(stored) <= len(acknowledged) + sum(errors.values())


@pytest.mark.timeout(90)  # with the module's cluster stop
async def test_nginx_killed_is_restarted_and_leaves_no_worker_behind(cluster: Cluster) -> None:
    old = listeners(cluster.target)
    (master,) = {pid for pid in old if _parent(pid) not in old}
    os.kill(master, signal.SIGKILL)  # its worker would keep the port, and serve, without a master
    await cluster.stack.wait_for(r"gateway \(nginx\) exited \(status -9\); restarting", timeout_s=10)

    def replaced() -> bool:
        with contextlib.suppress(AssertionError):
            return not listeners(cluster.target) & old
        return False

    await eventually(replaced, 20, 0.1, message="timed out waiting for a new nginx")
    assert not [pid for pid in old if pid_alive(pid)]
    tenant = f"t-{uuid.uuid4().hex[:8]}"
    async with HindsightClient(cluster.target, timeout_s=10) as client:
        written = await client.write(tenant, "after the gateway restart", tier="semantic", kind="fact")
        assert (await client.get(tenant, written.memory.id)).content == "after the gateway restart"
