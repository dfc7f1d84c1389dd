#!/usr/bin/env python3
"""Container health checks for the hindsight image (installed as /usr/local/bin/hindsight-healthcheck).

    hindsight-healthcheck grpc HOST:PORT [SERVICE]   the standard gRPC health service says SERVING
    hindsight-healthcheck grpcs HOST:PORT [SERVICE]  the same over TLS: the CA in
        HINDSIGHT_HEALTHCHECK_CA_FILE (empty: the system's), with mTLS the probe's certificate and key in
        HINDSIGHT_HEALTHCHECK_CERT_FILE and HINDSIGHT_HEALTHCHECK_KEY_FILE (Kubernetes' gRPC probe
        speaks no TLS)
    hindsight-healthcheck http URL                   GET URL answers 2xx

Exit 0 when healthy, 1 otherwise (the reason on stderr), as Docker's HEALTHCHECK expects. The image has
no grpc_health_probe binary (nothing may be downloaded at build time but registry packages), and the
memory server already depends on grpcio-health-checking, so the probe is this short script.
"""

from __future__ import annotations

import os
import sys
import urllib.error
import urllib.request

USAGE = "usage: hindsight-healthcheck grpc|grpcs HOST:PORT [SERVICE] | http URL"
TIMEOUT_S = 2.0


def _read(variable: str) -> bytes | None:
    path = os.environ.get(variable, "")
    if not path:
        return None
    with open(path, "rb") as file:
        return file.read()


def check_grpc(target: str, service: str, tls: bool = False) -> str:
    """'' when the service is SERVING, else why not."""
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    if tls:
        try:
            credentials = grpc.ssl_channel_credentials(
                root_certificates=_read("HINDSIGHT_HEALTHCHECK_CA_FILE"),
                private_key=_read("HINDSIGHT_HEALTHCHECK_KEY_FILE"),
                certificate_chain=_read("HINDSIGHT_HEALTHCHECK_CERT_FILE"),
            )
        except OSError as exc:
            return f"{target}: cannot read a TLS file: {exc}"
        channel = grpc.secure_channel(target, credentials)
    else:
        channel = grpc.insecure_channel(target)
    with channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=service), timeout=TIMEOUT_S
            )
        except grpc.RpcError as exc:
            return f"{target} {service or '(server)'}: {exc.code().name} {exc.details() or ''}".rstrip()
    if reply.status != health_pb2.HealthCheckResponse.SERVING:
        status = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
        return f"{target} {service or '(server)'}: {status}"
    return ""


def check_http(url: str) -> str:
    """'' when GET url answers 2xx, else why not."""
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response:
            status = int(response.status)
    except urllib.error.HTTPError as exc:
        return f"{url}: HTTP {exc.code}"
    except (urllib.error.URLError, OSError) as exc:
        return f"{url}: {exc}"
    return "" if 200 <= status < 300 else f"{url}: HTTP {status}"


def main(argv: list[str]) -> int:
    if len(argv) in (2, 3) and argv[0] in ("grpc", "grpcs"):
        problem = check_grpc(argv[1], argv[2] if len(argv) == 3 else "", tls=argv[0] == "grpcs")
    elif len(argv) == 2 and argv[0] == "http":
        problem = check_http(argv[1])
    else:
        print(USAGE, file=sys.stderr)
        return 1  # Docker reserves exit status 2
    if problem:
        print(f"unhealthy: {problem}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
