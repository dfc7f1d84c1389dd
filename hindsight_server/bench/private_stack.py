"""A throw-away embedded stack for benchmarks: `hindsight up` on a temporary data directory and a free
port, stopped (and its data removed) afterwards."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import sys
import tempfile
import time
from collections.abc import AsyncIterator

from hindsight_server.stack.supervisor import READY_BANNER


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.asynccontextmanager
async def private_stack(timeout_s: float = 120) -> AsyncIterator[str]:
    """Yields the gRPC target of a fresh stack."""
    port = _free_port()
    with tempfile.TemporaryDirectory(prefix="hindsight-bench-") as data_dir:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "hindsight_server",
            "up",
            "--data-dir",
            data_dir,
            "--port",
            str(port),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
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
