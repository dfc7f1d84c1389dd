"""An ASGI middleware that refuses request bodies over a size with 413, before anything reads them whole.

The MCP SDK's streamable HTTP transport reads each POST's body into memory at once, and uvicorn sets no
limit: without this, one request could hold all of the gateway's memory. A declared Content-Length over
the limit is refused before one byte of the body is read. Otherwise the body is read here, counted chunk
by chunk, and handed on only when it ended within the limit; past it the request gets a 413 and the SDK's
transport never sees it. The rest of such a body is read and dropped up to a bound, so that an ordinary
client, which sends its whole body before it reads, gets the 413; past the bound the connection is closed.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["BodyLimit"]

# After a 413, at most this many times the limit is read and dropped before the connection is closed.
_DRAIN_FACTOR = 8


class BodyLimit:
    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if _content_length(scope) > self.max_bytes:
            await _refuse(send, 413, self._too_large())
            return
        chunks: list[bytes] = []
        received = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away before the body ended: nothing to answer
            chunk = message.get("body", b"")
            received += len(chunk)
            if received > self.max_bytes:
                ended = await _drain(receive, message, _DRAIN_FACTOR * self.max_bytes)
                await _refuse(send, 413, self._too_large(), close=not ended)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        await self.app(scope, _replay(b"".join(chunks), receive), send)

    def _too_large(self) -> str:
        return f"request body over {self.max_bytes} bytes (the gateway's max_body_bytes)"


def _content_length(scope: Scope) -> int:
    """The declared length; 0 without one (then the body is counted as it comes). The HTTP server has
    already refused a Content-Length that is not a number."""
    for name, value in scope["headers"]:
        if name == b"content-length":
            return int(value)
    return 0


def _replay(body: bytes, receive: Receive) -> Receive:
    """The body as one message, then the client's own messages (a disconnect) as they come."""
    pending = [{"type": "http.request", "body": body, "more_body": False}]

    async def replayed() -> Message:
        return pending.pop() if pending else await receive()

    return replayed


async def _drain(receive: Receive, last: Message, budget: int) -> bool:
    """Reads and drops the rest of the body, at most `budget` bytes; whether the body ended."""
    message = last
    while message.get("more_body", False):
        if budget <= 0:
            return False
        message = await receive()
        if message["type"] != "http.request":
            return False
        budget -= len(message.get("body", b""))
    return True


async def _refuse(send: Send, status: int, reason: str, *, close: bool = False) -> None:
    body = reason.encode()
    headers = [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode())]
    if close:  # the rest of the body is not read: the connection cannot carry another request
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
