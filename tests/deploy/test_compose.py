"""deploy/compose: the real Docker Compose binary validates the project (`config -q`, no daemon needed),
and what it resolves is checked against what the cluster needs: the services, their order, health
checks, volumes, published ports, and settings the real hindsight configuration classes accept."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from gateway_mcp.auth import hash_token
from gateway_mcp.config import GatewaySettings
from hindsight_server.config import load_settings
from tests.deploy.conftest import COMPOSE_DIR, REPO_ROOT

COMPOSE_FILE = COMPOSE_DIR / "compose.yaml"
GPU_FILE = COMPOSE_DIR / "compose.gpu.yaml"
ENV_EXAMPLE = COMPOSE_DIR / ".env.example"
SERVICES = {"postgres", "migrate", "triton", "memory-server", "nginx", "mcp-gateway", "otel-collector"}
# Services without an in-container health check, and why (asserted, so a new one must say why too).
NO_HEALTHCHECK = {
    "migrate": "one-shot: dependents wait for it to exit 0",
    "otel-collector": "distroless image: no shell or HTTP client inside to probe with",
}
EXAMPLE_TOKEN = "replace-me-example-token"  # the token whose hash .env.example carries


def compose(
    binary: Path, *args: str, files: tuple[Path, ...] = (COMPOSE_FILE,), env_file: Path | None = ENV_EXAMPLE
) -> subprocess.CompletedProcess[str]:
    command = [str(binary)]
    for file in files:
        command += ["-f", str(file)]
    if env_file is not None:
        command += ["--env-file", str(env_file)]
    return subprocess.run(
        [*command, *args], capture_output=True, text=True, timeout=60, check=False, cwd=COMPOSE_DIR
    )


def resolved(binary: Path, files: tuple[Path, ...] = (COMPOSE_FILE,)) -> dict[str, Any]:
    result = compose(binary, "config", "--format", "json", files=files)
    assert result.returncode == 0, result.stderr
    config: dict[str, Any] = json.loads(result.stdout)
    return config


def env_example() -> dict[str, str]:
    """The example's variables as compose reads them (single quotes: literal values)."""
    values = {}
    for line in ENV_EXAMPLE.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            values[key.strip()] = value.strip().strip("'")
    return values


@pytest.mark.parametrize("files", [(COMPOSE_FILE,), (COMPOSE_FILE, GPU_FILE)], ids=["cpu", "gpu"])
def test_config_is_valid(compose_binary: Path, files: tuple[Path, ...]) -> None:
    result = compose(compose_binary, "config", "-q", files=files)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("secret", ["POSTGRES_PASSWORD", "HINDSIGHT_MCP__TOKENS"])
def test_secrets_are_required(compose_binary: Path, tmp_path: Path, secret: str) -> None:
    """Without a secret the project refuses to resolve and says which one to set. (One missing at a
    time: with several, compose names whichever it meets first, in no fixed order.)"""
    given = {
        "POSTGRES_PASSWORD": "a-password",
        "HINDSIGHT_MCP__TOKENS": "'{\"" + "0" * 64 + '": "default"}\'',
    }
    env = tmp_path / "one-missing.env"
    env.write_text("".join(f"{name}={value}\n" for name, value in given.items() if name != secret))
    result = compose(compose_binary, "config", "-q", env_file=env)
    assert result.returncode != 0
    assert secret in result.stderr


def test_services_order_and_health(compose_binary: Path) -> None:
    services = resolved(compose_binary)["services"]
    assert set(services) == SERVICES
    for name, service in services.items():
        if name in NO_HEALTHCHECK:
            continue
        test = service.get("healthcheck", {}).get("test")
        assert test and not service["healthcheck"].get("disable"), f"{name} has no health check"
        assert service.get("restart") == "unless-stopped", name
    assert services["migrate"]["healthcheck"].get("disable") is True
    assert services["migrate"]["restart"] == "no"

    def waits_for(name: str) -> dict[str, str]:
        return {dep: spec["condition"] for dep, spec in services[name]["depends_on"].items()}

    assert waits_for("migrate") == {"postgres": "service_healthy"}
    assert waits_for("memory-server")["migrate"] == "service_completed_successfully"
    assert waits_for("nginx") == {"memory-server": "service_healthy"}
    assert waits_for("mcp-gateway") == {"nginx": "service_healthy"}
    # The servers' probe asks the standard health service about the memory service itself.
    assert services["memory-server"]["healthcheck"]["test"][-2:] == [
        "127.0.0.1:50051",
        "hindsight.v1.MemoryService",
    ]
    assert "/v2/health/ready" in services["triton"]["healthcheck"]["test"][-1]


