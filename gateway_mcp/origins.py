"""The Origin check the MCP transport specification requires of every server ("MUST validate the
Origin header ... if present and invalid, respond 403"): a web page the user visits must not drive the
gateway through the user's browser (DNS rebinding, cross-site requests). Requests without an Origin
(SDK clients, agents, curl) are not from a browser page and pass; those with one pass only when it is
allowed: `mcp.allowed_origins` (exact origins, or `scheme://host:*` for any port of a host)."""

from __future__ import annotations

from collections.abc import Sequence

from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["OriginCheck", "origin_allowed"]

# Loopback pages may call a loopback gateway (local tools, the MCP Inspector's web UI).
LOOPBACK_ORIGINS = ("http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*")


def origin_allowed(origin: str | None, allowed: Sequence[str]) -> bool:
    """True for no Origin, an allowed one, or one matching `scheme://host:*` on any port."""
    if not origin:
        return True
    for pattern in allowed:
        if origin == pattern:
            return True
        if (
            pattern.endswith(":*")
            and origin.startswith(pattern[:-1])
            and origin[len(pattern) - 1 :].isdigit()
        ):
            return True
    return False


class OriginCheck:
    """ASGI middleware: 403 for an HTTP request whose Origin is not allowed."""

    def __init__(self, app: ASGIApp, allowed: Sequence[str]) -> None:
        self._app = app
        self._allowed = tuple(allowed)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            origin = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"origin"), None)
            if not origin_allowed(origin, self._allowed):
                refused = PlainTextResponse(
                    f"Origin {origin!r} is not allowed (mcp.allowed_origins)", status_code=403
                )
                await refused(scope, receive, send)
                return
        await self._app(scope, receive, send)
