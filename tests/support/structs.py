"""Reading a `google.protobuf.Struct` field (entities, provenance, a summary's confirmed slots) as the
test expects it to be: its values are typed as any JSON value, these check which one it is."""

from __future__ import annotations

from google.protobuf import struct_pb2


def list_of(value: object) -> list[object]:
    """The items of a field that holds a list (asserting it does)."""
    assert isinstance(value, struct_pb2.ListValue), value
    return list(value)


def str_of(value: object) -> str:
    """A field that holds a string (asserting it does)."""
    assert isinstance(value, str), value
    return value
