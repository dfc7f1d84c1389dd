"""`hindsight up`: the whole embedded stack in the foreground.

First checks, before it starts anything, that every TCP port it will bind is free and that no other `up`
runs on its data directory (stack/preflight.py): if not, it says which port, for what, and whose it is, and
exits 3. Then starts PostgreSQL (embedded; with `--replicas N` also N streaming standbys of it,
stack/replicas.py) and Triton, then N memory servers, then (with more than one server, or `--gateway nginx`)
nginx as the gRPC gateway on server.port in front of them, then the MCP gateway (streamable HTTP, calling
through the gRPC gateway) and the web console (console/, gRPC with a user's API key) as child processes;
each stage waits until its children are ready (stack/children.py: alive, answering their own probe, holding
their own ports; nginx's probe is a health call through it to a server). Prints where every part listens,
with the pids of its children. A child that dies (Triton included) is restarted after a growing pause; one
that keeps dying (stack.restart_max_failures within stack.restart_window_s) stops the whole stack with its
name and the tail of its output, exit status 4. Ctrl-C / SIGTERM stops everything it started, the front
first (nginx finishes the calls in flight), then the servers, Triton, the replicas and the primary. Children
get SIGTERM if the supervisor itself dies (PR_SET_PDEATHSIG), so nothing is left behind.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import logging
import os
import signal
import sys
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from console.config import HEALTH_PATH as CONSOLE_HEALTH_PATH
from console.config import ConsoleConfigError, ConsoleSettings, load_console_settings
from embedder.repository import EncoderModelOptions, default_chinese_encoder_dir
from embedder.triton import TritonServer
from gateway_mcp.config import HEALTH_PATH, GatewaySettings, is_loopback, load_gateway_settings
from hindsight.tls import ClientTls
from hindsight_server.config import Settings
from hindsight_server.stack.children import Child, ChildFailed, ReplicaChild, RestartPolicy, TritonChild
from hindsight_server.stack.inference import embedded_triton
from hindsight_server.stack.nginx import (
    NginxGateway,
    NginxNotFound,
    NginxTls,
    check_config,
    find_nginx,
    write_config,
)
from hindsight_server.stack.postgres import EmbeddedPostgres, server_settings
from hindsight_server.stack.preflight import Binding, DataDirLock, busy
from hindsight_server.stack.replicas import (
    MAX_REPLICAS,
    Primary,
    Replica,
    ReplicaStatus,
    ReplicationError,
    drop_unused_slots,
    replica_status,
)
from hindsight_server.store.dsn import without_credentials

log = logging.getLogger(__name__)

READY_BANNER = "hindsight is up"
# The name the stack's own parts check in the servers' certificate by default: they call them on
# loopback addresses, which a certificate names as localhost (security.tls_server_name otherwise).
_LOOPBACK_NAME = "localhost"

# `hindsight up`'s exit statuses (README): 0 stopped by Ctrl-C / SIGTERM; 1 refused or failed to start;
# 3 a port or the data directory in use, nothing started; 4 a child kept failing, the stack stopped.
EXIT_FAILED = 1
EXIT_BUSY = 3
EXIT_CHILD_FAILING = 4


class Refused(Exception):
    """`up` must not start: the line says why."""


@dataclass
class Stack:
    settings: Settings
    servers: int = 1
    start_timeout_s: float = 60.0
    mcp: bool = True  # the MCP gateway (its own settings: gateway_mcp.config, HINDSIGHT_MCP__*)
    mcp_port: int | None = None  # None: the gateway's configured port (8765)
    console: bool = True  # the web console (its own settings: console/config.py, HINDSIGHT_CONSOLE__*)
    console_port: int | None = None  # None: the console's configured port (8766)
    console_settings: ConsoleSettings | None = None  # once the configuration is checked
    gateway: str | None = None  # None: stack.gateway (auto | nginx | none)
    replicas: int | None = None  # standbys of the embedded PostgreSQL; None: stack.postgres_replicas
    children: list[Child] = field(default_factory=list)
    replica_children: list[ReplicaChild] = field(default_factory=list)
    triton_child: TritonChild | None = None
    servers_started: list[Child] = field(default_factory=list)  # the memory servers, among children
    primary_dsn: str = ""  # once PostgreSQL is up

    def __post_init__(self) -> None:
        self.data_dir = Path(self.settings.data_dir).resolve()
        self.restart_policy = RestartPolicy.of(self.settings.stack)
        self._lock = DataDirLock(self.data_dir)
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
        if not self.settings.inference.url:  # the embedded tier: the servers ask only for what it serves
            served = {encoder.name for encoder in self._triton_encoders()}
            for setting, model in (
                ("ENGLISH", self.settings.inference.english_model),
                ("CHINESE", self.settings.inference.chinese_model),
            ):
                if model not in served:
                    env[f"HINDSIGHT_INFERENCE__{setting}_MODEL"] = ""
        if not self.settings.stack.rerank and not self.settings.inference.url:
            env["HINDSIGHT_INFERENCE__RERANK_MODEL"] = ""  # nor a cross-encoder: never probed for one
        return [
            Child(
                name="memory server" if self.servers == 1 else f"memory server {index + 1}",
                address=f"{host}:{port}",
                argv=[sys.executable, "-m", "hindsight_server", "serve", "--port", str(port)],
                env=env,
                url=f"{self._scheme}://{host}:{port}",
                ports=(port,),
                tls=self.client_tls,
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
            tls=self._nginx_tls(),
        )
        write_config(gateway)
        check_config(gateway, binary)
        balance = f"least_conn over {len(servers)} memory server{'s' if len(servers) > 1 else ''}"
        url = f"{self._scheme}://{self.address} ({balance}; config {gateway.config_path})"
        return [
            Child(
                "gateway (nginx)",
                self.address,
                gateway.argv(binary),
                dict(os.environ),
                url=url,
                stop_signal=signal.SIGQUIT,
                own_group=True,
                ports=(self.settings.server.port,),
                # Its output in its error log, not through pipes: its workers would hold them open after
                # the master died, and asyncio's wait() returns only once every pipe is closed.
                log_path=gateway.error_log,
                tls=self.client_tls,
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
            Child(
                "mcp gateway",
                address,
                argv,
                self._env_calling_the_servers("HINDSIGHT_MCP__"),
                url=gateway.url,
                http_health=HEALTH_PATH,
                ports=(gateway.port,),
            )
        ]

    def _console_children(self, servers: list[Child]) -> list[Child]:
        """The web console over the gRPC gateway (or every server started here): its settings from the
        environment (HINDSIGHT_CONSOLE__*), the targets and the address from here."""
        console = self.console_settings
        if console is None:
            return []
        targets = [self.address] if self.behind_nginx else [child.address for child in servers]
        host = f"[{console.host}]" if ":" in console.host else console.host
        argv = [sys.executable, "-m", "hindsight_server", "console", "--listen", f"{host}:{console.port}"]
        argv += ["--target", ",".join(targets)]
        return [
            Child(
                "web console",
                f"{host}:{console.port}",
                argv,
                self._env_calling_the_servers("HINDSIGHT_CONSOLE__"),
                url=console.url,
                http_health=CONSOLE_HEALTH_PATH,
                ports=(console.port,),
            )
        ]

    @property
    def client_tls(self) -> ClientTls | None:
        """How the stack's own parts call the servers and nginx: TLS where the servers listen with it."""
        security = self.settings.security
        if not security.tls_cert_file:
            return None
        mutual = bool(security.tls_client_ca_file)
        return ClientTls(
            ca_file=security.tls_ca_file or security.tls_cert_file,
            cert_file=security.tls_cert_file if mutual else "",
            key_file=security.tls_key_file if mutual else "",
            server_name=security.tls_server_name or _LOOPBACK_NAME,
        )

    @property
    def _scheme(self) -> str:
        return "grpc" if self.client_tls is None else "grpcs"

    def _nginx_tls(self) -> NginxTls | None:
        tls, security = self.client_tls, self.settings.security
        if tls is None:
            return None
        return NginxTls(
            security.tls_cert_file,
            security.tls_key_file,
            tls.ca_file,
            tls.server_name,
            security.tls_client_ca_file,
        )

    def _env_calling_the_servers(self, prefix: str) -> dict[str, str]:
        """The environment of a part that calls the servers (the MCP gateway, the console): TLS to them
        as the stack speaks it, unless its own TARGETS_* variables say otherwise."""
        env = dict(os.environ)
        tls = self.client_tls
        if tls is None or any(name.startswith(f"{prefix}TARGETS_") for name in env):
            return env
        env[f"{prefix}TARGETS_TLS"] = "true"
        for suffix, value in (
            ("CA_FILE", tls.ca_file),
            ("CERT_FILE", tls.cert_file),
            ("KEY_FILE", tls.key_file),
            ("SERVER_NAME", tls.server_name),
        ):
            env[f"{prefix}TARGETS_{suffix}"] = value
        return env

    def _console_configuration(self) -> ConsoleSettings | None:
        """The console's settings (None: not started), or Refused: a bad HINDSIGHT_CONSOLE__* value, or
        the console extra missing (its pages need Jinja2)."""
        if not self.console:
            return None
        try:
            settings = load_console_settings(port=self.console_port)
        except ConsoleConfigError as exc:
            raise Refused(f"web console: {exc}") from exc
        if importlib.util.find_spec("jinja2") is None:
            raise Refused(
                "web console: the console extra is not installed (pip install "
                "'hindsight-memory-server[console]'); or start without it: --no-console"
            )
        return settings

    @property
    def _starts_triton(self) -> bool:
        """The embedded tier, unless one is configured (inference.url) or it is switched off."""
        return not self.settings.inference.url and self.settings.stack.inference

    def _triton(self, data_dir: Path) -> TritonServer | None:
        if not self._starts_triton:
            return None
        return embedded_triton(
            self.settings.stack, data_dir, self.settings.embedding.dimension, self._triton_encoders()
        )

    def _triton_encoders(self) -> tuple[EncoderModelOptions, ...]:
        """The languages' own encoders the embedded tier serves."""
        stack, inference, dimensions = self.settings.stack, self.settings.inference, self.settings.embedding
        encoders = []
        if stack.english_encoder and inference.english_model:
            encoders.append(
                EncoderModelOptions(
                    name=inference.english_model,
                    model_dir=Path(stack.english_encoder_dir) if stack.english_encoder_dir else None,
                    dimension=dimensions.english_dimension,
                )
            )
        if stack.chinese_encoder and inference.chinese_model:
            encoders.append(
                EncoderModelOptions(
                    name=inference.chinese_model,
                    model_dir=Path(stack.chinese_encoder_dir or default_chinese_encoder_dir()),
                    dimension=dimensions.chinese_dimension,
                    pooling="mean",
                )
            )
        return tuple(encoders)

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
        try:  # before anything starts: what must not run stops `up` with its reason
            gateway, nginx = self._check_configuration()
        except Refused as exc:
            print(f"hindsight up failed: {exc}", file=sys.stderr, flush=True)
            return EXIT_FAILED
        problems = await asyncio.to_thread(self._preflight, gateway)
        if problems:
            for line in problems:
                print(f"hindsight up failed: {line}", file=sys.stderr)
            print("hindsight up: nothing was started", file=sys.stderr, flush=True)
            return EXIT_BUSY
        try:
            return await self._run(gateway, nginx)
        finally:
            self._lock.release()

    def _check_configuration(self) -> tuple[GatewaySettings | None, str | None]:
        """The MCP gateway's settings and the nginx binary, or Refused: keyless off loopback, an unsafe
        gateway, replicas that cannot be, no nginx (which would otherwise be found missing only after the
        database and Triton started)."""
        refusal = self.keyless_refusal()
        if refusal is not None:
            raise Refused(refusal)
        try:
            gateway = load_gateway_settings(port=self.mcp_port) if self.mcp else None
            if gateway is not None:
                gateway.require_safe_http()
        except ValueError as exc:  # GatewayConfigError, or a malformed HINDSIGHT_MCP__* variable
            raise Refused(f"MCP gateway: {exc}") from exc
        self.console_settings = self._console_configuration()
        replicas = self.replicas or 0
        if replicas and self.settings.database.dsn:
            raise Refused(
                "--replicas streams from the embedded PostgreSQL; database.dsn names another database "
                "(its replicas are that database's business)"
            )
        if not 0 <= replicas <= MAX_REPLICAS:
            raise Refused(f"--replicas: 0 to {MAX_REPLICAS}")
        try:
            return gateway, find_nginx(self.settings.stack.nginx) if self.behind_nginx else None
        except NginxNotFound as exc:
            raise Refused(str(exc)) from exc

    def bindings(self, gateway: GatewaySettings | None) -> list[Binding]:
        """Every TCP port the children will listen on (the embedded PostgreSQL listens on a unix socket in
        the data directory only: the data directory's lock covers it)."""
        host, stack = self.settings.server.host, self.settings.stack
        found: list[Binding] = []
        if self._starts_triton:
            for purpose, port in (
                ("Triton HTTP", stack.triton_http_port),
                ("Triton gRPC", stack.triton_grpc_port),
                ("Triton metrics", stack.triton_metrics_port),
            ):
                found.append(Binding(purpose, "127.0.0.1", port))  # TritonOptions.address
        for index, port in enumerate(self._server_ports()):
            name = "memory server" if self.servers == 1 else f"memory server {index + 1}"
            found.append(Binding(f"{name} gRPC", host, port))
        if self.behind_nginx:
            found.append(Binding("gRPC gateway (nginx)", host, self.settings.server.port))
        if gateway is not None:
            found.append(Binding("MCP gateway", gateway.host, gateway.port))
        if self.console_settings is not None:
            found.append(Binding("web console", self.console_settings.host, self.console_settings.port))
        return found

    def _preflight(self, gateway: GatewaySettings | None) -> list[str]:
        """What is in use (empty: nothing); takes the data directory's lock when it is free."""
        problems = busy(self.bindings(gateway))
        if problems and not self._lock.path.exists():  # no `up` ever ran there: nothing to create for it
            return problems
        held = self._lock.acquire()
        if held is not None:
            problems.append(held)
        elif problems:
            self._lock.release()
        return problems

    async def _run(self, gateway: GatewaySettings | None, nginx: str | None) -> int:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        postgres = EmbeddedPostgres(self.data_dir / "postgres", server_settings(self.settings.stack))
        try:
            if not await self._start(postgres, gateway, nginx, stop):
                print("hindsight up: stopped before it was up", file=sys.stderr, flush=True)
                return EXIT_FAILED
            await self._describe_replicas()
            self._print_banner(postgres)
            try:
                await self._supervise(stop)
            except ChildFailed as exc:
                print(f"hindsight up failed: {exc}", file=sys.stderr, flush=True)
                return EXIT_CHILD_FAILING
            return 0
        except (RuntimeError, OSError) as exc:  # a child that exited or is not ready, nginx -t refusing
            print(f"hindsight up failed: {exc}", file=sys.stderr, flush=True)
            return EXIT_FAILED
        finally:
            await self._stop_all(postgres)

    async def _start(
        self,
        postgres: EmbeddedPostgres,
        gateway: GatewaySettings | None,
        nginx: str | None,
        stop: asyncio.Event,
    ) -> bool:
        """Starts every part, each stage ready before the next; False when the stop signal came first
        (Ctrl-C while a child is not ready yet ends the wait, not only the stack it would have started)."""
        dsn = self.settings.database.dsn or await asyncio.to_thread(postgres.start)
        self.primary_dsn = dsn
        if not self.settings.database.dsn:
            await self._start_replicas(postgres, dsn)
        triton = await asyncio.to_thread(self._triton, self.data_dir)  # writes the model repository
        if triton is not None:
            self.triton_child = await asyncio.to_thread(TritonChild.of, triton)
            await self.triton_child.spawn()
            if not await _unless(stop, self.triton_child.wait_ready(self.settings.stack.start_timeout_s)):
                return False
        inference_url = self.triton_child.address if self.triton_child else self.settings.inference.url
        self.servers_started = servers = self._server_children(dsn, inference_url)
        front = await asyncio.to_thread(self._nginx_children, servers, nginx)
        # Each stage is serving before the next starts: nginx's readiness is a call through it.
        fronts = self._gateway_children(gateway, servers) + self._console_children(servers)
        for stage in (servers, front, fronts):
            self.children += stage
            for child in stage:
                await child.spawn()
            for child in stage:
                if not await _unless(stop, child.wait_ready(self.start_timeout_s)):
                    return False
        return not stop.is_set()

    async def _stop_all(self, postgres: EmbeddedPostgres) -> None:
        """The front (nginx, the MCP gateway, the console: the stages after the servers) first, so no new
        call reaches a server that is stopping; then the servers, Triton, the replicas and the primary."""
        grace = self.settings.server.grace_s + 2
        servers = {id(child) for child in self.servers_started}
        await asyncio.gather(*(child.stop(grace) for child in self.children if id(child) not in servers))
        await asyncio.gather(*(child.stop(grace) for child in self.servers_started))
        if self.triton_child is not None:
            await self.triton_child.stop(self.triton_child.stop_grace_s)
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
        except ReplicationError as exc:
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

    @property
    def supervised(self) -> list[Child]:
        triton = [self.triton_child] if self.triton_child is not None else []
        return [*self.replica_children, *triton, *self.children]

    async def _supervise(self, stop: asyncio.Event) -> None:
        """Until the stop signal, each child is watched and restarted when it exits; raises ChildFailed
        when one keeps failing (the caller then stops the stack)."""
        stopped = asyncio.ensure_future(stop.wait())
        watchers = [asyncio.ensure_future(self._keep_running(child, stop)) for child in self.supervised]
        try:
            done, _ = await asyncio.wait([stopped, *watchers], return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                task.result()  # a watcher's ChildFailed
        finally:
            for task in [stopped, *watchers]:
                task.cancel()
            await asyncio.gather(stopped, *watchers, return_exceptions=True)

    async def _keep_running(self, child: Child, stop: asyncio.Event) -> None:
        """Restarts the child whenever it exits, after RestartPolicy's pause; returns once stopping, raises
        ChildFailed when it exited too often within the window (a port taken, a broken model: restarting
        would only repeat its traceback)."""
        policy = self.restart_policy
        while child.process is not None:
            status = await child.process.wait()
            if stop.is_set():
                return
            recent = child.note_exit(time.monotonic(), policy.window_s)
            if recent >= policy.max_failures:
                raise await child.failure(
                    f"exited {recent} times within {policy.window_s:g} s (the last with status {status}); "
                    "stopping the stack"
                )
            pause = policy.pause(recent)
            log.warning("%s exited (status %s); restarting in %.1f s", child.name, status, pause)
            if await _set_within(stop, pause):
                return
            child.restarts += 1
            await child.spawn()
            try:
                await child.wait_ready(self.settings.stack.start_timeout_s)
            except ChildFailed as exc:
                if child.process.returncode is None:
                    # Alive but never ready (a tritonserver restarted after a crash once hung loading a
                    # model, its CPU idle): stopped, so the loop counts an exit and starts it again.
                    log.warning("%s; stopping it to start it again", exc.what)
                    await child.stop(self.settings.server.grace_s + 2)
                continue
            log.info("%s restarted: ready again, pid %s", child.name, child.pid)

    def _print_banner(self, postgres: EmbeddedPostgres) -> None:
        lines = [f"{READY_BANNER}:"]
        if self.settings.database.dsn:
            lines.append(f"  {'postgres':<16} external ({without_credentials(self.settings.database.dsn)})")
        else:
            joined = " (already running: joined)" if postgres.joined else ""
            lines.append(
                f"  {'postgres':<16} embedded, pid {postgres.pid}{joined}, data in {postgres.data_dir}"
            )
        lines += [self._banner_line(child) for child in self.replica_children]
        if self.triton_child is not None:
            lines.append(self._banner_line(self.triton_child))
        elif self.settings.inference.url:
            lines.append(f"  {'triton':<16} external grpc://{self.settings.inference.url}")
        else:
            lines.append(f"  {'triton':<16} off: embeddings disabled, recall without the vector channel")
        lines += [self._banner_line(child) for child in self.children]
        lines.append("Ctrl-C stops everything.")
        print("\n".join(lines), flush=True)

    @staticmethod
    def _banner_line(child: Child) -> str:
        """Where it listens and its pid: this stack's own process, not whoever answers on its port."""
        return f"  {child.name:<16} {child.url or f'grpc://{child.address}'}, pid {child.pid}"


async def _unless(stop: asyncio.Event, work: Coroutine[Any, Any, None]) -> bool:
    """Runs the work unless the stop signal comes first (then cancels it); whether it ran to its end.
    Its errors are raised."""
    task = asyncio.ensure_future(work)
    stopped = asyncio.ensure_future(stop.wait())
    await asyncio.wait([task, stopped], return_when=asyncio.FIRST_COMPLETED)
    stopped.cancel()
    if not task.done():
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return False
    task.result()
    return True


async def _set_within(event: asyncio.Event, timeout_s: float) -> bool:
    """Waits up to timeout_s for the event; whether it was set."""
    try:
        async with asyncio.timeout(timeout_s):
            await event.wait()
    except TimeoutError:
        return False
    return True
