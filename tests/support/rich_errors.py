"""The google.rpc details of a failed call, as a client reads them (grpc_status)."""

from __future__ import annotations

from typing import TypeVar

import grpc
from google.protobuf.message import Message
from grpc_status import rpc_status

M = TypeVar("M", bound=Message)


def detail(error: grpc.aio.AioRpcError, kind: type[M]) -> M | None:
    """The first detail of that type the server sent with the error, or None."""
    status = rpc_status.from_call(error)  # an AioRpcError reads like a grpc.Call
    for packed in status.details if status is not None else ():
        message = kind()
        if packed.Unpack(message):
            return message
    return None
