"""Per-request context: a request id carried in a contextvar, taken from `x-request-id` or generated."""

from __future__ import annotations

import uuid
from contextvars import ContextVar

REQUEST_ID_HEADER = "x-request-id"
_request_id: ContextVar[str] = ContextVar("request_id", default="-")


def current_request_id() -> str:
    return _request_id.get()


def request_id_from(metadata: dict[str, str | bytes]) -> str:
    incoming = metadata.get(REQUEST_ID_HEADER)
    return incoming if isinstance(incoming, str) and 0 < len(incoming) <= 128 else uuid.uuid4().hex


def bind_request_id(request_id: str) -> None:
    _request_id.set(request_id)
