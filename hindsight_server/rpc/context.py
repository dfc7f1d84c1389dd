"""Per-request context in contextvars: a request id (from `x-request-id`, or generated) and who called
(the API key's id, for audit records)."""

from __future__ import annotations

import uuid
from contextvars import ContextVar

REQUEST_ID_HEADER = "x-request-id"
_request_id: ContextVar[str] = ContextVar("request_id", default="-")
# Who a call without an API key is (security.require_api_keys off: the embedded single-user mode).
UNAUTHENTICATED_CALLER = "no API key (security.require_api_keys is off)"
_caller: ContextVar[str] = ContextVar("caller", default=UNAUTHENTICATED_CALLER)


def current_request_id() -> str:
    return _request_id.get()


def request_id_from(metadata: dict[str, str | bytes]) -> str:
    incoming = metadata.get(REQUEST_ID_HEADER)
    return incoming if isinstance(incoming, str) and 0 < len(incoming) <= 128 else uuid.uuid4().hex


def bind_request_id(request_id: str) -> None:
    _request_id.set(request_id)


def current_caller() -> str:
    return _caller.get()


def bind_caller(caller: str) -> None:
    _caller.set(caller)
