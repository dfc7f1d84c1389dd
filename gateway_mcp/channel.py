"""One gRPC channel to the memory servers: round robin over the configured list, retries for safe calls."""

from __future__ import annotations

import json
from collections.abc import Sequence

import grpc

from gateway_mcp.config import channel_target
from hindsight.client import HindsightClient

__all__ = ["memory_client"]

_SERVICE = "hindsight.v1.MemoryService"
# Reads are idempotent, and every Write the gateway sends carries an idempotency key (a retried Write
# returns the memory the first attempt stored), so both may be retried; UNAVAILABLE only: the call
# did not reach a server, or the server could not start it. The round_robin policy sends a retry to
# the next server, so one server down costs a retry, not an error.
_SERVICE_CONFIG = json.dumps(
    {
        "loadBalancingConfig": [{"round_robin": {}}],
        "methodConfig": [
            {
                "name": [
                    {"service": _SERVICE, "method": method}
                    for method in ("Get", "List", "Recall", "Summarize", "History", "Write")
                ],
                "retryPolicy": {
                    "maxAttempts": 3,
                    "initialBackoff": "0.05s",
                    "maxBackoff": "0.5s",
                    "backoffMultiplier": 2,
                    "retryableStatusCodes": ["UNAVAILABLE"],
                },
            }
        ],
    }
)


def memory_client(targets: Sequence[str], deadline_s: float) -> HindsightClient:
    """The shared typed client over a channel of the gateway's own: every call gets `deadline_s`."""
    target = channel_target(targets)
    channel = grpc.aio.insecure_channel(
        target,
        options=[
            ("grpc.service_config", _SERVICE_CONFIG),
            ("grpc.enable_retries", 1),
            ("grpc.max_receive_message_length", 16 * 1024 * 1024),
        ],
    )
    return HindsightClient(target, timeout_s=deadline_s, channel=channel)
