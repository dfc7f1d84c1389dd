"""`hindsight.ops.v1.Ops/Status`: one server's figures (recall p50/p95/p99 against the target, write
latency, backlog, pool, caches) as a JSON document, for `hindsight status`.

Why a generic handler with JSON instead of a proto message: the figures are for operators and evolve
with the telemetry, not part of the memory API's contract (proto/, versioned by its own owners); the
handler needs no generated code, rides on the server's existing port (nothing else to expose, configure
or secure, and it works wherever the gRPC port is reachable), and the standard health service beside it
answers "is it serving". The request is empty; the response is UTF-8 JSON (see StatusBoard.snapshot).
Reflection does not list it: call it with `hindsight status`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from hindsight.tls import ClientTls, open_channel
from hindsight_server.rpc.server import INFERENCE_HEALTH_NAME

OPS_SERVICE = "hindsight.ops.v1.Ops"  # rpc/tracing.py leaves it untraced
STATUS_METHOD = f"/{OPS_SERVICE}/Status"


def ops_handler(snapshot: Callable[[], dict[str, Any]]) -> grpc.GenericRpcHandler:
    async def status(request: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> bytes:
        return json.dumps(snapshot()).encode()

    return grpc.method_handlers_generic_handler(
        OPS_SERVICE, {"Status": grpc.unary_unary_rpc_method_handler(status)}
    )


class StatusUnavailable(RuntimeError):
    """The server could not be asked; the message says which and why."""


@dataclass(frozen=True, slots=True)
class ServerStatus:
    target: str
    serving: str  # the health service's answer for the server: SERVING | NOT_SERVING | ...
    inference: str  # ... for the inference tier; "NOT_CONFIGURED" without one
    figures: dict[str, Any]


async def _health(stub: health_pb2_grpc.HealthStub, service: str, timeout_s: float) -> str:
    try:
        answer = await stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=timeout_s)
    except grpc.aio.AioRpcError as error:
        if error.code() == grpc.StatusCode.NOT_FOUND:
            return "NOT_CONFIGURED"
        raise
    return str(health_pb2.HealthCheckResponse.ServingStatus.Name(answer.status))


async def fetch_status(
    target: str, timeout_s: float, tls: ClientTls | None = None, api_key: str = ""
) -> ServerStatus:
    """Asks one server (HOST:PORT) for its health and figures; StatusUnavailable when it cannot.
    `tls`: the server listens with TLS (security.tls_cert_file), perhaps requiring client certificates.
    `api_key`: a key with the admin scope, for a server that requires keys."""
    metadata = (("authorization", f"Bearer {api_key}"),) if api_key else None
    async with open_channel(target, tls) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        # Bytes in and out: no serializers.
        status: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(STATUS_METHOD)
        try:
            figures, serving, inference = await asyncio.gather(
                status(b"", timeout=timeout_s, metadata=metadata),
                _health(health, "", timeout_s),
                _health(health, INFERENCE_HEALTH_NAME, timeout_s),
            )
        except grpc.aio.AioRpcError as error:
            if error.code() == grpc.StatusCode.UNIMPLEMENTED:
                raise StatusUnavailable(
                    f"{target}: not a hindsight memory server (no {STATUS_METHOD})"
                ) from error
            raise StatusUnavailable(f"{target}: {error.code().name}: {error.details()}") from error
    return ServerStatus(target, serving, inference, json.loads(figures))
