"""deploy/compose/nginx: the gRPC gateway's configuration is valid for nginx (`nginx -t`, unprivileged:
a temporary prefix, pid and error log), and, run for real on loopback ports in front of two gRPC servers,
it spreads calls over both, passes an 8 MiB-class message, and keeps answering when one server is gone.

`memory-server` (the compose service name) does not resolve here, so the upstream file is checked with
the servers' addresses swapped for loopback ones; every other line is the shipped file's."""

from __future__ import annotations

import os
import subprocess
import urllib.request
from collections import Counter
from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from tests.deploy.conftest import COMPOSE_DIR
from tests.support.eventually import eventually_blocking
from tests.support.processes import free_port

NGINX_DIR = COMPOSE_DIR / "nginx"
GRPC_PORT, HEALTH_PORT = 50051, 8080  # as shipped


@dataclass
class Gateway:
    conf: Path
    prefix: Path

    def argv(self, nginx: str, *extra: str) -> list[str]:
        return [
            nginx,
            "-p",
            str(self.prefix),
            "-e",
            "stderr",
            "-c",
            str(self.conf),
            "-g",
            f"pid {self.prefix / 'nginx.pid'};" + " ".join(extra),
        ]


def prepare(tmp_path: Path, upstreams: list[str], ports: dict[int, int] | None = None) -> Gateway:
    """The shipped files in a temporary folder, the upstream servers (and optionally ports) replaced."""
    conf_dir, prefix = tmp_path / "conf", tmp_path / "prefix"
    conf_dir.mkdir()
    prefix.mkdir()
    nginx_conf = (NGINX_DIR / "nginx.conf").read_text()
    for shipped, replacement in (ports or {}).items():
        assert f"listen {shipped}" in nginx_conf
        nginx_conf = nginx_conf.replace(f"listen {shipped}", f"listen 127.0.0.1:{replacement}")
    (conf_dir / "nginx.conf").write_text(nginx_conf)
    upstream = (NGINX_DIR / "hindsight-upstream.conf").read_text()
    shipped_server = "server memory-server:50051 "
    assert upstream.count(shipped_server) == 1
    servers = "\n    ".join(f"server {address} " + "{rest}" for address in upstreams)
    line_rest = upstream.split(shipped_server, 1)[1].split("\n", 1)[0]
    upstream = upstream.replace(shipped_server + line_rest, servers.format(rest=line_rest))
    (conf_dir / "hindsight-upstream.conf").write_text(upstream)
    return Gateway(conf_dir / "nginx.conf", prefix)


def test_nginx_accepts_the_configuration(nginx_binary: str, tmp_path: Path) -> None:
    gateway = prepare(tmp_path, ["127.0.0.1:50052", "127.0.0.1:50053"])
    result = subprocess.run(
        [*gateway.argv(nginx_binary), "-t"], capture_output=True, text=True, timeout=30, check=False
    )
    assert result.returncode == 0, result.stderr
    assert "test is successful" in result.stderr


def test_nginx_rejects_a_broken_configuration(nginx_binary: str, tmp_path: Path) -> None:
    """The check can fail: a misspelt directive is refused."""
    gateway = prepare(tmp_path, ["127.0.0.1:50052"])
    gateway.conf.write_text(gateway.conf.read_text().replace("grpc_pass ", "grpc_passs ", 1))
    result = subprocess.run(
        [*gateway.argv(nginx_binary), "-t"], capture_output=True, text=True, timeout=30, check=False
    )
    assert result.returncode != 0
    assert "grpc_passs" in result.stderr


@dataclass
class Backend:
    name: str
    address: str
    server: grpc.Server


@pytest.fixture
def backends() -> Iterator[list[Backend]]:
    """Two gRPC servers with the standard health service; each reports SERVING only for its own name,
    so an answer tells which one served the call."""
    started = []
    for name in ("a", "b"):
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        servicer = health.HealthServicer()
        for service in ("a", "b"):
            serving = health_pb2.HealthCheckResponse.SERVING
            status = serving if service == name else health_pb2.HealthCheckResponse.NOT_SERVING
            servicer.set(service, status)
        health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        started.append(Backend(name, f"127.0.0.1:{port}", server))
    yield started
    for backend in started:
        backend.server.stop(grace=None)


