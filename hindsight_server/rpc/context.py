"""Per-request context: a request id carried in a contextvar, taken from `x-request-id` or generated."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any

import grpc

REQUEST_ID_HEADER = "x-request-id"
_request_id: ContextVar[str] = ContextVar("request_id", default="-")


def current_request_id() -> str:
    return _request_id.get()


class RequestIdInterceptor(grpc.aio.ServerInterceptor):
    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler is None or handler.unary_unary is None:
            return handler
        metadata = dict(handler_call_details.invocation_metadata or ())
        incoming = metadata.get(REQUEST_ID_HEADER)
        request_id = incoming if isinstance(incoming, str) and 0 < len(incoming) <= 128 else uuid.uuid4().hex
        inner = handler.unary_unary

        async def with_request_id(request: Any, context: grpc.aio.ServicerContext) -> Any:
            _request_id.set(request_id)
            await context.send_initial_metadata(((REQUEST_ID_HEADER, request_id),))
            return await inner(request, context)

        return grpc.unary_unary_rpc_method_handler(
            with_request_id,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )
