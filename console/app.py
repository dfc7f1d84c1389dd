"""The console's ASGI app: routes, the security headers, the static files; the gRPC backend lives in
its lifespan (or is given, by a test or the benchmark)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from console.backend import Backend
from console.config import HEALTH_PATH, ConsoleSettings
from console.i18n import translate
from console.pages import Console
from console.sessions import LoginThrottle, SessionTable
from console.web import Pages, SecurityHeaders, signed_in

__all__ = ["build_app"]

_STATIC = Path(__file__).parent / "static"


def build_app(settings: ConsoleSettings) -> Starlette:
    backend = Backend(settings)
    pages = Pages(
        SessionTable(settings.max_sessions, settings.session_idle_s),
        secure_cookies=settings.cookie_secure or settings.serves_tls,
    )
    console = Console(pages, backend, LoginThrottle(settings.login_attempts_per_minute))

    async def health(request: Request) -> Response:
        return PlainTextResponse("ok")

    async def home(request: Request) -> Response:
        return RedirectResponse("/memories", status_code=303)

    async def not_found(request: Request, exc: Exception) -> Response:
        message = translate(pages.language(request), "error.not_found")
        return pages.error_page(request, pages.session(request), 404, message)

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await backend.close()

    routes = [
        Route(HEALTH_PATH, health, methods=["GET"]),
        Route("/", home, methods=["GET"]),
        Route("/login", console.login_form, methods=["GET"]),
        Route("/login", console.login, methods=["POST"]),
        Route("/logout", signed_in(pages, console.logout), methods=["POST"]),
        Route("/memories", signed_in(pages, console.memories), methods=["GET"]),
        Route("/memories/{memory_id}", signed_in(pages, console.memory), methods=["GET"]),
        Route("/recall", signed_in(pages, console.recall), methods=["GET"]),
        Route("/pending", signed_in(pages, console.pending), methods=["GET"]),
        Route("/pending", signed_in(pages, console.decide), methods=["POST"]),
        Route("/erasure", signed_in(pages, console.erasure_form), methods=["GET"]),
        Route("/erasure", signed_in(pages, console.erase), methods=["POST"]),
        Route("/ops", signed_in(pages, console.operations), methods=["GET"]),
        Mount("/static", StaticFiles(directory=_STATIC), name="static"),
    ]
    app = Starlette(
        routes=routes,
        middleware=[Middleware(SecurityHeaders)],
        exception_handlers={404: not_found},
        lifespan=lifespan,
    )
    app.state.console = console
    return app
