"""The one place where errors become gRPC status codes.

Domain errors carry a message written for the caller; anything else is a bug: it is logged with the
request id and the caller gets INTERNAL with that id, never the exception text or a stack trace.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import inspect
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from typing import Any

import grpc
from google.protobuf import any_pb2, duration_pb2
from google.protobuf.message import Message
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from hindsight_server.domain.errors import (
    Aborted,
    DeadlineExceeded,
    FailedPrecondition,
    HindsightError,
    InvalidArgument,
    NotFound,
    OutOfRange,
    PermissionDenied,
    ResourceExhausted,
    RetryLater,
    Shed,
    Unauthenticated,
    Unavailable,
)
from hindsight_server.rpc.context import REQUEST_ID_HEADER, current_request_id
from hindsight_server.rpc.wire import Undecodable

log = logging.getLogger(__name__)

STATUS_BY_ERROR: dict[type[HindsightError], grpc.StatusCode] = {
    InvalidArgument: grpc.StatusCode.INVALID_ARGUMENT,
    NotFound: grpc.StatusCode.NOT_FOUND,
    FailedPrecondition: grpc.StatusCode.FAILED_PRECONDITION,
    Aborted: grpc.StatusCode.ABORTED,
    OutOfRange: grpc.StatusCode.OUT_OF_RANGE,
    Unavailable: grpc.StatusCode.UNAVAILABLE,
    Unauthenticated: grpc.StatusCode.UNAUTHENTICATED,
    PermissionDenied: grpc.StatusCode.PERMISSION_DENIED,
    ResourceExhausted: grpc.StatusCode.RESOURCE_EXHAUSTED,
    DeadlineExceeded: grpc.StatusCode.DEADLINE_EXCEEDED,
}


def status_for(error: HindsightError) -> grpc.StatusCode:
    for cls in type(error).__mro__:
        if cls in STATUS_BY_ERROR:
            return STATUS_BY_ERROR[cls]
    return grpc.StatusCode.INTERNAL


# Messages often quote what the caller sent (an unknown profile, a session id, a field path with an
# entity name). The status travels in trailers, which a gRPC client refuses past 8-16 KiB ("received
# metadata size exceeds ..." as RESOURCE_EXHAUSTED instead of the error): quotes are clipped to these.
_MAX_FIELD_BYTES = 128
_MAX_MESSAGE_BYTES = 512


def _clip(text: str, max_bytes: int) -> str:
    encoded = text.encode("utf-8", "replace")
    if len(encoded) <= max_bytes:
        return text
    return encoded[: max_bytes - 3].decode("utf-8", "ignore") + "..."


def _message(error: HindsightError) -> tuple[str, str, str]:
    """(message, field, reason) as sent: the field and reason only for InvalidArgument."""
    if isinstance(error, InvalidArgument):
        field = _clip(error.field, _MAX_FIELD_BYTES)
        reason = _clip(error.reason, _MAX_MESSAGE_BYTES - _MAX_FIELD_BYTES)
        return f"{field}: {reason}", field, reason
    return _clip(str(error), _MAX_MESSAGE_BYTES), "", ""


# ErrorInfo.domain: the namespace of every reason (HindsightError.cause) this service sends.
ERROR_DOMAIN = "hindsight.v1"


def _packed(message: Message) -> any_pb2.Any:
    detail = any_pb2.Any()
    detail.Pack(message)
    return detail


def rich_status(error: HindsightError, code: grpc.StatusCode) -> status_pb2.Status:
    """The google.rpc.Status a caller gets: the message, and the details a program acts on: BadRequest
    for a bad field, ErrorInfo for a named cause, RetryInfo for when to retry, PreconditionFailure for
    the state that forbade the call."""
    message, field, reason = _message(error)
    status = status_pb2.Status(code=getattr(code_pb2, code.name), message=message)
    if isinstance(error, InvalidArgument):
        violation = error_details_pb2.BadRequest.FieldViolation(field=field, description=reason)
        status.details.append(_packed(error_details_pb2.BadRequest(field_violations=[violation])))
    if error.cause:
        status.details.append(_packed(error_details_pb2.ErrorInfo(reason=error.cause, domain=ERROR_DOMAIN)))
    if isinstance(error, RetryLater):
        delay = duration_pb2.Duration()
        delay.FromTimedelta(timedelta(seconds=max(error.retry_after_s, 0.0)))
        status.details.append(_packed(error_details_pb2.RetryInfo(retry_delay=delay)))
    if isinstance(error, FailedPrecondition) and error.violations:
        violations = [
            error_details_pb2.PreconditionFailure.Violation(
                type=v.kind,
                subject=_clip(v.subject, _MAX_FIELD_BYTES),
                description=_clip(v.description, _MAX_MESSAGE_BYTES),
            )
            for v in error.violations
        ]
        status.details.append(_packed(error_details_pb2.PreconditionFailure(violations=violations)))
    return status


class _Status(collections.namedtuple("_Status", ("code", "details", "trailing_metadata")), grpc.Status):
    pass


# gRPC's own retries (the shared client's service config retries UNAVAILABLE and RESOURCE_EXHAUSTED)
# wait what this trailer says instead of their backoff: a shed call comes back when there is room. A
# longer wait is the caller's to decide (a negative pushback: no automatic retry), so a rate limit a
# minute away answers RESOURCE_EXHAUSTED at once instead of a deadline running out.
PUSHBACK_HEADER = "grpc-retry-pushback-ms"
MAX_PUSHBACK_S = 1.0


def _pushback(retry_after_s: float) -> tuple[str, str]:
    delay_ms = str(max(int(retry_after_s * 1000), 1)) if retry_after_s <= MAX_PUSHBACK_S else "-1"
    return PUSHBACK_HEADER, delay_ms


class Pacer:
    """Answers an admission refusal (`Shed`: RESOURCE_EXHAUSTED with a retry delay) after that delay, or
    after `cap_s` when it is longer (other refusals, an export slot's, are answered at once): a client
    that resends at once (the worst neighbour) then sends no faster than that, costing the server a
    parked call instead of a refusal every few milliseconds, each read, weighed and answered on the
    cores its neighbours need. The RetryInfo still counts from the answer, so a
    client that honours it waits the hold more (50 ms for a busy server's refusal, at most `cap_s`). At
    most `limit` answers wait at once; past it, refusals are answered at once."""

    def __init__(self, cap_s: float = 0.25, limit: int = 512) -> None:
        self._cap_s = cap_s
        self._limit = limit
        self._waiting = 0

    async def pace(self, error: Shed) -> None:
        hold_s = min(error.retry_after_s, self._cap_s)
        if hold_s <= 0 or self._waiting >= self._limit:
            return
        self._waiting += 1
        try:
            await asyncio.sleep(hold_s)
        finally:
            self._waiting -= 1


_PACER = Pacer()


Behavior = Callable[[Any, grpc.aio.ServicerContext[Any, Any]], Awaitable[Any]]
StreamBehavior = Callable[[Any, grpc.aio.ServicerContext[Any, Any]], AsyncIterator[Any]]


def map_errors(behavior: Behavior) -> Behavior:
    """Wraps a unary method so every error leaves it as a status code chosen by STATUS_BY_ERROR."""

    async def mapped(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        async with _mapped_errors(request, context):
            return await behavior(request, context)

    return mapped


async def stream_items(
    behavior: StreamBehavior, request: Any, context: grpc.aio.ServicerContext[Any, Any]
) -> AsyncIterator[Any]:
    """A server-streaming handler's items: grpc.aio takes an async generator (Export) or a coroutine
    that writes with context.write (the health service's Watch); this runs either."""
    started: Any = behavior(request, context)
    if inspect.isawaitable(started):
        await started
        return
    async for item in started:
        yield item


def map_stream_errors(behavior: StreamBehavior) -> StreamBehavior:
    """The same for a server-streaming method: an error midway ends the stream with its status."""

    async def mapped(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[Any]:
        async with _mapped_errors(request, context):
            async for item in stream_items(behavior, request, context):
                yield item

    return mapped


@contextlib.asynccontextmanager
async def _mapped_errors(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[None]:
    try:
        if isinstance(request, Undecodable):
            raise request.error
        yield
    except HindsightError as error:
        if isinstance(error, Shed):
            await _PACER.pace(error)
        status = rpc_status.to_status(rich_status(error, status_for(error)))
        trailers = [(REQUEST_ID_HEADER, current_request_id())]
        if isinstance(error, RetryLater):
            trailers.append(_pushback(error.retry_after_s))
        await context.abort_with_status(
            _Status(status.code, status.details, (*status.trailing_metadata, *trailers))
        )
    except grpc.aio.AbortError:
        raise
    except Exception:
        request_id = current_request_id()
        log.exception("unhandled error in request %s", request_id)
        await context.abort(
            grpc.StatusCode.INTERNAL,
            f"internal error (request id {request_id})",
            trailing_metadata=((REQUEST_ID_HEADER, request_id),),
        )
