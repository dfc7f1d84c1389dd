"""The one place where failures become tool errors: a message a model can act on, never a traceback.

Bad arguments (caught by the tool's schema here, or by the memory server) name the argument as the tool
calls it (`summary`, `memory_type`), not as the gRPC message does (`memory.content`, `memory.tier`).
Anything unexpected is logged in full on the gateway and reported as an internal error.
"""

from __future__ import annotations

import logging
import re

import grpc
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2
from pydantic import ValidationError

__all__ = ["UNAVAILABLE_MESSAGE", "ToolError", "describe", "from_rpc", "from_validation"]

log = logging.getLogger(__name__)

UNAVAILABLE_MESSAGE = "memory service unavailable, try again"
_DETAILS_KEY = "grpc-status-details-bin"
# The gRPC request's field names -> the tools' argument names (first path segment after `memory.`).
_ARGUMENT_NAMES = {
    "content": "summary",
    "tier": "memory_type",
    "tiers": "memory_types",
    "time_range": "start/end",
}
# Whole paths of a gRPC request -> the tool argument they come from, per tool: memory_forget's Erase,
# and the pending decisions' and History's memory id.
_PATH_NAMES: dict[str, dict[str, str]] = {
    "memory_forget": {"memories.ids": "memory_ids", "reason": "query"},
    "memory_confirm_pending": {"id": "memory_id"},
    "memory_reject_pending": {"id": "memory_id"},
    "memory_history": {"id": "memory_id"},
}
_HEAD = re.compile(r"^(?P<head>[A-Za-z_]+)(?P<tail>.*)$", re.DOTALL)
_FIELD_MESSAGE = re.compile(r"^(?P<field>[A-Za-z_][\w.\[\]-]*): (?P<reason>.+)$", re.DOTALL)


class ToolError(Exception):
    """A failure whose message is written for the calling model."""


def _argument_name(field: str, tool: str) -> str:
    if field == "tenant_id":
        return "tenant (the gateway's configuration, not an argument)"
    for path, name in _PATH_NAMES.get(tool, {}).items():
        if field == path or field.startswith((f"{path}.", f"{path}[")):
            return name + field.removeprefix(path)
    match = _HEAD.match(field.removeprefix("memory."))
    if match is None:
        return field
    return _ARGUMENT_NAMES.get(match["head"], match["head"]) + match["tail"]


def _details(error: grpc.aio.AioRpcError) -> list[any_pb2.Any]:
    """The google.rpc details the server sent with the error."""
    details: list[any_pb2.Any] = []
    for key, value in error.trailing_metadata() or ():
        if key == _DETAILS_KEY and isinstance(value, bytes):
            details += status_pb2.Status.FromString(value).details
    return details


def _field_violations(error: grpc.aio.AioRpcError) -> list[tuple[str, str]]:
    """The server's google.rpc.BadRequest detail, when it sent one."""
    violations: list[tuple[str, str]] = []
    for detail in _details(error):
        bad_request = error_details_pb2.BadRequest()
        if detail.Unpack(bad_request):
            violations += [(v.field, v.description) for v in bad_request.field_violations]
    return violations


def reason(error: grpc.aio.AioRpcError) -> str:
    """The server's ErrorInfo reason (its error's cause, e.g. SESSION_SUBJECT_MISMATCH); "" if none."""
    for detail in _details(error):
        info = error_details_pb2.ErrorInfo()
        if detail.Unpack(info):
            return str(info.reason)
    return ""


def _retry_hint(error: grpc.aio.AioRpcError) -> str:
    """ " in N s" from the server's RetryInfo, when it sent one."""
    for detail in _details(error):
        retry = error_details_pb2.RetryInfo()
        if detail.Unpack(retry):
            return f" in {max(retry.retry_delay.ToTimedelta().total_seconds(), 0.1):.1f} s"
    return ""


def _invalid_argument(error: grpc.aio.AioRpcError, tool: str) -> str:
    violations = _field_violations(error)
    if not violations:
        match = _FIELD_MESSAGE.match(error.details() or "")
        if match is None:
            return f"invalid argument: {error.details()}"
        violations = [(match["field"], match["reason"])]
    return "invalid argument: " + "; ".join(f"{_argument_name(f, tool)}: {d}" for f, d in violations)


def from_rpc(error: grpc.aio.AioRpcError, tool: str) -> str:
    code = error.code()
    details = error.details() or ""
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        return _invalid_argument(error, tool)
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
        return f"{UNAVAILABLE_MESSAGE}{_retry_hint(error)} ({code.name})"
    if code == grpc.StatusCode.NOT_FOUND:
        return f"not found: {details}"
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        when = _retry_hint(error) or " later"
        return f"memory service is overloaded, try again{when} ({code.name}: {details})"
    if code == grpc.StatusCode.UNIMPLEMENTED:
        return f"{tool} is not available: the memory server does not implement it yet (UNIMPLEMENTED)"
    if code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED):
        return (
            f"the gateway is not allowed to call the memory service ({code.name}); "
            "this is the gateway's configuration, not something the arguments can fix"
        )
    if code in (grpc.StatusCode.ABORTED, grpc.StatusCode.FAILED_PRECONDITION):
        return f"{details} ({code.name})"
    # INTERNAL and the rest: the server's message carries its request id, never a stack trace.
    return f"memory service error ({code.name}): {details[:300]}"


def from_validation(error: ValidationError) -> str:
    problems = []
    for item in error.errors(include_url=False, include_input=False):
        where = ".".join(str(part) for part in item["loc"]) or "arguments"
        problems.append(f"{where}: {item['msg']}")
    return "invalid arguments: " + "; ".join(problems)


def describe(error: BaseException, tool: str) -> str:
    """The tool error for any failure of a tool call."""
    if isinstance(error, ToolError):
        return str(error)
    if isinstance(error, ValidationError):
        return from_validation(error)
    if isinstance(error, grpc.aio.AioRpcError):
        return from_rpc(error, tool)
    log.exception("%s failed unexpectedly", tool, exc_info=error)
    return f"{tool} failed inside the MCP gateway ({type(error).__name__}); the gateway's log has the details"
