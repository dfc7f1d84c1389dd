"""The image's health check script (deploy/compose/healthcheck.py, installed as hindsight-healthcheck):
exit 0 only when the gRPC health service says SERVING for the asked service (over TLS with `grpcs`), or
the URL answers 2xx."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from tests.deploy.conftest import COMPOSE_DIR
from tests.support.certs import self_signed
from tests.support.processes import free_port

SCRIPT = COMPOSE_DIR / "healthcheck.py"
SERVICE = "hindsight.v1.MemoryService"


def healthcheck(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=30, check=False, env=env
    )


@pytest.fixture
def health_server() -> Iterator[tuple[str, health.HealthServicer]]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"127.0.0.1:{port}", servicer
    finally:
        server.stop(grace=None)


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/healthz" else 503)
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:  # quiet
        pass


@pytest.fixture
def http_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_grpc_serving_and_not(health_server: tuple[str, health.HealthServicer]) -> None:
    target, servicer = health_server
    servicer.set(SERVICE, health_pb2.HealthCheckResponse.SERVING)
    assert healthcheck("grpc", target, SERVICE).returncode == 0

    servicer.set(SERVICE, health_pb2.HealthCheckResponse.NOT_SERVING)
    result = healthcheck("grpc", target, SERVICE)
    assert result.returncode == 1
    assert "NOT_SERVING" in result.stderr

    # A service the server does not know is unhealthy too (NOT_FOUND), not a pass.
    result = healthcheck("grpc", target, "no.such.Service")
    assert result.returncode == 1
    assert "NOT_FOUND" in result.stderr


def test_grpc_nothing_listening() -> None:
    result = healthcheck("grpc", f"127.0.0.1:{free_port()}", SERVICE)
    assert result.returncode == 1
    assert "UNAVAILABLE" in result.stderr or "DEADLINE_EXCEEDED" in result.stderr


def test_http(http_server: str) -> None:
    assert healthcheck("http", f"{http_server}/healthz").returncode == 0
    result = healthcheck("http", f"{http_server}/v2/health/ready")
    assert result.returncode == 1
    assert "HTTP 503" in result.stderr


def test_usage_is_unhealthy_not_reserved_status() -> None:
    """Docker reserves exit status 2: a wrong invocation reports unhealthy (1)."""
    result = healthcheck("tcp", "127.0.0.1:1")
    assert result.returncode == 1
    assert "usage" in result.stderr


def test_grpcs_checks_over_tls_with_the_configured_ca(tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    credentials = grpc.ssl_server_credentials([(key.read_bytes(), cert.read_bytes())])
    port = server.add_secure_port("127.0.0.1:0", credentials)
    server.start()
    try:
        servicer.set(SERVICE, health_pb2.HealthCheckResponse.SERVING)
        with_ca = {**os.environ, "HINDSIGHT_HEALTHCHECK_CA_FILE": str(cert)}
        assert healthcheck("grpcs", f"localhost:{port}", SERVICE, env=with_ca).returncode == 0
        # The system's roots do not know a self-signed certificate; plaintext gets no answer from TLS.
        assert healthcheck("grpcs", f"localhost:{port}", SERVICE).returncode == 1
        assert healthcheck("grpc", f"localhost:{port}", SERVICE).returncode == 1
        missing = {**os.environ, "HINDSIGHT_HEALTHCHECK_CA_FILE": str(tmp_path / "absent.crt")}
        unreadable = healthcheck("grpcs", f"localhost:{port}", SERVICE, env=missing)
        assert unreadable.returncode == 1 and "cannot read a TLS file" in unreadable.stderr
    finally:
        server.stop(grace=None)
