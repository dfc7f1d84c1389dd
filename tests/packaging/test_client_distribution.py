"""The client distribution (proto/, hindsight-memory-client) installs alone: its wheel carries the stubs its
build generates, `hindsight.client` and `py.typed`, requires only what they import, and imports in a venv
that holds its requirements and nothing else. The server distribution (the root) requires it by name.

Offline by design (no index is consulted):
- The wheel is built from a copy of proto/ without generated files, as a clean checkout has it, with
  `pip wheel --no-build-isolation`: this venv's grpcio-tools and mypy-protobuf generate the stubs. They are
  the versions [build-system] pins (test_the_generators_are_pinned_alike checks it), so the wheel is the
  one an isolated `pip install ./proto` builds with the generators it downloads.
- The fresh venv is `python -m venv --without-pip`, without system site-packages: a --system-site-packages
  venv sees the base interpreter's packages, so a missing requirement could pass unnoticed. The wheel goes in
  with `pip --python ... --no-deps --no-index`. Its requirements, followed transitively through the
  metadata, are then linked in file by file (each distribution's RECORD) from this venv, where they are
  installed already, and nothing else is: an import the metadata does not declare fails there as it would
  on a user's machine, and `pip check` there proves the declared requirements are met.
"""

from __future__ import annotations

import email.message
import email.parser
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

REPO_ROOT = Path(__file__).resolve().parents[2]
PROTO_DIR = REPO_ROOT / "proto"
CLIENT = "hindsight-memory-client"
SERVER = "hindsight-memory-server"
# The server's heavy parts: none may be a requirement of the client, nor importable beside it.
SERVER_ONLY = ("asyncpg", "numpy", "tritonclient", "mcp", "mcp-types", "pgvector", "nvidia-pytriton")
NOT_IMPORTABLE = (
    "asyncpg",
    "numpy",
    "tritonclient",
    "mcp",
    "mcp_types",
    "pgvector",
    "google.rpc",
    "opentelemetry",
    "hindsight_server",
    "gateway_mcp",
    "embedder",
)
GENERATORS = ("grpcio-tools", "mypy-protobuf")
TIMEOUT_S = 120


@dataclass(frozen=True)
class Built:
    wheel: Path
    venv_python: Path
    site_packages: Path


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}


def _run(*args: str | Path, cwd: Path) -> str:
    done = subprocess.run(
        [str(a) for a in args], cwd=cwd, env=_env(), capture_output=True, text=True, timeout=TIMEOUT_S
    )
    assert done.returncode == 0, f"{' '.join(map(str, args))}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def _metadata(wheel: Path) -> email.message.Message:
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        return email.parser.Parser().parsestr(archive.read(name).decode())


def _requires(wheel: Path) -> list[Requirement]:
    return [Requirement(line) for line in _metadata(wheel).get_all("Requires-Dist") or []]


def _applies(requirement: Requirement, extras: frozenset[str]) -> bool:
    marker = requirement.marker
    return marker is None or any(marker.evaluate({"extra": extra}) for extra in extras | {""})


def _closure(requirements: list[Requirement]) -> dict[str, importlib.metadata.Distribution]:
    """The distributions `requirements` need, transitively, as installed in this venv (each version checked
    against every specifier that asked for it)."""
    found: dict[str, importlib.metadata.Distribution] = {}
    followed: set[tuple[str, frozenset[str]]] = set()
    pending = [(r, frozenset[str]()) for r in requirements]
    while pending:
        requirement, parent_extras = pending.pop()
        if not _applies(requirement, parent_extras):
            continue
        name = canonicalize_name(requirement.name)
        dist = found.setdefault(name, importlib.metadata.distribution(name))
        assert requirement.specifier.contains(dist.version, prereleases=True), (
            f"{requirement} is not met by {name} {dist.version} in this venv"
        )
        extras = frozenset(requirement.extras)
        if (name, extras) not in followed:
            followed.add((name, extras))
            pending.extend((Requirement(r), extras) for r in dist.requires or [])
    return found


def _link(dist: importlib.metadata.Distribution, site_packages: Path) -> None:
    """Installs `dist` into `site_packages` by linking each file of its RECORD (scripts outside
    site-packages and byte code are left out)."""
    assert dist.files, f"{dist.metadata['Name']} has no RECORD"
    for file in dist.files:
        if file.parts[0] == ".." or "__pycache__" in file.parts:
            continue
        source = Path(str(dist.locate_file(file)))
        target = site_packages / file
        if not source.exists() or target.exists():
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.symlink_to(source)


