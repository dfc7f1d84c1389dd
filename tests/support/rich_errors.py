"""The google.rpc details of a failed call, as a client reads them (grpc_status)."""

from __future__ import annotations

from typing import TypeVar

import grpc
from google.protobuf.message import Message
from google.rpc import status_pb2

M = TypeVar("M", bound=Message)


def detail(error: grpc.aio.AioRpcError, kind: type[M]) -> M | None:
    """The first detail of that type the server sent with the error, or None."""
    for key, value in error.trailing_metadata() or ():
        if key == "grpc-status-details-bin" and isinstance(value, bytes):
            for packed in status_pb2.Status.FromString(value).details:
                message = kind()
                if packed.Unpack(message):
                    return message
    return None
