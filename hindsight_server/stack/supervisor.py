"""`hindsight up`: the whole embedded stack in the foreground.

Starts PostgreSQL (embedded; with `--replicas N` also N streaming standbys of it, stack/replicas.py) and
Triton, then N memory servers, then (with more than one server, or `--gateway nginx`) nginx as the gRPC
gateway on server.port in front of them, then the MCP gateway
(streamable HTTP, calling through the gRPC gateway) as child processes; each stage waits until its
children answer their health check (nginx's is a health call through it to a server). Prints where every
part listens; a child that dies is restarted; Ctrl-C / SIGTERM stops everything it started, the front
first (nginx finishes the calls in flight), then the servers, then the replicas and the primary.
Children get SIGTERM if the supervisor itself dies (PR_SET_PDEATHSIG), so nothing is left behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import asyncpg
import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from embedder.repository import EncoderModelOptions
from embedder.triton import TritonServer
from gateway_mcp.config import HEALTH_PATH, GatewaySettings, is_loopback, load_gateway_settings
from hindsight_server.config import Settings
from hindsight_server.stack.inference import embedded_triton
from hindsight_server.stack.launch import launched
from hindsight_server.stack.nginx import (
    NginxGateway,
    NginxNotFound,
    check_config,
    find_nginx,
    write_config,
)
from hindsight_server.stack.postgres import EmbeddedPostgres, server_settings
from hindsight_server.stack.replicas import (
    MAX_REPLICAS,
    Primary,
    Replica,
    ReplicaStatus,
    drop_unused_slots,
    replica_status,
    wait_until_streaming,
)
from hindsight_server.store.dsn import without_credentials

log = logging.getLogger(__name__)

READY_BANNER = "hindsight is up"


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
    show_pid: bool = False  # in the banner
    # nginx: its workers are the master's children, not ours, and a worker whose master died keeps
    # serving the port. In a process group of their own they are signalled, and killed, with the master.
    own_group: bool = False

    async def wait_ready(self, timeout_s: float) -> None:
        assert self.process is not None
        if self.http_health:
            await wait_until_http_ok(self.address, self.http_health, timeout_s, self.process)
        else:
            await wait_until_serving(self.address, timeout_s, self.process)

    async def spawn(self) -> None:
        self._reap()  # what a previous run left (the workers of a master that was killed)
        self.process = await asyncio.create_subprocess_exec(
            *launched(self.argv, die_with_parent=True), env=self.env, start_new_session=self.own_group
        )

    async def stop(self, grace_s: float) -> None:
        process = self.process
        if process is None:
            return
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(self.stop_signal)
            try:
                await asyncio.wait_for(process.wait(), timeout=grace_s)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                await process.wait()
        self._reap()

    def _reap(self) -> None:
        """Kills what is left of the child's own process group (nothing, after a clean exit)."""
        if self.own_group and self.process is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGKILL)


@dataclass
class ReplicaChild(Child):
    """A streaming standby of the embedded PostgreSQL, postgres in the foreground. Each start (the first,
    and the supervisor's restarts) first reuses its directory or makes it anew (Replica.prepare); it is
    ready when its WAL receiver streams from the primary; SIGINT is PostgreSQL's fast shutdown."""

    replica: Replica = field(kw_only=True)

    @classmethod
    def of(cls, replica: Replica) -> ReplicaChild:
        env = dict(os.environ)
        return cls(
            replica.name, replica.dsn, [], env, stop_signal=signal.SIGINT, show_pid=True, replica=replica
        )

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
        await wait_until_streaming(self.replica.dsn, timeout_s, self.process)


async def wait_until_serving(address: str, timeout_s: float, process: asyncio.subprocess.Process) -> None:
    """Polls the standard health service until SERVING; fails early if the process exits."""
    deadline = time.monotonic() + timeout_s
    async with grpc.aio.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        while time.monotonic() < deadline:
            if process.returncode is not None:
                raise RuntimeError(f"{address}: the process exited with status {process.returncode}")
            with contextlib.suppress(grpc.aio.AioRpcError):
                reply = await stub.Check(health_pb2.HealthCheckRequest(), timeout=1.0)
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            await asyncio.sleep(0.1)
    raise RuntimeError(f"{address}: not serving after {timeout_s:.0f}s")


async def _http_status(host: str, port: int, path: str) -> bytes:
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n\r\n".encode())
        await writer.drain()
        return (await reader.readline()).split(b" ")[1]
    finally:
        writer.close()


