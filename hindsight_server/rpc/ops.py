"""`hindsight.ops.v1.Ops/Status` (proto/hindsight/ops/v1/ops.proto): one server's figures (recall
p50/p95/p99 against the target, write latency, backlog, pool, caches), for `hindsight status`.

The figures are for operators and evolve with the telemetry, not part of the memory API's contract
(hindsight.v1): the answer carries them as one JSON object, a google.protobuf.Struct, the same document
StatusBoard.snapshot builds. The service rides on the server's existing port (nothing else to expose,
configure or secure, and it works wherever the gRPC port is reachable), and the standard health service
beside it answers "is it serving". Reflection lists it, so a generic client (grpcurl, buf curl) can call it.

Servers before ops.proto answered the bare JSON document; fetch_status reads both. A `hindsight status`
from before it cannot read a Struct: upgrade the command with the servers.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf import json_format
from grpc_health.v1 import health_pb2, health_pb2_grpc

from hindsight.ops.v1 import ops_pb2, ops_pb2_grpc
from hindsight.tls import ClientTls, open_channel
from hindsight_server.rpc.server import INFERENCE_HEALTH_NAME

OPS_SERVICE = ops_pb2.DESCRIPTOR.services_by_name["Ops"].full_name  # rpc/tracing.py leaves it untraced
STATUS_METHOD = f"/{OPS_SERVICE}/Status"


class OpsServicer(ops_pb2_grpc.OpsServicer):
    def __init__(self, snapshot: Callable[[], dict[str, Any]]) -> None:
        self._snapshot = snapshot

    async def Status(
        self, request: ops_pb2.StatusRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> ops_pb2.StatusResponse:
        response = ops_pb2.StatusResponse()
        # Through JSON: what the snapshot holds (tuples from asdict, say) becomes what a Struct takes.
        response.figures.update(json.loads(json.dumps(self._snapshot())))
        return response


def add_ops_service(server: grpc.aio.Server, snapshot: Callable[[], dict[str, Any]]) -> None:
    ops_pb2_grpc.add_OpsServicer_to_server(OpsServicer(snapshot), server)


def _whole(value: Any) -> Any:
    """A Struct's numbers are doubles: the whole ones back to int (a pid, a count, as the snapshot had
    them; a duration of exactly 12.0 s reads 12), so that figures read as they did from bare JSON."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {key: _whole(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_whole(item) for item in value]
    return value


def figures_from_answer(answer: bytes) -> dict[str, Any]:
    """The figures in an Ops/Status answer: a StatusResponse or, from a server older than ops.proto
    (during a rolling upgrade), the bare JSON document it sent; that starts with "{", which no serialized
    StatusResponse does (its first byte is field 1's tag, 0x0a)."""
    if answer.startswith(b"{"):
        figures: dict[str, Any] = json.loads(answer)
        return figures
    response = ops_pb2.StatusResponse.FromString(answer)
    whole: dict[str, Any] = _whole(json_format.MessageToDict(response.figures))
    return whole


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
        # Bytes in and out, parsed by figures_from_answer: an older server answers bare JSON. The request is
        # an empty StatusRequest, whose bytes are none.
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
    return ServerStatus(target, serving, inference, figures_from_answer(figures))
