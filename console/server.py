"""The console over HTTP(S) with uvicorn, started and stopped by its owner (the CLI, a test, the
benchmark): binds first (port 0: a free one), then serves."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Iterator

import uvicorn

from console.app import build_app
from console.config import ConsoleSettings

__all__ = ["ConsoleServer"]


class _Uvicorn(uvicorn.Server):
    """Tells when it listens; leaves signals to its owner."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.listening = asyncio.Event()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            self.listening.set()

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class ConsoleServer:
    def __init__(self, settings: ConsoleSettings) -> None:
        self.settings = settings
        self.app = build_app(settings)
        self._server = _Uvicorn(
            uvicorn.Config(
                self.app,
                log_level="warning",
                access_log=False,
                lifespan="on",
                timeout_graceful_shutdown=5,
                ssl_certfile=settings.tls_cert_file or None,
                ssl_keyfile=settings.tls_key_file or None,
            )
        )
        self._task: asyncio.Task[None] | None = None
        self.port = settings.port

    @property
    def url(self) -> str:
        return self.settings.model_copy(update={"port": self.port}).url

    async def start(self) -> str:
        """Binds (OSError when the port is taken), serves, and returns the URL once it listens."""
        family = socket.AF_INET6 if ":" in self.settings.host else socket.AF_INET
        # IPPROTO_TCP: asyncio sets TCP_NODELAY only on sockets that name it (gateway_mcp/server.py).
        sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((self.settings.host.strip("[]"), self.settings.port))
        except OSError:
            sock.close()
            raise
        self.port = int(sock.getsockname()[1])
        self._task = asyncio.create_task(self._server.serve(sockets=[sock]), name="console-http")
        listening = asyncio.create_task(self._server.listening.wait())
        await asyncio.wait({self._task, listening}, return_when=asyncio.FIRST_COMPLETED)
        if not listening.done():
            listening.cancel()
            raise RuntimeError(f"the console stopped while starting: {self._task.exception()!r}")
        return self.url

    async def wait(self) -> None:
        if self._task is not None:
            await asyncio.shield(self._task)

    async def stop(self) -> None:
        if self._task is None:
            return
        self._server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
