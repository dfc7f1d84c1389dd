"""Builds the grpc.aio server: MemoryService, the standard health service, reflection, interceptors."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1._async import HealthServicer

from hindsight.ops.v1 import ops_pb2
from hindsight.v1 import memory_pb2 as pb
from hindsight.v1 import memory_pb2_grpc as pb_grpc
from hindsight.v1 import webhooks_pb2
from hindsight_server.rpc.admission import AdmissionInterceptor
from hindsight_server.rpc.auth import AuthInterceptor
from hindsight_server.rpc.interceptors import ErrorMappingInterceptor, RequestIdInterceptor
from hindsight_server.rpc.reflection import enable_reflection
from hindsight_server.rpc.servicer import MemoryServicer
from hindsight_server.rpc.tracing import TracingInterceptor

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["MemoryService"].full_name
# Reported separately: the memory service keeps SERVING (degraded) while the inference tier is away.
INFERENCE_HEALTH_NAME = "hindsight.inference"
_MiB = 1024 * 1024
_MAX_CONNECTION_AGE_MS = 5 * 60 * 1000
_MAX_CONNECTION_AGE_GRACE_MS = 30 * 1000


@dataclass(frozen=True)
class Keepalive:
    """The server's HTTP/2 pings: it pings an idle connection each `time_ms` and closes it without an
    answer in `timeout_ms` (a client that vanished); it accepts clients' pings down to every
    `min_client_ping_interval_ms`, idle or not (the shared client and the MCP gateway ping every 30 s,
    hindsight.client.KEEPALIVE_TIME_MS), and sends GOAWAY (too_many_pings) to a client that pings faster
    more than `max_ping_strikes` times in a row."""

    time_ms: int = 60_000
    timeout_ms: int = 20_000
    min_client_ping_interval_ms: int = 10_000
    max_ping_strikes: int = 2


KEEPALIVE = Keepalive()


def server_options(max_message_bytes: int, keepalive: Keepalive = KEEPALIVE) -> list[tuple[str, int]]:
    """The memory server's channel arguments (tests/rpc/test_keepalive.py runs them with the ping
    intervals scaled down)."""
    return [
        ("grpc.max_receive_message_length", max_message_bytes),
        ("grpc.max_send_message_length", max(max_message_bytes, 16 * _MiB)),
        ("grpc.so_reuseport", 0),
        # Clients that balance over DNS (a headless Service) re-resolve only when a connection
        # closes: ending connections after a few minutes lets them find servers added since.
        ("grpc.max_connection_age_ms", _MAX_CONNECTION_AGE_MS),
        ("grpc.max_connection_age_grace_ms", _MAX_CONNECTION_AGE_GRACE_MS),
        ("grpc.keepalive_time_ms", keepalive.time_ms),
        ("grpc.keepalive_timeout_ms", keepalive.timeout_ms),
        # Also what lets a client ping a connection with no call on it (otherwise: once in 2 hours).
        ("grpc.keepalive_permit_without_calls", 1),
        # gRPC core's GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS (its default: 5 minutes).
        ("grpc.http2.min_ping_interval_without_data_ms", keepalive.min_client_ping_interval_ms),
        ("grpc.http2.max_ping_strikes", keepalive.max_ping_strikes),
    ]


def build_server(
    servicer: MemoryServicer,
    health: HealthServicer,
    max_message_bytes: int,
    auth: AuthInterceptor,
    admission: AdmissionInterceptor,
    *,
    traced: bool = False,
) -> grpc.aio.Server:
    # `traced` (tracing is on): a server span per call, outermost so that it times the others too.
    tracing = [TracingInterceptor()] if traced else []
    server = grpc.aio.server(
        # Outermost first: the request id, then the error table around everything else (auth included),
        # then admission, which weighs only the calls auth let in, by the key's tenant.
        interceptors=[*tracing, RequestIdInterceptor(), ErrorMappingInterceptor(), auth, admission],
        options=server_options(max_message_bytes),
    )
    pb_grpc.add_MemoryServiceServicer_to_server(servicer, server)
    health_pb2_grpc.add_HealthServicer_to_server(health, server)
    # Ops is added by process/telemetry.py attach_status (rpc/ops.py), WebhooksService by process/server.py
    # (rpc/webhooks.py); reflection lists them from here.
    enable_reflection(
        server,
        [
            SERVICE_NAME,
            health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
            ops_pb2.DESCRIPTOR.services_by_name["Ops"].full_name,
            webhooks_pb2.DESCRIPTOR.services_by_name["WebhooksService"].full_name,
        ],
    )
    return server


def _status(serving: bool) -> health_pb2.HealthCheckResponse.ServingStatus.ValueType:
    return health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING


def add_port(
    server: grpc.aio.Server, address: str, tls_cert_file: str, tls_key_file: str, tls_client_ca_file: str
) -> int:
    """Listens on `address`, with TLS when a certificate and key are configured, and requiring client
    certificates signed by `tls_client_ca_file` when it is set (mTLS)."""
    if not tls_cert_file:
        return server.add_insecure_port(address)
    pair = (Path(tls_key_file).read_bytes(), Path(tls_cert_file).read_bytes())
    client_ca = Path(tls_client_ca_file).read_bytes() if tls_client_ca_file else None
    credentials = grpc.ssl_server_credentials(
        [pair], root_certificates=client_ca, require_client_auth=client_ca is not None
    )
    return server.add_secure_port(address, credentials)


async def set_serving(health: HealthServicer, serving: bool) -> None:
    for service in ("", SERVICE_NAME):
        await health.set(service, _status(serving))


async def set_inference_serving(health: HealthServicer, serving: bool) -> None:
    await health.set(INFERENCE_HEALTH_NAME, _status(serving))