def test_scaling_ports_and_volumes(compose_binary: Path) -> None:
    config = resolved(compose_binary)
    services = config["services"]
    assert services["memory-server"]["deploy"]["replicas"] == int(env_example()["HINDSIGHT_SERVERS"])
    # Replicas publish nothing themselves: clients reach them through nginx.
    assert "ports" not in services["memory-server"]
    published = {
        (name, port["target"]): port for name, svc in services.items() for port in svc.get("ports", [])
    }
    assert set(published) == {
        ("nginx", 50051),
        ("mcp-gateway", 8765),
        ("otel-collector", 4317),
        ("otel-collector", 4318),
    }
    assert {port["host_ip"] for port in published.values()} == {"127.0.0.1"}, "loopback unless asked"
    assert set(config["volumes"]) == {"pgdata", "triton-work"}
    data_mounts = [m for m in services["postgres"]["volumes"] if m["type"] == "volume"]
    assert data_mounts == [
        {"type": "volume", "source": "pgdata", "target": "/var/lib/postgresql/data", "volume": {}}
    ]
    nginx_mounts = {m["target"]: Path(m["source"]) for m in services["nginx"]["volumes"]}
    assert nginx_mounts["/etc/nginx/nginx.conf"].is_file()
    assert nginx_mounts["/etc/nginx/hindsight-upstream.conf"].is_file()


def test_gpu_override_reserves_a_gpu(compose_binary: Path) -> None:
    triton = resolved(compose_binary, (COMPOSE_FILE, GPU_FILE))["services"]["triton"]
    devices = triton["deploy"]["resources"]["reservations"]["devices"]
    assert devices == [{"capabilities": ["gpu"], "driver": "nvidia", "count": 1}]
    assert "--instance-kind=KIND_GPU" in triton["command"]
    assert triton["build"]["args"]["ONNXRUNTIME"].startswith("onnxruntime-gpu")


def test_server_environment_is_a_valid_configuration(
    compose_binary: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The servers' environment, as compose resolves it, is accepted by hindsight's own settings."""
    environment = resolved(compose_binary)["services"]["memory-server"]["environment"]
    for key in [k for k in os.environ if k.startswith("HINDSIGHT_")]:
        monkeypatch.delenv(key)
    for key, value in environment.items():
        monkeypatch.setenv(key, value)
    settings = load_settings()
    assert settings.database.dsn.startswith("postgresql://hindsight:")
    assert settings.database.dsn.endswith("@postgres:5432/hindsight")
    assert settings.inference.url == "triton:8001"
    assert settings.inference.english_model == "embed_en"


def test_gateway_environment_is_a_valid_configuration(
    compose_binary: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The MCP gateway binds every address, so it must have tokens: the example's are well formed."""
    environment = resolved(compose_binary)["services"]["mcp-gateway"]["environment"]
    for key, value in environment.items():
        monkeypatch.setenv(key, value)
    gateway = GatewaySettings()
    gateway.require_safe_http()  # raises without tokens on 0.0.0.0
    assert gateway.targets == ("nginx:50051",)
    assert gateway.tokens == {hash_token(EXAMPLE_TOKEN): "default"}


def test_dockerfile_copies_what_exists() -> None:
    """The build context is the repository root: every COPY source (outside the build stage's
    --from) must exist, and the ignore file must not hide it."""
    dockerfile = (COMPOSE_DIR / "Dockerfile").read_text()
    sources = [
        part
        for line in dockerfile.splitlines()
        if line.startswith("COPY ") and "--from=" not in line
        for part in line.split()[1:-1]
    ]
    assert sources, "no COPY found"
    for source in sources:
        assert (REPO_ROOT / source).exists(), source
    allowed = {
        line[1:].rstrip("/")
        for line in (COMPOSE_DIR / "Dockerfile.dockerignore").read_text().splitlines()
        if line.startswith("!")
    }
    for source in sources:
        # A file is in the context when it, or a folder above it, is let in (`!proto/` lets in proto/*).
        path = Path(source.rstrip("/"))
        assert {str(p) for p in (path, *path.parents)} & allowed, (
            f"{source} is excluded from the build context"
        )
    # Debian's own Python 3.11 (see README "Why Debian's Python"), never a python: base image.
    assert re.findall(r"^FROM (\S+)", dockerfile, re.MULTILINE) == [
        "debian:${DEBIAN_RELEASE}-slim",
        "debian:${DEBIAN_RELEASE}-slim",
    ]