async def wait_until_http_ok(
    address: str, path: str, timeout_s: float, process: asyncio.subprocess.Process
) -> None:
    """Polls GET path until 200; fails early if the process exits."""
    host, _, port = address.rpartition(":")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.returncode is not None:
            raise RuntimeError(f"{address}: the process exited with status {process.returncode}")
        with contextlib.suppress(OSError, IndexError, TimeoutError):
            if await asyncio.wait_for(_http_status(host.strip("[]"), int(port), path), 1.0) == b"200":
                return
        await asyncio.sleep(0.1)
    raise RuntimeError(f"{address}: no HTTP 200 from {path} after {timeout_s:.0f}s")


@dataclass
class Stack:
    settings: Settings
    servers: int = 1
    start_timeout_s: float = 60.0
    mcp: bool = True  # the MCP gateway (its own settings: gateway_mcp.config, HINDSIGHT_MCP__*)
    mcp_port: int | None = None  # None: the gateway's configured port (8765)
    gateway: str | None = None  # None: stack.gateway (auto | nginx | none)
    replicas: int | None = None  # standbys of the embedded PostgreSQL; None: stack.postgres_replicas
    children: list[Child] = field(default_factory=list)
    replica_children: list[ReplicaChild] = field(default_factory=list)
    primary_dsn: str = ""  # once PostgreSQL is up

    def __post_init__(self) -> None:
        self.data_dir = Path(self.settings.data_dir).resolve()
        if self.replicas is None:
            self.replicas = self.settings.stack.postgres_replicas
        mode = self.gateway or self.settings.stack.gateway
        self.behind_nginx = mode == "nginx" or (mode == "auto" and self.servers > 1)

    @property
    def address(self) -> str:
        """What clients call: nginx, or the first (only) server."""
        return f"{self.settings.server.host}:{self.settings.server.port}"

    def _server_ports(self) -> list[int]:
        port, stack = self.settings.server.port, self.settings.stack
        first = (stack.servers_port or port + 1) if self.behind_nginx else port
        return [first + index for index in range(self.servers)]

    def _server_children(self, dsn: str, inference_url: str) -> list[Child]:
        host = self.settings.server.host
        env = {
            **os.environ,
            "HINDSIGHT_DATABASE__DSN": dsn,
            "HINDSIGHT_DATA_DIR": str(self.data_dir),
            "HINDSIGHT_INFERENCE__URL": inference_url,
        }
        if self.replica_children:  # the servers read from them (store/routing.py)
            env["HINDSIGHT_DATABASE__REPLICA_DSNS"] = json.dumps(self.replica_dsns)
        if not self.keys_required:  # on loopback only (keyless_refusal)
            env["HINDSIGHT_SECURITY__REQUIRE_API_KEYS"] = "false"
        if self._triton_english() is None and not self.settings.inference.url:
            env["HINDSIGHT_INFERENCE__ENGLISH_MODEL"] = ""  # the embedded tier serves no English model
        if not self.settings.stack.rerank and not self.settings.inference.url:
            env["HINDSIGHT_INFERENCE__RERANK_MODEL"] = ""  # nor a cross-encoder: never probed for one
        return [
            Child(
                name="memory server" if self.servers == 1 else f"memory server {index + 1}",
                address=f"{host}:{port}",
                argv=[sys.executable, "-m", "hindsight_server", "serve", "--port", str(port)],
                env=env,
            )
            for index, port in enumerate(self._server_ports())
        ]

    def _nginx_children(self, servers: list[Child], binary: str | None) -> list[Child]:
        """nginx on server.port over the servers, its configuration rendered into <data_dir>/nginx and
        checked (`nginx -t`) first, so a refused one stops `up` with nginx's own message."""
        if binary is None:
            return []
        stack, server = self.settings.stack, self.settings.server
        gateway = NginxGateway(
            listen=self.address,
            upstreams=tuple(child.address for child in servers),
            work_dir=self.data_dir / "nginx",
            workers=stack.gateway_workers,
            access_log=stack.gateway_access_log,
            max_message_bytes=server.max_message_bytes,
        )
        write_config(gateway)
        check_config(gateway, binary)
        balance = f"least_conn over {len(servers)} memory server{'s' if len(servers) > 1 else ''}"
        url = f"grpc://{self.address} ({balance}; config {gateway.config_path})"
        return [
            Child(
                "gateway (nginx)",
                self.address,
                gateway.argv(binary),
                dict(os.environ),
                url=url,
                stop_signal=signal.SIGQUIT,
                show_pid=True,
                own_group=True,
            )
        ]

    def _gateway_children(self, gateway: GatewaySettings | None, servers: list[Child]) -> list[Child]:
        """The HTTP gateway over the gRPC gateway (or every server started here); its own settings
        (tokens, tenant) come from the environment or HINDSIGHT_MCP_CONFIG, the targets and the port
        from here."""
        if gateway is None:
            return []
        targets = [self.address] if self.behind_nginx else [child.address for child in servers]
        argv = [sys.executable, "-m", "hindsight_server", "mcp", "--http", "--host", gateway.host]
        argv += ["--port", str(gateway.port), "--target", ",".join(targets)]
        address = (
            f"[{gateway.host}]:{gateway.port}" if ":" in gateway.host else f"{gateway.host}:{gateway.port}"
        )
        return [
            Child("mcp gateway", address, argv, dict(os.environ), url=gateway.url, http_health=HEALTH_PATH)
        ]

    def _triton(self, data_dir: Path) -> TritonServer | None:
        """The embedded tier, unless one is configured (inference.url) or it is switched off."""
        if self.settings.inference.url or not self.settings.stack.inference:
            return None
        return embedded_triton(
            self.settings.stack, data_dir, self.settings.embedding.dimension, self._triton_english()
        )

    def _triton_english(self) -> EncoderModelOptions | None:
        stack, inference = self.settings.stack, self.settings.inference
        if not stack.english_encoder or not inference.english_model:
            return None
        return EncoderModelOptions(
            name=inference.english_model,
            model_dir=Path(stack.english_encoder_dir) if stack.english_encoder_dir else None,
            dimension=self.settings.embedding.english_dimension,
        )

    @property
    def keys_required(self) -> bool:
        """`up` is the single-user mode: API keys only when the configuration asks for them."""
        security = self.settings.security
        return "require_api_keys" in security.model_fields_set and security.require_api_keys

    def keyless_refusal(self) -> str | None:
        """Why `up` must not start: without keys, only loopback may reach the servers (anyone who can
        reach them would read, export and erase every tenant)."""
        host = self.settings.server.host
        if self.keys_required or is_loopback(host):
            return None
        return (
            f"refusing to serve on {host} without API keys: anyone who can reach it would read, export "
            "and erase every tenant. Require keys (HINDSIGHT_SECURITY__REQUIRE_API_KEYS=true, keys from "
            "`hindsight tenants create`) or bind 127.0.0.1 (server.host)."
        )

    async def run(self) -> int:
        refusal = self.keyless_refusal()
        if refusal is not None:
            print(f"hindsight up failed: {refusal}", file=sys.stderr, flush=True)
            return 1
        try:  # before anything starts: a gateway that must not run stops `up` with its reason
            gateway = load_gateway_settings(port=self.mcp_port) if self.mcp else None
            if gateway is not None:
                gateway.require_safe_http()
        except ValueError as exc:  # GatewayConfigError, or a malformed HINDSIGHT_MCP__* variable
            print(f"hindsight up failed: MCP gateway: {exc}", file=sys.stderr, flush=True)
            return 1
        replicas = self.replicas or 0
        if replicas and self.settings.database.dsn:
            print(
                "hindsight up failed: --replicas streams from the embedded PostgreSQL; database.dsn names "
                "another database (its replicas are that database's business)",
                file=sys.stderr,
                flush=True,
            )
            return 1
        if not 0 <= replicas <= MAX_REPLICAS:
            print(f"hindsight up failed: --replicas: 0 to {MAX_REPLICAS}", file=sys.stderr, flush=True)
            return 1
        try:  # nor does a missing nginx wait for the database and Triton to start first
            nginx = find_nginx(self.settings.stack.nginx) if self.behind_nginx else None
        except NginxNotFound as exc:
            print(f"hindsight up failed: {exc}", file=sys.stderr, flush=True)
            return 1
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        data_dir = self.data_dir
        postgres = EmbeddedPostgres(data_dir / "postgres", server_settings(self.settings.stack))
        triton: TritonServer | None = None
        servers: list[Child] = []
        try:
            dsn = self.settings.database.dsn or await asyncio.to_thread(postgres.start)
            self.primary_dsn = dsn
            if not self.settings.database.dsn:
                await self._start_replicas(postgres, dsn)
            triton = await asyncio.to_thread(self._triton, data_dir)  # writes the model repository
            if triton is not None:
                await asyncio.to_thread(triton.start)
            inference_url = triton.grpc_url if triton is not None else self.settings.inference.url
            servers = self._server_children(dsn, inference_url)
            front = await asyncio.to_thread(self._nginx_children, servers, nginx)
            # Each stage is serving before the next starts: nginx's readiness is a call through it.
            for stage in (servers, front, self._gateway_children(gateway, servers)):
                self.children += stage
                for child in stage:
                    await child.spawn()
                for child in stage:
                    await child.wait_ready(self.start_timeout_s)
            await self._describe_replicas()
            self._print_banner(postgres, triton)
            await self._supervise(stop)
            return 0
        except (RuntimeError, OSError) as exc:  # TritonStartError, a busy port, a child that died, no nginx
            print(f"hindsight up failed: {exc}", file=sys.stderr, flush=True)
            return 1
        finally:
            # The front (nginx, the MCP gateway: the stages after the servers) first, so no new call
            # reaches a server that is stopping.
            grace = self.settings.server.grace_s + 2
            await asyncio.gather(*(child.stop(grace) for child in self.children[len(servers) :]))
            await asyncio.gather(*(child.stop(grace) for child in self.children[: len(servers)]))
            if triton is not None:
                await asyncio.to_thread(triton.stop)
            await asyncio.gather(*(child.stop(grace) for child in self.replica_children))
            await asyncio.to_thread(postgres.stop)
            print("hindsight stopped", flush=True)

    @property
    def replica_dsns(self) -> list[str]:
        """The replicas' libpq URIs (unix sockets), in order: for the memory servers' read routing."""
        return [child.replica.dsn for child in self.replica_children]

    async def replica_status(self) -> list[ReplicaStatus]:
        """Each replica's state and replay lag in bytes behind the primary (stack/replicas.py)."""
        return await replica_status(self.primary_dsn, self.replica_dsns)

    async def _start_replicas(self, postgres: EmbeddedPostgres, dsn: str) -> None:
        """The standbys, one after the other (a new one is a base backup of the primary), then waits
        until each streams. Slots of replicas not started now are dropped first (they would keep WAL)."""
        count = self.replicas or 0
        try:
            await drop_unused_slots(dsn, keep=count)
        except asyncpg.PostgresError as exc:
            log.warning("could not drop the slots of replicas not started now: %s", exc)
        if not count:
            return
        primary = Primary(dsn, postgres.socket_dir, postgres.port, postgres.system_user)
        shared_buffers = self.settings.stack.postgres_replica_shared_buffers
        settings = {"shared_buffers": shared_buffers} if shared_buffers else {}
        for index in range(1, count + 1):
            child = ReplicaChild.of(Replica(primary, index, self.data_dir, settings))
            self.replica_children.append(child)
            await child.spawn()
        for child in self.replica_children:
            await child.wait_ready(self.start_timeout_s)

    async def _describe_replicas(self) -> None:
        """The banner's line for each replica: its URI, state and lag."""
        if not self.replica_children:
            return
        for child, status in zip(self.replica_children, await self.replica_status(), strict=True):
            child.url = f"{status.dsn} ({status.describe()})"

    async def _supervise(self, stop: asyncio.Event) -> None:
        """Waits for the stop signal; a child that dies meanwhile is restarted (with a short backoff)."""
        while not stop.is_set():
            supervised: list[Child] = [*self.replica_children, *self.children]
            waits = {asyncio.ensure_future(c.process.wait()): c for c in supervised if c.process}
            stopper = asyncio.ensure_future(stop.wait())
            done, _ = await asyncio.wait([stopper, *waits], return_when=asyncio.FIRST_COMPLETED)
            for future in [stopper, *waits]:
                if future not in done:
                    future.cancel()
            for future in done:
                child = waits.get(future)
                if child is None or stop.is_set():
                    continue
                child.restarts += 1
                log.warning("%s exited (status %s); restarting", child.name, future.result())
                await asyncio.sleep(min(5.0, 0.5 * child.restarts))
                await child.spawn()

    def _print_banner(self, postgres: EmbeddedPostgres, triton: TritonServer | None) -> None:
        lines = [f"{READY_BANNER}:"]
        if self.settings.database.dsn:
            lines.append(f"  {'postgres':<16} external ({without_credentials(self.settings.database.dsn)})")
        else:
            lines.append(f"  {'postgres':<16} embedded, pid {postgres.pid}, data in {postgres.data_dir}")
        lines += [self._banner_line(child) for child in self.replica_children]
        if triton is not None:
            models = ", ".join(triton.options.models)
            lines.append(f"  {'triton':<16} grpc://{triton.grpc_url} ({models}), pid {triton.pid}")
        elif self.settings.inference.url:
            lines.append(f"  {'triton':<16} external grpc://{self.settings.inference.url}")
        else:
            lines.append(f"  {'triton':<16} off: embeddings disabled, recall without the vector channel")
        lines += [self._banner_line(child) for child in self.children]
        lines.append("Ctrl-C stops everything.")
        print("\n".join(lines), flush=True)

    @staticmethod
    def _banner_line(child: Child) -> str:
        pid = f", pid {child.process.pid}" if child.show_pid and child.process else ""
        return f"  {child.name:<16} {child.url or f'grpc://{child.address}'}{pid}"
