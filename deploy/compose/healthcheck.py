#!/usr/bin/env python3
"""Container health checks for the hindsight image (installed as /usr/local/bin/hindsight-healthcheck).

    hindsight-healthcheck grpc HOST:PORT [SERVICE]   the standard gRPC health service says SERVING
    hindsight-healthcheck http URL                   GET URL answers 2xx

Exit 0 when healthy, 1 otherwise (the reason on stderr), as Docker's HEALTHCHECK expects. The image has
no grpc_health_probe binary (nothing may be downloaded at build time but registry packages), and the
memory server already depends on grpcio-health-checking, so the probe is this short script.
"""

from __future__ import annotations

import sys
import urllib.error
import urllib.request

USAGE = "usage: hindsight-healthcheck grpc HOST:PORT [SERVICE] | http URL"
TIMEOUT_S = 2.0


def check_grpc(target: str, service: str) -> str:
    """'' when the service is SERVING, else why not."""
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    with grpc.insecure_channel(target) as channel:
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
    if len(argv) in (2, 3) and argv[0] == "grpc":
        problem = check_grpc(argv[1], argv[2] if len(argv) == 3 else "")
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
