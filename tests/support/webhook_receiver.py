"""A real HTTP/1.1 webhook receiver on loopback (asyncio streams), whose behaviour a test sets: down (not
listening), slow (answers after a delay), failing (a status of the test's choosing) or well (200). It
keeps every request it read, with its headers and body, in the order it answered them."""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
from dataclasses import dataclass, field
from typing import Any

from standardwebhooks.webhooks import Webhook

_MAX_HEAD = 64 * 1024


@dataclass(frozen=True)
class Received:
    headers: dict[str, str]
    body: bytes
    status: int  # what the receiver answered (0: it did not, being slow past the sender's timeout)

    @property
    def event(self) -> dict[str, Any]:
        document: dict[str, Any] = json.loads(self.body)
        return document

    def verified(self, secret: str) -> dict[str, Any]:
        """The body, once the reference library verified its signature with `secret`."""
        document: dict[str, Any] = Webhook(secret).verify(self.body, self.headers)
        return document


@dataclass
class WebhookReceiver:
    port: int = 0
    host: str = "127.0.0.1"  # "localhost": every address the name has (and https with a certificate for it)
    tls: ssl.SSLContext | None = None
    status: int = 200  # what to answer
    delay_s: float = 0.0  # slow: waits this long, then closes without an answer
    pause_s: float = 0.0  # waits this long, then answers
    received: list[Received] = field(default_factory=list)
    _server: asyncio.Server | None = None

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.host}:{self.port}/hooks"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, self.host, self.port, ssl=self.tls)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        """Down: the port refuses connections (until start() listens on it again)."""
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)
            self._server = None

    def delivered(self) -> list[Received]:
        """The requests answered 2xx."""
        return [r for r in self.received if 200 <= r.status < 300]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            if len(head) > _MAX_HEAD:
                return
            lines = head.decode("latin-1").split("\r\n")
            headers = {}
            for line in lines[1:]:
                if ":" in line:
                    name, _, value = line.partition(":")
                    headers[name.strip().lower()] = value.strip()
            body = await reader.readexactly(int(headers.get("content-length", "0")))
            status, delay_s = self.status, self.delay_s
            if delay_s:
                self.received.append(Received(headers, body, 0))
                await asyncio.sleep(delay_s)
                return  # the sender gave up already: no answer
            if self.pause_s:
                await asyncio.sleep(self.pause_s)
            self.received.append(Received(headers, body, status))
            answer = b"ok" if status < 300 else b"no"
            writer.write(
                f"HTTP/1.1 {status} X\r\ncontent-length: {len(answer)}\r\nconnection: close\r\n\r\n".encode()
                + answer
            )
            await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            pass
        finally:
            writer.close()
