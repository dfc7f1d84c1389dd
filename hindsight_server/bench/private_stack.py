"""A throw-away embedded stack for benchmarks: `hindsight up` on a temporary data directory and a free
port, stopped (and its data removed) afterwards."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Mapping, Sequence

from hindsight_server.stack.supervisor import READY_BANNER


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.asynccontextmanager
async def private_stack(
    *,
    inference: bool = True,
    grpc_port: int = 0,
    timeout_s: float = 120,
    up_args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
) -> AsyncIterator[str]:
    """Yields the gRPC target of a fresh stack (with its own Triton on free ports unless inference=False);
    `up_args` are added to `hindsight up` (e.g. --servers 3), `env` to its environment."""
    port = _free_port()
    with tempfile.TemporaryDirectory(prefix="hindsight-bench-") as data_dir:
        child_env = {
            **os.environ,
            "HINDSIGHT_STACK__INFERENCE": "true" if inference else "false",
            "HINDSIGHT_MCP__PORT": str(_free_port()),  # never the port of a `make up` beside it
            "HINDSIGHT_CONSOLE__PORT": str(_free_port()),
            # Benchmark and evaluation data carry old timestamps: the lifecycle jobs would expire,
            # demote and purge it while it is measured.
            "HINDSIGHT_JOBS__ENABLED": "false",
            **(env or {}),
        }
        if inference:
            child_env.update(
                HINDSIGHT_STACK__TRITON_HTTP_PORT=str(_free_port()),
                HINDSIGHT_STACK__TRITON_GRPC_PORT=str(grpc_port or _free_port()),
                HINDSIGHT_STACK__TRITON_METRICS_PORT=str(_free_port()),
            )
        argv = ["-m", "hindsight_server", "up", "--data-dir", data_dir, "--port", str(port), *up_args]
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            *argv,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env=child_env,
        )
        assert process.stdout is not None
        output = []
        deadline = time.monotonic() + timeout_s
        try:
            while time.monotonic() < deadline:
                line = (await asyncio.wait_for(process.stdout.readline(), timeout_s)).decode()
                output.append(line)
                if not line:
                    raise RuntimeError("the stack exited:\n" + "".join(output))
                if line.startswith(READY_BANNER):
                    break
            drain = asyncio.create_task(_drain(process.stdout))
            yield f"127.0.0.1:{port}"
        finally:
            if process.returncode is None:
                process.send_signal(signal.SIGINT)
                await process.wait()
        await drain


async def _drain(stream: asyncio.StreamReader) -> None:
    while await stream.readline():
        pass
