"""Run a real `tritonserver` (the binary inside the PyTriton wheel) on a plain model repository.

The wheel ships `pytriton/tritonserver/bin/tritonserver`, its shared libraries in
`nvidia_pytriton.libs/`, the python backend and one python-backend stub per Python version.
`TritonServer` assembles a backend directory (backend + the stub matching this interpreter),
starts the binary in its own process group and names this interpreter's site-packages in
EMBEDDER_STUB_PYTHONPATH (so models import numpy/onnxruntime/tokenizers from the project venv),
waits until every expected model is READY and stops the whole group: SIGTERM, then SIGKILL
after a grace period.
Started from the main thread, the server also receives SIGTERM if this process dies (Linux
PR_SET_PDEATHSIG), so a killed parent leaves no tritonserver behind.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.util
import os
import shutil
import signal
import site
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

# Read by the model.py files: the python-backend stub runs Python isolated and ignores PYTHONPATH.
STUB_PYTHONPATH = "EMBEDDER_STUB_PYTHONPATH"
_PR_SET_PDEATHSIG = 1
_LOG_TAIL_LINES = 40
_POLL_S = 0.1


class TritonStartError(RuntimeError):
    """tritonserver exited or its models did not become ready in time; the message holds its log tail."""


@dataclass(frozen=True)
class TritonPorts:
    http: int = 8000
    grpc: int = 8001
    metrics: int = 8002

    @classmethod
    def free(cls, host: str = "127.0.0.1") -> TritonPorts:
        """Three ports the OS reports free right now (for tests and side-by-side servers)."""
        with contextlib.ExitStack() as stack:
            sockets = [stack.enter_context(socket.socket()) for _ in range(3)]
            for sock in sockets:
                sock.bind((host, 0))
            http, grpc, metrics = (sock.getsockname()[1] for sock in sockets)
        return cls(http=http, grpc=grpc, metrics=metrics)


@dataclass(frozen=True)
class TritonTls:
    """tritonserver's gRPC endpoint with TLS: its certificate and key (PEM); with `client_ca_file`,
    every client must present a certificate that CA signed (mTLS). The HTTP and metrics endpoints stay
    plaintext (readiness and Prometheus): keep them on loopback or a trusted network."""

    cert_file: Path
    key_file: Path
    client_ca_file: Path | None = None

    def flags(self) -> list[str]:
        flags = [
            "--grpc-use-ssl=true",
            f"--grpc-server-cert={self.cert_file.resolve()}",
            f"--grpc-server-key={self.key_file.resolve()}",
        ]
        if self.client_ca_file is not None:
            flags += [f"--grpc-root-cert={self.client_ca_file.resolve()}", "--grpc-use-ssl-mutual=true"]
        return flags


@dataclass(frozen=True)
class TritonOptions:
    model_repository: Path
    models: tuple[str, ...] = ("embed",)  # start() returns once all of these are READY
    ports: TritonPorts = field(default_factory=TritonPorts)
    address: str = "127.0.0.1"  # "0.0.0.0" in a container
    work_dir: Path | None = None  # backends/ and tritonserver.log; default: beside the repository
    ready_timeout_s: float = 60.0
    stop_timeout_s: float = 10.0
    grpc_tls: TritonTls | None = None  # None: plaintext gRPC


@dataclass(frozen=True)
class _Distribution:
    server_dir: Path
    libs_dir: Path

    @classmethod
    def from_pytriton(cls) -> _Distribution:
        spec = importlib.util.find_spec("pytriton")
        if spec is None or not spec.submodule_search_locations:
            raise TritonStartError("nvidia-pytriton is not installed (the `inference` extra)")
        root = Path(next(iter(spec.submodule_search_locations)))
        return cls(server_dir=root / "tritonserver", libs_dir=root.parent / "nvidia_pytriton.libs")

    def prepare_backends(self, work_dir: Path) -> Path:
        """A backend directory holding the python backend and the stub for this Python version."""
        python_dir = work_dir / "backends" / "python"
        python_dir.mkdir(parents=True, exist_ok=True)
        version = f"{sys.version_info.major}.{sys.version_info.minor}"
        stub = self.server_dir / "python_backend_stubs" / version / "triton_python_backend_stub"
        backend = self.server_dir / "backends" / "python"
        for source in (stub, backend / "libtriton_python.so", backend / "triton_python_backend_utils.py"):
            # Copy then rename: a stub of a server still shutting down keeps running its old inode,
            # where writing over the busy executable would fail (ETXTBSY).
            staged = python_dir / f".{source.name}.new"
            shutil.copy2(source, staged)
            os.replace(staged, python_dir / source.name)
        return python_dir.parent


def _die_with_parent() -> None:  # runs in the forked child: only a prctl call
    _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


_prctl = ctypes.CDLL(None, use_errno=True).prctl


class TritonServer:
    """One tritonserver process; `start()`/`stop()` may alternate (a restart reuses the same ports)."""

    def __init__(self, options: TritonOptions) -> None:
        self.options = options
        self._work_dir = options.work_dir or options.model_repository.parent
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def log_path(self) -> Path:
        return self._work_dir / "tritonserver.log"

    @property
    def grpc_url(self) -> str:
        return f"{self._client_host}:{self.options.ports.grpc}"

    @property
    def http_url(self) -> str:
        return f"http://{self._client_host}:{self.options.ports.http}"

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def _client_host(self) -> str:
        return "127.0.0.1" if self.options.address in ("0.0.0.0", "") else self.options.address

    def command(self) -> tuple[list[str], dict[str, str]]:
        """tritonserver's argv and environment, its backend directory made ready: what start() runs, and
        what a supervisor that keeps it as a child of its own (hindsight up) runs."""
        distribution = _Distribution.from_pytriton()
        backends = distribution.prepare_backends(self._work_dir)
        ports, address = self.options.ports, self.options.address
        command = [
            str(distribution.server_dir / "bin" / "tritonserver"),
            f"--model-repository={self.options.model_repository.resolve()}",
            f"--backend-directory={backends}",
            f"--http-address={address}",
            f"--http-port={ports.http}",
            f"--grpc-address={address}",
            f"--grpc-port={ports.grpc}",
            f"--metrics-address={address}",
            f"--metrics-port={ports.metrics}",
            "--allow-gpu-metrics=false",
            f"--exit-timeout-secs={max(1, int(self.options.stop_timeout_s) - 1)}",
        ]
        if self.options.grpc_tls is not None:
            command += self.options.grpc_tls.flags()
        env = dict(os.environ)
        env["LD_LIBRARY_PATH"] = _join_paths([str(distribution.libs_dir)], env.get("LD_LIBRARY_PATH"))
        env[STUB_PYTHONPATH] = os.pathsep.join(site.getsitepackages())
        return command, env

    def start(self) -> None:
        if self.running:
            raise TritonStartError(f"tritonserver already running (pid {self.pid})")
        command, env = self.command()
        in_main_thread = threading.current_thread() is threading.main_thread()
        with self.log_path.open("ab") as log:
            self._process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
                preexec_fn=_die_with_parent if in_main_thread else None,
            )
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """SIGTERM tritonserver, SIGKILL its process group after the grace period; idempotent."""
        process, self._process = self._process, None
        if process is None:
            return
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=self.options.stop_timeout_s)
            except subprocess.TimeoutExpired:
                _kill_group(process.pid)
                process.wait()
        _kill_group(process.pid)  # python-backend stubs that outlived their server

    def wait(self) -> int:
        """Block until tritonserver exits (for foreground use); returns its exit code."""
        if self._process is None:
            raise RuntimeError("tritonserver is not started")
        return self._process.wait()

    def log_tail(self, lines: int = _LOG_TAIL_LINES) -> str:
        if not self.log_path.exists():
            return ""
        with self.log_path.open(encoding="utf-8", errors="replace") as log:
            return "".join(deque(log, maxlen=lines))

    def __enter__(self) -> TritonServer:
        self.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.stop()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.options.ready_timeout_s
        while True:
            # Ready answers count only while this server runs: after it died on a port in use, whoever
            # holds that port answers them (hindsight up also checks that the port is its child's).
            ready = self._models_ready()
            assert self._process is not None
            code = self._process.poll()
            if code is not None:
                raise TritonStartError(f"tritonserver exited with code {code}; log tail:\n{self.log_tail()}")
            if ready:
                return
            if time.monotonic() > deadline:
                raise TritonStartError(
                    f"models {', '.join(self.options.models)} not ready after "
                    f"{self.options.ready_timeout_s:.0f} s; log tail:\n{self.log_tail()}"
                )
            time.sleep(_POLL_S)

    def _models_ready(self) -> bool:
        for model in self.options.models:
            try:
                with urllib.request.urlopen(f"{self.http_url}/v2/models/{model}/ready", timeout=1.0) as reply:
                    if reply.status != 200:
                        return False
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                return False
        return True


def _join_paths(first: list[str], rest: str | None) -> str:
    return os.pathsep.join([*first, *([rest] if rest else [])])


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
