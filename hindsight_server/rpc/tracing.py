"""A server span per RPC, continuing the caller's trace from its `traceparent` metadata (W3C), with
OpenTelemetry's gRPC attributes (`rpc.system.name`, `rpc.method` "package.Service/Method",
`rpc.response.status_code` the code's name, `error.type` for the codes that mean the server failed)
and the `rpc.server.call.duration` histogram, in seconds.

Installed only when tracing is on (build_server(traced=True)). Health checks, reflection and the ops
service are left out: load balancers and probes call them every few seconds, and each would be a trace.
(`server.address`/`server.port` are opt-in on server spans, from the call's `:authority`, which grpc's
Python server does not expose: they are left out.)
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import grpc
from opentelemetry import metrics
from opentelemetry.context import Context
from opentelemetry.trace import SpanKind, Status, StatusCode

from hindsight.telemetry import PROPAGATOR, RPC_DURATION_BUCKETS_S, SERVER_ERRORS, rpc_attributes
from hindsight_server.rpc.errors import Behavior, StreamBehavior, stream_items
from hindsight_server.rpc.interceptors import UnaryInterceptor
from hindsight_server.telemetry.recorder import TRACER

_UNTRACED = ("/grpc.health.v1.Health/", "/grpc.reflection.", "/hindsight.ops.v1.Ops/")


@functools.cache
def _duration() -> metrics.Histogram:
    return metrics.get_meter("hindsight_server").create_histogram(
        "rpc.server.call.duration",
        unit="s",
        description="gRPC calls served, by method and status code",
        explicit_bucket_boundaries_advisory=RPC_DURATION_BUCKETS_S,
    )


def _outcome(code: grpc.StatusCode) -> dict[str, str]:
    outcome = {"rpc.response.status_code": code.name}
    if code in SERVER_ERRORS:
        outcome["error.type"] = code.name
    return outcome


class TracingInterceptor(UnaryInterceptor):
    def wrap(self, behavior: Behavior, details: grpc.HandlerCallDetails) -> Behavior:
        if details.method.startswith(_UNTRACED):
            return behavior
        name, parent, attributes = _called(details)

        async def traced(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            with _server_span(name, parent, attributes, context):
                return await behavior(request, context)

        return traced

    def wrap_stream(self, behavior: StreamBehavior, details: grpc.HandlerCallDetails) -> StreamBehavior:
        if details.method.startswith(_UNTRACED):
            return behavior
        name, parent, attributes = _called(details)

        async def traced(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[Any]:
            with _server_span(name, parent, attributes, context):
                async for item in stream_items(behavior, request, context):
                    yield item

        return traced


def _called(details: grpc.HandlerCallDetails) -> tuple[str, Context, dict[str, Any]]:
    """The span's name, the caller's trace context and the RPC attributes of a call."""
    name = str(details.method).lstrip("/")
    carrier = {key: value for key, value in details.invocation_metadata or () if isinstance(value, str)}
    return name, PROPAGATOR.extract(carrier), rpc_attributes(name)


@contextlib.contextmanager
def _server_span(
    name: str, parent: Context, attributes: dict[str, Any], context: grpc.aio.ServicerContext[Any, Any]
) -> Iterator[None]:
    """The call's server span and its duration, with the status code it ended with."""
    started = time.perf_counter()
    code = grpc.StatusCode.UNKNOWN
    with TRACER.start_as_current_span(
        name,
        context=parent,
        kind=SpanKind.SERVER,
        attributes=attributes,
        record_exception=False,  # the error interceptor inside maps (and logs) failures
        set_status_on_exception=False,
    ) as span:
        try:
            yield
            code = grpc.StatusCode.OK
        except grpc.aio.AbortError:
            code = context.code() or grpc.StatusCode.UNKNOWN
            raise
        except asyncio.CancelledError:  # the caller went away (or its deadline passed)
            code = grpc.StatusCode.CANCELLED
            raise
        finally:
            outcome = _outcome(code)
            span.set_attributes(outcome)
            if "error.type" in outcome:
                span.set_status(Status(StatusCode.ERROR, code.name))
            _duration().record(time.perf_counter() - started, {**attributes, **outcome})
