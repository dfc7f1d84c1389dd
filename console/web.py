"""What every page shares: the templates (autoescaped, all of them), the language, the session cookie,
CSRF, the security headers, bounded form bodies, and the one place that turns errors into pages."""

from __future__ import annotations

import secrets
import urllib.parse
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc
import jinja2
from google.protobuf.timestamp_pb2 import Timestamp
from starlette.datastructures import MutableHeaders
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from console.forms import FieldError
from console.i18n import Language, negotiate, translate
from console.sessions import Session, SessionTable

__all__ = [
    "COOKIE",
    "CSP",
    "Forbidden",
    "Pages",
    "SecurityHeaders",
    "read_form",
    "timestamp",
]

COOKIE = "hindsight_console"
LOGIN_COOKIE = "hindsight_console_login"  # the login form's own CSRF token (before any session)
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'"
)
MAX_FORM_BYTES = 64 * 1024  # the largest form: a bulk decision over MAX_BULK_IDS ids, or a recall query
MAX_FORM_FIELDS = 500
_TEMPLATES = Path(__file__).parent / "templates"
_HEADERS = (
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (b"cross-origin-opener-policy", b"same-origin"),
)


class SecurityHeaders:
    """The strict CSP and its companions on every response; pages are not cached (they show memory)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        static = str(scope.get("path", "")).startswith("/static/")

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in _HEADERS:
                    headers[name.decode()] = value.decode()
                if not static:
                    headers["cache-control"] = "no-store"
            await send(message)

        await self.app(scope, receive, send_with_headers)


class Forbidden(Exception):
    """A POST without this session's CSRF token."""


class FormTooLarge(Exception):
    pass


async def read_form(request: Request) -> dict[str, list[str]]:
    """A urlencoded form body, refused past MAX_FORM_BYTES or MAX_FORM_FIELDS (before it is read whole
    when its length is declared)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_FORM_BYTES:
        raise FieldError("form", f"larger than {MAX_FORM_BYTES // 1024} KiB")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            raise FieldError("form", f"larger than {MAX_FORM_BYTES // 1024} KiB")
    try:
        pairs = urllib.parse.parse_qsl(
            body.decode("utf-8"), keep_blank_values=True, max_num_fields=MAX_FORM_FIELDS, strict_parsing=False
        )
    except (UnicodeDecodeError, ValueError):
        raise FieldError("form", f"not a form of at most {MAX_FORM_FIELDS} fields in UTF-8") from None
    form: dict[str, list[str]] = {}
    for name, value in pairs:
        form.setdefault(name, []).append(value)
    return form


def first(form: Mapping[str, list[str]]) -> dict[str, str]:
    return {name: values[0] for name, values in form.items() if values}


def timestamp(value: Timestamp) -> datetime | None:
    if value.seconds == 0 and value.nanos == 0:
        return None
    return value.ToDatetime(tzinfo=UTC)


def _format_time(value: Timestamp | datetime | None) -> str:
    moment = timestamp(value) if isinstance(value, Timestamp) else value
    return "" if moment is None else moment.strftime("%Y-%m-%d %H:%M:%S UTC")


_RPC_STATUS = {
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.OUT_OF_RANGE: 400,
    grpc.StatusCode.FAILED_PRECONDITION: 409,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.PERMISSION_DENIED: 403,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.DEADLINE_EXCEEDED: 504,
}


class Pages:
    """Renders pages for a request: its language, its session (if any), the CSRF token of its forms."""

    def __init__(self, sessions: SessionTable, *, secure_cookies: bool) -> None:
        self.sessions = sessions
        self.secure_cookies = secure_cookies
        self.environment = jinja2.Environment(
            loader=jinja2.FileSystemLoader(_TEMPLATES),
            autoescape=True,  # every template, whatever its name: memory content is always escaped
            undefined=jinja2.StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self.environment.filters["time"] = _format_time
        self.environment.filters["urlencode_query"] = lambda values: urllib.parse.urlencode(values)

    @staticmethod
    def language(request: Request) -> Language:
        return negotiate(request.headers.get("accept-language", ""))

    def session(self, request: Request) -> Session | None:
        return self.sessions.get(request.cookies.get(COOKIE, ""))

    def render(
        self,
        request: Request,
        template: str,
        session: Session | None,
        status_code: int = 200,
        **context: Any,
    ) -> HTMLResponse:
        language = self.language(request)

        def t(key: str, **values: object) -> str:
            return translate(language, key, **values)

        html = self.environment.get_template(template).render(
            t=t,
            lang=language,
            session=session,
            csrf=session.csrf_token if session else "",
            flashes=session.take_flashes() if session else [],
            path=request.url.path,
            **context,
        )
        return HTMLResponse(html, status_code=status_code)

    def set_cookie(self, response: Response, request: Request, name: str, value: str) -> None:
        response.set_cookie(
            name,
            value,
            httponly=True,
            samesite="strict",
            secure=self.secure_cookies or request.url.scheme == "https",
            path="/",
        )

    def login_page(
        self, request: Request, status_code: int = 200, error: str = "", tenant: str = ""
    ) -> Response:
        token = secrets.token_urlsafe(32)
        response = self.render(
            request, "login.html", None, status_code, login_csrf=token, error=error, tenant=tenant
        )
        self.set_cookie(response, request, LOGIN_COOKIE, token)
        return response

    def error_page(
        self, request: Request, session: Session | None, status_code: int, message: str
    ) -> Response:
        return self.render(request, "error.html", session, status_code, message=message)

    def rpc_error(self, request: Request, session: Session | None, error: grpc.aio.AioRpcError) -> Response:
        language = self.language(request)
        if error.code() == grpc.StatusCode.UNAUTHENTICATED and session is not None:
            # The key was revoked (or the server restarted with other keys): log in again.
            self.sessions.end(session.session_id)
            return self.login_page(request, 401, translate(language, "login.expired"))
        message = translate(language, "error.rpc", code=error.code().name, details=error.details() or "")
        return self.error_page(request, session, _RPC_STATUS.get(error.code(), 502), message)


Handler = Callable[[Request, Session], Awaitable[Response]]


def signed_in(pages: Pages, handler: Handler) -> Callable[[Request], Awaitable[Response]]:
    """The page for a logged-in session (otherwise the login page), with every POST's CSRF token checked
    and every error shown as a page: FieldError as 400 naming the field, a gRPC error by its code."""

    async def endpoint(request: Request) -> Response:
        session = pages.session(request)
        if session is None:
            if request.method == "GET":
                return RedirectResponse("/login", status_code=303)
            return pages.login_page(request, 401, translate(pages.language(request), "login.expired"))
        try:
            if request.method == "POST":
                form = await read_form(request)
                if not session.csrf_matches(first(form).get("csrf", "")):
                    raise Forbidden
                request.state.form = form
            return await handler(request, session)
        except Forbidden:
            return pages.error_page(request, session, 403, translate(pages.language(request), "csrf.refused"))
        except FieldError as error:
            message = translate(
                pages.language(request), "error.field", field=error.field, message=error.message
            )
            return pages.error_page(request, session, 400, message)
        except grpc.aio.AioRpcError as error:
            return pages.rpc_error(request, session, error)

    return endpoint
