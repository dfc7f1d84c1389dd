"""Per-request context in contextvars: a request id (from `x-request-id`, or generated) and who called
(the principal: the API key's id for audit records, its scopes and the agent it is bound to). The
handlers pass the principal down as a value; nothing below rpc reads these variables."""

from __future__ import annotations

import logging
import uuid
from contextvars import ContextVar

from hindsight_server.domain.principal import UNRESTRICTED, Principal

REQUEST_ID_HEADER = "x-request-id"
_request_id: ContextVar[str] = ContextVar("request_id", default="-")
# Who a call without an API key is (security.require_api_keys off: the embedded single-user mode).
UNAUTHENTICATED_CALLER = "no API key (security.require_api_keys is off)"
_principal: ContextVar[Principal] = ContextVar("principal", default=UNRESTRICTED)


def current_request_id() -> str:
    return _request_id.get()


def request_id_from(metadata: dict[str, str | bytes]) -> str:
    incoming = metadata.get(REQUEST_ID_HEADER)
    return incoming if isinstance(incoming, str) and 0 < len(incoming) <= 128 else uuid.uuid4().hex


def bind_request_id(request_id: str) -> None:
    _request_id.set(request_id)


class RequestIdFilter(logging.Filter):
    """Puts the request id of the call being served (if any) on each log record, as `request_id`: the
    JSON log format (hindsight.telemetry.JsonFormatter) writes it."""

    def filter(self, record: logging.LogRecord) -> bool:
        request_id = _request_id.get()
        if request_id != "-":
            record.request_id = request_id
        return True


def current_principal() -> Principal:
    return _principal.get()


def current_caller() -> str:
    """Who called, for an audit record."""
    key_id = _principal.get().key_id
    return f"api key {key_id}" if key_id else UNAUTHENTICATED_CALLER


def bind_principal(principal: Principal) -> None:
    _principal.set(principal)