def _clean_copy(destination: Path) -> Path:
    """proto/ as a clean checkout has it: no generated stubs, no build output."""
    ignored = shutil.ignore_patterns(
        "*_pb2.py", "*_pb2_grpc.py", "*_pb2.pyi", "*_pb2_grpc.pyi", "__pycache__", "build", "*.egg-info"
    )
    return Path(shutil.copytree(PROTO_DIR, destination, ignore=ignored))


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Built]:
    root = tmp_path_factory.mktemp("client-distribution")
    source = _clean_copy(root / "proto")
    assert not list(source.rglob("*_pb2*")), "the copy must hold no generated stub"
    pip = (sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input")
    offline = ("--quiet", "--no-deps", "--no-index")
    _run(*pip, "wheel", *offline, "--no-build-isolation", source, "-w", root / "dist", cwd=root)
    (wheel,) = (root / "dist").glob("*.whl")

    venv = root / "venv"
    _run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=root)
    venv_python = venv / "bin" / "python"
    _run(*pip, "--python", venv_python, "install", *offline, wheel, cwd=root)
    purelib = "import sysconfig; print(sysconfig.get_path('purelib'))"
    site_packages = Path(_run(venv_python, "-I", "-c", purelib, cwd=root).strip())
    for dist in _closure([r for r in _requires(wheel) if _applies(r, frozenset())]).values():
        _link(dist, site_packages)
    yield Built(wheel, venv_python, site_packages)


def test_the_wheel_carries_the_generated_stubs_the_client_and_py_typed(built: Built) -> None:
    with zipfile.ZipFile(built.wheel) as archive:
        names = set(archive.namelist())
    for expected in (
        "hindsight/__init__.py",
        "hindsight/client.py",
        "hindsight/py.typed",
        "hindsight/v1/__init__.py",
        "hindsight/v1/memory.proto",
        "hindsight/v1/memory_pb2.py",
        "hindsight/v1/memory_pb2.pyi",
        "hindsight/v1/memory_pb2_grpc.py",
        "hindsight/v1/memory_pb2_grpc.pyi",
        "hindsight/v1/webhooks.proto",
        "hindsight/v1/webhooks_pb2.py",
        "hindsight/v1/webhooks_pb2_grpc.py",
        "hindsight/ops/__init__.py",
        "hindsight/ops/v1/__init__.py",
        "hindsight/ops/v1/ops.proto",
        "hindsight/ops/v1/ops_pb2.py",
        "hindsight/ops/v1/ops_pb2.pyi",
        "hindsight/ops/v1/ops_pb2_grpc.py",
        "hindsight/ops/v1/ops_pb2_grpc.pyi",
    ):
        assert expected in names, f"{expected} is missing from {built.wheel.name}"
    top_level = {name.split("/", 1)[0] for name in names}
    assert {t for t in top_level if not t.endswith(".dist-info")} == {"hindsight"}, top_level


def test_the_wheel_requires_only_what_the_client_imports(built: Built) -> None:
    metadata = _metadata(built.wheel)
    assert metadata["Name"] == CLIENT
    requirements = _requires(built.wheel)
    names = {canonicalize_name(r.name) for r in requirements}
    assert not names & {canonicalize_name(n) for n in SERVER_ONLY}, names
    core = {canonicalize_name(r.name) for r in requirements if _applies(r, frozenset())}
    assert core == {"grpcio", "grpcio-health-checking", "protobuf"}, core
    # Nor does anything they need in turn pull a server part in.
    assert not set(_closure(requirements)) & {canonicalize_name(n) for n in SERVER_ONLY}
    # hindsight.telemetry (in the package, imported by the server and the gateway, not by the client) needs
    # the SDK: behind the "telemetry" extra.
    telemetry = {canonicalize_name(r.name) for r in requirements if r.marker and not _applies(r, frozenset())}
    assert {"opentelemetry-api", "opentelemetry-sdk"} <= telemetry
    assert "telemetry" in (metadata.get_all("Provides-Extra") or [])


def test_the_runtime_floors_are_those_the_generated_code_checks(built: Built) -> None:
    """memory_pb2.py refuses a protobuf runtime older than its gencode; memory_pb2_grpc.py an older grpcio."""
    with zipfile.ZipFile(built.wheel) as archive:
        pb2 = archive.read("hindsight/v1/memory_pb2.py").decode()
        pb2_grpc = archive.read("hindsight/v1/memory_pb2_grpc.py").decode()
    gencode = re.search(r"ValidateProtobufRuntimeVersion\(\s*[\w.]+,\s*(\d+),\s*(\d+),\s*(\d+),", pb2)
    grpc_generated = re.search(r"GRPC_GENERATED_VERSION = '([\d.]+)'", pb2_grpc)
    assert gencode and grpc_generated
    floors = {"protobuf": Version(".".join(gencode.groups())), "grpcio": Version(grpc_generated.group(1))}
    server = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    for origin, requirements in (("client", _requires(built.wheel)), ("server", map(Requirement, server))):
        declared: dict[str, SpecifierSet] = {canonicalize_name(r.name): r.specifier for r in requirements}
        for name, floor in floors.items():
            lowest = [Version(s.version) for s in declared[name] if s.operator == ">="]
            assert lowest and lowest[0] >= floor, (
                f"the {origin} requires {name}{declared[name]}; stubs: >={floor}"
            )


