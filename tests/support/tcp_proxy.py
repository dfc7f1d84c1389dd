"""A loopback TCP proxy to a unix socket that a test can cut and restore: a real database outage
(connections reset, new ones refused) without stopping the database the rest of the session uses."""

from __future__ import annotations

import asyncio
import contextlib


class CuttableProxy:
    def __init__(self, unix_socket: str) -> None:
        self._unix_socket = unix_socket
        self._server: asyncio.Server | None = None
        self._links: set[asyncio.StreamWriter] = set()
        self.port = 0

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _accept(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        try:
            upstream_reader, upstream_writer = await asyncio.open_unix_connection(self._unix_socket)
        except OSError:
            client_writer.close()
            return
        self._links.update((client_writer, upstream_writer))
        await asyncio.gather(
            self._pipe(client_reader, upstream_writer), self._pipe(upstream_reader, client_writer)
        )

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        writer.close()
        self._links.discard(writer)

    async def cut(self) -> None:
        """Resets every open connection and refuses new ones until restore()."""
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        for writer in list(self._links):
            transport = writer.transport
            transport.abort()
        self._links.clear()

    async def restore(self) -> None:
        await self.start()

    async def close(self) -> None:
        await self.cut()
