"""Requests whose bytes do not parse. gRPC runs the request deserializer before any interceptor sees the
call, and answers its exceptions itself: UNKNOWN with the exception's text ("Unexpected <class
'google.protobuf.message.DecodeError'>: ..."). A `string` field holding invalid UTF-8 is the common case
(protobuf's Python runtime refuses it). `tolerant` wraps the deserializer so those bytes become an
`Undecodable` request instead, which the error table answers with INVALID_ARGUMENT naming the field.
The same stand-in carries a refusal decided from the bytes before parsing them (rpc/admission.py).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import DecodeError

from hindsight_server.domain.errors import HindsightError, InvalidArgument

__all__ = ["Undecodable", "leading_string", "tolerant", "undecodable_field"]

# Messages nested deeper than this are refused (protobuf's own default recursion limit).
_MAX_DEPTH = 100
# Fields of these types are named as a whole (`memory.entities`), not by their inner wire structure.
_OPAQUE = {"google.protobuf.Struct", "google.protobuf.Value", "google.protobuf.ListValue"}
_VARINT, _FIXED64, _LENGTH, _FIXED32 = 0, 1, 2, 5


@dataclass(frozen=True, slots=True)
class Undecodable:
    """Stands in for a request that was not parsed: its bytes did not (`error` says which field and
    why), or it was refused from them unread (shed)."""

    error: HindsightError


class _Malformed(Exception):
    def __init__(self, field: str, reason: str) -> None:
        super().__init__(field, reason)
        self.field = field
        self.reason = reason


def _varint(data: bytes, at: int, field: str) -> tuple[int, int]:
    value = shift = 0
    while at < len(data) and shift < 64:
        byte = data[at]
        value |= (byte & 0x7F) << shift
        at += 1
        if not byte & 0x80:
            return value, at
        shift += 7
    raise _Malformed(field, "is truncated or malformed")


def leading_string(data: bytes) -> str | None:
    """Field 1 of the message in `data`, when that is the first field on the wire and a string (as
    protobuf serialisers write `tenant_id` in every MemoryService request); else None. Reads only its
    own bytes, not the message."""
    if not data or data[0] != (1 << 3 | _LENGTH):
        return None
    try:
        size, at = _varint(data, 1, "")
    except _Malformed:
        return None
    if size > len(data) - at:
        return None
    try:
        return data[at : at + size].decode("utf-8")
    except UnicodeDecodeError:
        return None


def _walk(descriptor: Descriptor, data: bytes, prefix: str, depth: int) -> None:
    """Raises _Malformed for the first field whose bytes are wrong; returns when it finds none."""
    seen: dict[int, int] = {}
    whole = prefix.rstrip(".") or "request"  # what an unknown field's problem is blamed on
    at = 0
    while at < len(data):
        tag, at = _varint(data, at, whole)
        number, wire_type = tag >> 3, tag & 7
        field = descriptor.fields_by_number.get(number)
        index = seen.get(number, 0)
        seen[number] = index + 1
        name = whole if field is None else prefix + field.name
        if field is not None and field.is_repeated:
            name += f"[{index}]"
        if wire_type == _VARINT:
            _, at = _varint(data, at, name)
        elif wire_type in (_FIXED64, _FIXED32):
            at += 8 if wire_type == _FIXED64 else 4
        elif wire_type == _LENGTH:
            size, at = _varint(data, at, name)
            payload = data[at : at + size]
            if len(payload) < size:
                raise _Malformed(name, "is truncated or malformed")
            at += size
            if field is not None:
                _check(field, payload, name, depth)
        else:
            raise _Malformed(name, "is truncated or malformed")
        if at > len(data):
            raise _Malformed(name, "is truncated or malformed")


def _check(field: FieldDescriptor, payload: bytes, name: str, depth: int) -> None:
    if field.type == FieldDescriptor.TYPE_STRING:
        try:
            payload.decode("utf-8")
        except UnicodeDecodeError:
            raise _Malformed(name, "is not valid UTF-8") from None
    elif field.type == FieldDescriptor.TYPE_MESSAGE:
        if depth >= _MAX_DEPTH:
            raise _Malformed(name, f"nested deeper than {_MAX_DEPTH} levels")
        try:
            _walk(field.message_type, payload, f"{name}.", depth + 1)
        except _Malformed as problem:
            if field.message_type.full_name in _OPAQUE:  # the outermost one names the problem
                raise _Malformed(name, problem.reason) from None
            raise


def undecodable_field(descriptor: Descriptor, data: bytes) -> InvalidArgument:
    """Which field of these bytes (which did not parse as `descriptor`'s message) is wrong, and why."""
    try:
        _walk(descriptor, data, "", 0)
    except _Malformed as problem:
        return InvalidArgument(problem.field, problem.reason)
    return InvalidArgument("request", f"is not a valid {descriptor.full_name} message")


def tolerant(deserializer: Callable[[bytes], Any] | None) -> Callable[[bytes], Any] | None:
    """The deserializer, answering bytes that do not parse with an Undecodable instead of raising."""
    if deserializer is None:
        return None
    # The message class's FromString, possibly wrapped by an interceptor inside this one (functools.wraps).
    message_type = getattr(inspect.unwrap(deserializer), "__self__", None)
    descriptor: Descriptor | None = getattr(message_type, "DESCRIPTOR", None)

    def deserialize(data: bytes) -> Any:
        try:
            return deserializer(data)
        except DecodeError:
            if descriptor is None:
                return Undecodable(InvalidArgument("request", "is not a valid message"))
            return Undecodable(undecodable_field(descriptor, data))

    return deserialize