def test_the_client_imports_where_only_its_requirements_are(built: Built) -> None:
    probe = f"""
import importlib, json
import hindsight.client
from hindsight.v1 import memory_pb2, memory_pb2_grpc
from hindsight.ops.v1 import ops_pb2, ops_pb2_grpc
missing = []
for name in {list(NOT_IMPORTABLE)!r}:
    try:
        importlib.import_module(name)
    except ImportError:
        missing.append(name)
print(json.dumps({{
    "stubs": memory_pb2.__file__,
    "client": hindsight.client.__file__,
    "service": memory_pb2.DESCRIPTOR.services_by_name["MemoryService"].full_name,
    "stub_class": memory_pb2_grpc.MemoryServiceStub.__name__,
    "ops": ops_pb2.DESCRIPTOR.services_by_name["Ops"].full_name,
    "ops_stub_class": ops_pb2_grpc.OpsStub.__name__,
    "missing": missing,
}}))
"""
    # -I: neither the working directory nor PYTHONPATH nor the user's site-packages is on the path.
    seen = json.loads(_run(built.venv_python, "-I", "-c", probe, cwd=built.site_packages.parent))
    assert Path(seen["stubs"]).parent == built.site_packages / "hindsight" / "v1"
    assert Path(seen["client"]).parent == built.site_packages / "hindsight"
    assert seen["service"] == "hindsight.v1.MemoryService"
    assert seen["stub_class"] == "MemoryServiceStub"
    assert (seen["ops"], seen["ops_stub_class"]) == ("hindsight.ops.v1.Ops", "OpsStub")
    assert seen["missing"] == list(NOT_IMPORTABLE), "importable beside the client alone"
    pip = (sys.executable, "-m", "pip", "--disable-pip-version-check", "--python", built.venv_python)
    _run(*pip, "check", cwd=built.site_packages.parent)


def test_the_generators_are_pinned_alike() -> None:
    """The client's [build-system] pins the code generators; the dev extra (`make proto`) pins the same, and
    this venv (which builds the wheel above without isolation) has them."""
    client = tomllib.loads((PROTO_DIR / "pyproject.toml").read_text())
    server = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    build: dict[str, Requirement] = {
        canonicalize_name(Requirement(r).name): Requirement(r) for r in client["build-system"]["requires"]
    }
    dev: dict[str, Requirement] = {
        canonicalize_name(Requirement(r).name): Requirement(r)
        for r in server["project"]["optional-dependencies"]["dev"]
    }
    for name in GENERATORS:
        pins = [s for s in build[name].specifier if s.operator == "=="]
        assert pins, f"{name} is not pinned in proto/pyproject.toml's [build-system]: {build[name]}"
        assert dev[name].specifier == build[name].specifier, f"dev: {dev[name]}, build: {build[name]}"
        installed = importlib.metadata.version(name)
        assert build[name].specifier.contains(installed), (
            f"{name} {installed} here; the build pins {build[name]}"
        )


def test_the_server_requires_the_client_by_name_and_numpy_below_2_only_for_inference() -> None:
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    assert project["project"]["name"] == SERVER
    core = [Requirement(r) for r in project["project"]["dependencies"]]
    (client,) = [r for r in core if canonicalize_name(r.name) == CLIENT]
    version = tomllib.loads((PROTO_DIR / "pyproject.toml").read_text())["project"]["version"]
    assert client.specifier.contains(version) and "telemetry" in client.extras
    # The server's own packages only: `hindsight` comes from the client distribution.
    include = project["tool"]["setuptools"]["packages"]["find"]["include"]
    assert not [p for p in include if p == "hindsight" or p.startswith("hindsight.")], include
    (numpy,) = [r for r in core if r.name == "numpy"]
    assert numpy.specifier.contains("2.0.0"), f"the core install caps numpy: {numpy}"
    inference = [Requirement(r) for r in project["project"]["optional-dependencies"]["inference"]]
    assert any(r.name == "numpy" and not r.specifier.contains("2.0.0") for r in inference)
    # The web console's pages (Jinja2) are an extra of their own: the memory server does not need them.
    console = [Requirement(r).name for r in project["project"]["optional-dependencies"]["console"]]
    assert console == ["jinja2"] and "jinja2" not in {r.name for r in core}
