"""The property every fuzzed call must have: OK, or a clear error (never INTERNAL, UNKNOWN or a
traceback); INVALID_ARGUMENT names a field of the request, in its message and as a BadRequest detail.
Every answer is counted by method and status code for the run's figures."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Awaitable
from typing import Any, TypeVar

import grpc
from google.protobuf.message import Message
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from hindsight.v1 import memory_pb2 as pb

M = TypeVar("M", bound=Message)

# What a hostile request may get. RESOURCE_EXHAUSTED: gRPC's own message-size limit (and the rate limit).
CLEAR_ERRORS = {
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.ABORTED,
    grpc.StatusCode.OUT_OF_RANGE,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
}

TALLY: defaultdict[str, Counter[str]] = defaultdict(Counter)
_FIELDS = {
    method.name: {field.name for field in method.input_type.fields} | {"request"}
    for method in pb.DESCRIPTOR.services_by_name["MemoryService"].methods
}


def named_field(error: grpc.aio.AioRpcError) -> str:
    """The field of the BadRequest detail (asserting there is exactly one violation)."""
    status = rpc_status.from_call(error)
    assert status is not None, f"INVALID_ARGUMENT without status details: {error.details()}"
    violations = error_details_pb2.BadRequest()
    assert status.details and status.details[0].Unpack(violations), status
    assert len(violations.field_violations) == 1, violations
    return str(violations.field_violations[0].field)


def _top_level(field: str) -> str:
    return field.split(".")[0].split("[")[0]


async def answered(method: str, call: Awaitable[M]) -> M | None:
    """The response when the call succeeded, None when it failed clearly; fails the test otherwise."""
    try:
        response = await call
    except grpc.aio.AioRpcError as error:
        check_error(method, error)
        return None
    TALLY[method]["OK"] += 1
    return response


async def refused(method: str, call: Awaitable[Any]) -> grpc.aio.AioRpcError:
    """The clear error a call must end with."""
    try:
        await call
    except grpc.aio.AioRpcError as error:
        check_error(method, error)
        return error
    TALLY[method]["OK"] += 1
    raise AssertionError(f"{method} succeeded")


def check_error(method: str, error: grpc.aio.AioRpcError) -> None:
    code, details = error.code(), error.details() or ""
    TALLY[method][code.name] += 1
    assert code in CLEAR_ERRORS, f"{method} answered {code.name}: {details!r}"
    assert "Traceback" not in details and "Unexpected <class" not in details, details
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        field = named_field(error)
        assert details.startswith(f"{field}: "), (field, details)
        assert _top_level(field) in _FIELDS[method], f"{method}: {field!r} is not a field of the request"


def same_tenant(tenant: str, memories: Any) -> None:
    """Nothing of another tenant ever comes back."""
    for memory in memories:
        assert memory.tenant_id == tenant, (tenant, memory.tenant_id)
