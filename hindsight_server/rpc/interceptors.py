"""Server interceptors: each wraps the behaviour of every unary-unary and unary-stream method of the
services (Export streams; the others are unary)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeAlias

import grpc

from hindsight_server.domain.deadline import bind_call_deadline
from hindsight_server.rpc.context import REQUEST_ID_HEADER, bind_request_id, request_id_from
from hindsight_server.rpc.errors import Behavior, StreamBehavior, map_errors, map_stream_errors, stream_items
from hindsight_server.rpc.wire import tolerant

Handler: TypeAlias = "grpc.RpcMethodHandler[Any, Any]"  # generic only in the type stubs


class UnaryInterceptor(grpc.aio.ServerInterceptor):
    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Handler | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Handler | None:
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler
        if handler.unary_unary is not None:
            behavior: Behavior = handler.unary_unary  # type: ignore[assignment]  # aio: coroutines
            return grpc.unary_unary_rpc_method_handler(
                self.wrap(behavior, handler_call_details),
                request_deserializer=self.deserializer(handler.request_deserializer, handler_call_details),
                response_serializer=handler.response_serializer,
            )
        if handler.unary_stream is not None:
            stream: StreamBehavior = handler.unary_stream  # type: ignore[assignment]  # aio: generators
            return grpc.unary_stream_rpc_method_handler(
                self.wrap_stream(stream, handler_call_details),
                request_deserializer=self.deserializer(handler.request_deserializer, handler_call_details),
                response_serializer=handler.response_serializer,
            )
        return handler

    def wrap(self, behavior: Behavior, details: grpc.HandlerCallDetails) -> Behavior:
        raise NotImplementedError

    def wrap_stream(self, behavior: StreamBehavior, details: grpc.HandlerCallDetails) -> StreamBehavior:
        raise NotImplementedError

    def deserializer(
        self, deserializer: Callable[[bytes], Any] | None, details: grpc.HandlerCallDetails
    ) -> Callable[[bytes], Any] | None:
        """What parses the request's bytes (the outermost interceptor's runs first)."""
        return deserializer


class RequestIdInterceptor(UnaryInterceptor):
    """Takes `x-request-id` from the caller (or makes one), binds it for logs, echoes it back in the
    trailing metadata (an error's status carries it too: rpc/errors.py); and binds the call's remaining
    deadline (domain/deadline.py) for the store, whose statements get that long (store/budget.py).

    Nothing is sent before the answer: a call refused before any header went out (shed, a server away)
    is one that gRPC's own retries may run again, waiting the server's pushback."""

    def wrap(self, behavior: Behavior, details: grpc.HandlerCallDetails) -> Behavior:
        request_id = request_id_from(dict(details.invocation_metadata or ()))

        async def with_request_id(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            _bind(request_id, context)
            response = await behavior(request, context)
            _echo(request_id, context)
            return response

        return with_request_id

    def wrap_stream(self, behavior: StreamBehavior, details: grpc.HandlerCallDetails) -> StreamBehavior:
        request_id = request_id_from(dict(details.invocation_metadata or ()))

        async def with_request_id(
            request: Any, context: grpc.aio.ServicerContext[Any, Any]
        ) -> AsyncIterator[Any]:
            _bind(request_id, context)
            async for item in stream_items(behavior, request, context):
                yield item
            _echo(request_id, context)

        return with_request_id


def _bind(request_id: str, context: grpc.aio.ServicerContext[Any, Any]) -> None:
    bind_request_id(request_id)
    bind_call_deadline(context.time_remaining())


def _echo(request_id: str, context: grpc.aio.ServicerContext[Any, Any]) -> None:
    """The request id beside what the method put in the trailers (a consistency token)."""
    context.set_trailing_metadata((*(context.trailing_metadata() or ()), (REQUEST_ID_HEADER, request_id)))


class ErrorMappingInterceptor(UnaryInterceptor):
    """Applies the one error table (rpc/errors.py) to every method, bytes that do not parse included
    (rpc/wire.py: otherwise gRPC itself answers UNKNOWN with the decoder's exception text)."""

    def wrap(self, behavior: Behavior, details: grpc.HandlerCallDetails) -> Behavior:
        return map_errors(behavior)

    def wrap_stream(self, behavior: StreamBehavior, details: grpc.HandlerCallDetails) -> StreamBehavior:
        return map_stream_errors(behavior)

    def deserializer(
        self, deserializer: Callable[[bytes], Any] | None, details: grpc.HandlerCallDetails
    ) -> Callable[[bytes], Any] | None:
        return tolerant(deserializer)
