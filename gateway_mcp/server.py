"""The two transports: stdio (one agent, the tenant from the configuration) and streamable HTTP
(stateless, so any replica behind a load balancer answers any request; bearer tokens name the tenant)."""

from __future__ import annotations

import asyncio
import contextlib
import math
import socket
from collections.abc import AsyncIterator, Iterator

import uvicorn
from mcp.server.auth.middleware.auth_context import AuthContextMiddleware
from mcp.server.auth.middleware.bearer_auth import BearerAuthBackend, RequireAuthMiddleware
from mcp.server.auth.routes import build_resource_metadata_url, create_protected_resource_routes
from mcp.server.stdio import stdio_server
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from pydantic import AnyHttpUrl
from starlette.applications import Starlette
from starlette.authentication import AuthenticationError
from starlette.middleware import Middleware
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.requests import HTTPConnection, Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp

from gateway_mcp.app import build_server
from gateway_mcp.auth import (
    BearerTokens,
    Introspection,
    IntrospectionBusy,
    TokenTenants,
    bearer_caller,
    fixed_caller,
)
from gateway_mcp.body_limit import BodyLimit
from gateway_mcp.config import HEALTH_PATH, GatewaySettings, is_loopback
from gateway_mcp.origins import LOOPBACK_ORIGINS, OriginCheck

__all__ = ["GatewayStartError", "HttpGateway", "http_app", "serve_stdio"]


class GatewayStartError(RuntimeError):
    pass


async def serve_stdio(settings: GatewaySettings) -> None:
    """Serves one client on stdin/stdout until it closes them."""
    server = build_server(settings, fixed_caller(settings.tenant, settings.agent_id))
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


def _transport_security(settings: GatewaySettings) -> TransportSecuritySettings | None:
    """On loopback, only local Host headers (the SDK's own default for local servers: a page cannot
    reach the gateway through DNS rebinding). Off loopback the Host is whatever the load balancer
    forwards, so the SDK's check (Host and Origin together) is off there, and OriginCheck validates the
    Origin on every address."""
    if not is_loopback(settings.host):
        return None
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"],
        allowed_origins=list(allowed_origins(settings)),
    )


def allowed_origins(settings: GatewaySettings) -> tuple[str, ...]:
    """The browser origins that may call the gateway: the configured ones, and loopback pages when the
    gateway itself is on loopback."""
    local = LOOPBACK_ORIGINS if is_loopback(settings.host) else ()
    return (*local, *settings.allowed_origins)


async def _health(request: Request) -> Response:
    return PlainTextResponse("ok")


def _introspection(settings: GatewaySettings) -> Introspection | None:
    if not settings.introspection_url:
        return None
    return Introspection(
        settings.introspection_url,
        resource=settings.resource_url,
        tenant_claim=settings.tenant_claim,
        agent_claim=settings.agent_claim,
        subject_claim=settings.subject_claim,
        client_id=settings.introspection_client_id,
        client_secret=settings.introspection_client_secret,
        timeout_s=settings.deadline_s,
        new_tokens_per_s=settings.new_token_introspections_per_s,
        new_token_burst=settings.new_token_introspection_burst,
    )


def _authentication_error(connection: HTTPConnection, error: AuthenticationError) -> Response:
    """The bearer check could not decide now (IntrospectionBusy): retry later, not a refusal."""
    retry_after_s = error.retry_after_s if isinstance(error, IntrospectionBusy) else 1.0
    return JSONResponse(
        {"error": "temporarily_unavailable", "error_description": str(error)},
        status_code=503,
        headers={"Retry-After": str(max(1, math.ceil(retry_after_s)))},
    )


def http_app(settings: GatewaySettings) -> Starlette:
    """The ASGI app: the MCP endpoint at settings.path (behind the bearer check when tokens are
    configured) and an unauthenticated liveness probe at /healthz."""
    settings.require_safe_http()
    caller_of = (
        bearer_caller if settings.uses_bearer_tokens else fixed_caller(settings.tenant, settings.agent_id)
    )
    manager = StreamableHTTPSessionManager(
        app=build_server(settings, caller_of),
        # Stateless and plain JSON answers: no session to pin to a replica, no SSE stream to hold.
        stateless=True,
        json_response=True,
        security_settings=_transport_security(settings),
    )
    # The SDK reads a POST's whole body into memory: refuse big ones before it does.
    endpoint: ASGIApp = BodyLimit(StreamableHTTPASGIApp(manager), settings.max_body_bytes)
    # Outermost: a page of another origin is refused before its token is even looked at.
    middleware = [Middleware(OriginCheck, allowed=allowed_origins(settings))]
    routes = [Route(HEALTH_PATH, _health, methods=["GET"])]
    introspection = _introspection(settings) if settings.uses_bearer_tokens else None
    if settings.uses_bearer_tokens:
        metadata_url = None
        if settings.authorization_servers:
            resource = AnyHttpUrl(settings.resource_url)
            routes += create_protected_resource_routes(
                resource,
                [AnyHttpUrl(url) for url in settings.authorization_servers],
                resource_name="hindsight",
            )
            metadata_url = build_resource_metadata_url(resource)
        endpoint = RequireAuthMiddleware(endpoint, required_scopes=[], resource_metadata_url=metadata_url)
        middleware += [
            Middleware(
                AuthenticationMiddleware,
                backend=BearerAuthBackend(BearerTokens(TokenTenants(settings.tokens), introspection)),
                on_error=_authentication_error,
            ),
            Middleware(AuthContextMiddleware),
        ]

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        try:
            async with manager.run():
                yield
        finally:
            if introspection is not None:
                await introspection.close()

    return Starlette(
        routes=[Route(settings.path, endpoint=endpoint), *routes],
        middleware=middleware,
        lifespan=lifespan,
    )


class _Uvicorn(uvicorn.Server):
    """Tells when it listens; leaves signals to its owner (the CLI) instead of taking over the process's."""

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


class HttpGateway:
    """Streamable HTTP on settings.host:port (0: a free port), started and stopped by its owner."""

    def __init__(self, settings: GatewaySettings) -> None:
        self.settings = settings
        self.app = http_app(settings)  # refuses an unsafe configuration before anything listens
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
        """Binds (OSError when the port is taken), serves, and returns the endpoint's URL once it listens."""
        family = socket.AF_INET6 if ":" in self.settings.host else socket.AF_INET
        # proto=IPPROTO_TCP matters: asyncio sets TCP_NODELAY only on sockets that name it, and without
        # it Nagle's algorithm and delayed ACKs added ~45 ms to every response (measured).
        sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((self.settings.host.strip("[]"), self.settings.port))
        except OSError:
            sock.close()
            raise
        self.port = int(sock.getsockname()[1])
        self._task = asyncio.create_task(self._server.serve(sockets=[sock]), name="mcp-http")
        listening = asyncio.create_task(self._server.listening.wait())
        await asyncio.wait({self._task, listening}, return_when=asyncio.FIRST_COMPLETED)
        if not listening.done():
            listening.cancel()
            raise GatewayStartError(f"the HTTP gateway stopped while starting: {self._task.exception()!r}")
        return self.url

    async def wait(self) -> None:
        """Returns when the server stops on its own."""
        if self._task is not None:
            await asyncio.shield(self._task)

    async def stop(self) -> None:
        if self._task is None:
            return
        self._server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