def _served_by(stub: health_pb2_grpc.HealthStub) -> str:
    reply = stub.Check(health_pb2.HealthCheckRequest(service="a"), timeout=5)
    return "a" if reply.status == health_pb2.HealthCheckResponse.SERVING else "b"


def test_gateway_spreads_calls_and_survives_a_lost_server(
    nginx_binary: str, tmp_path: Path, backends: list[Backend]
) -> None:
    grpc_port, health_port = free_port(), free_port()
    gateway = prepare(
        tmp_path, [b.address for b in backends], ports={GRPC_PORT: grpc_port, HEALTH_PORT: health_port}
    )
    process = subprocess.Popen(
        gateway.argv(nginx_binary, "daemon off;"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_healthy(process, f"http://127.0.0.1:{health_port}/healthz")

        with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            served = Counter(_served_by(stub) for _ in range(20))
            assert served["a"] > 0 and served["b"] > 0, served

            # A WriteBatch-sized message (nginx's default limit is 1 MiB) reaches the server, which
            # answers NOT_FOUND for the unknown service name rather than nginx refusing the body.
            with pytest.raises(grpc.RpcError) as error:
                stub.Check(health_pb2.HealthCheckRequest(service="x" * (3 * 1024 * 1024)), timeout=10)
            assert error.value.code() == grpc.StatusCode.NOT_FOUND

            # One server gone: its refused connections are retried on the other, no call fails.
            backends[1].server.stop(grace=None)
            assert Counter(_served_by(stub) for _ in range(20)) == Counter({"a": 20})
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_gateway_runs_as_compose_runs_it_unprivileged(
    nginx_binary: str, compose_binary: Path, backends: list[Backend]
) -> None:
    """compose.yaml runs nginx as a non-root user with no capability, on a read-only root file system
    where only its prefix (a tmpfs) is writable: the same here, with the service's own flags, as
    `nobody`, the configuration read-only and the prefix a world-writable folder like a tmpfs. It must
    start and route calls. (The pid goes into the prefix and the early error log to stderr: the
    image's /var/run is a tmpfs and its log file a link to stderr, which this machine's are not.)"""
    import shutil
    import tempfile

    from tests.deploy.test_compose import resolved

    setpriv = shutil.which("setpriv")
    if os.geteuid() != 0 or setpriv is None:
        pytest.skip("needs root and setpriv to run nginx as another, unprivileged user")
    service = resolved(compose_binary)["services"]["nginx"]
    command = service["command"]
    flags = command[command.index("-g") + 1]
    grpc_port, health_port = free_port(), free_port()
    # Not under pytest's tmp_path: its parent folders are private to root.
    root = Path(tempfile.mkdtemp(prefix="hindsight-nginx-"))
    try:
        root.chmod(0o755)
        gateway = prepare(
            root, [b.address for b in backends], ports={GRPC_PORT: grpc_port, HEALTH_PORT: health_port}
        )
        for path in (gateway.conf.parent, gateway.conf, gateway.conf.parent / "hindsight-upstream.conf"):
            path.chmod(0o755 if path.is_dir() else 0o444)
        gateway.prefix.chmod(0o1777)  # as Docker makes a tmpfs
        argv = [
            setpriv,
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--no-new-privs",
            "--inh-caps=-all",
            "--bounding-set=-all",
            nginx_binary,
            "-p",
            f"{gateway.prefix}/",
            "-e",
            "stderr",
            "-c",
            str(gateway.conf),
            "-g",
            f"{flags} pid {gateway.prefix / 'nginx.pid'};",
        ]
        process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            _wait_healthy(process, f"http://127.0.0.1:{health_port}/healthz")
            with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
                stub = health_pb2_grpc.HealthStub(channel)
                assert {_served_by(stub) for _ in range(10)} == {"a", "b"}
            # Its temporary folders were made under the prefix, owned by the unprivileged user.
            temp = gateway.prefix / "client_body_temp"
            assert temp.is_dir() and temp.stat().st_uid == 65534
        finally:
            process.terminate()
            process.wait(timeout=10)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _wait_healthy(process: subprocess.Popen[str], url: str) -> None:
    def healthy() -> bool:
        try:
            with urllib.request.urlopen(url, timeout=1) as reply:
                assert reply.status == 200
                return True
        except OSError:
            assert process.poll() is None, process.stderr.read() if process.stderr else ""
            return False

    eventually_blocking(healthy, timeout_s=10, message="nginx did not start")
