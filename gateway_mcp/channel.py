"""One gRPC channel to the memory servers: round robin over the configured list, retries for safe calls."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from gateway_mcp.config import channel_target
from hindsight.client import RETRY_THROTTLING, HindsightClient, channel_options
from hindsight.telemetry import client_interceptors
from hindsight.tls import ClientTls, open_channel

__all__ = ["MemoryClients"]

_SERVICE = "hindsight.v1.MemoryService"
# Reads are idempotent, and every Write and Erase the gateway sends carries an idempotency key (a
# retried Write returns the memory the first attempt stored, a retried Erase the first one's counts),
# so all may be retried; UNAVAILABLE only: the call
# did not reach a server, or the server could not start it. The round_robin policy sends a retry to
# the next server, so one server down costs a retry, not an error.
_SERVICE_CONFIG = json.dumps(
    {
        "loadBalancingConfig": [{"round_robin": {}}],
        "methodConfig": [
            {
                "name": [
                    {"service": _SERVICE, "method": method}
                    for method in ("Get", "List", "Recall", "Summarize", "History", "Write", "Erase")
                ],
                "retryPolicy": {
                    "maxAttempts": 3,
                    "initialBackoff": "0.05s",
                    "maxBackoff": "0.5s",
                    "backoffMultiplier": 2,
                    "retryableStatusCodes": ["UNAVAILABLE", "RESOURCE_EXHAUSTED"],
                },
            }
        ],
        "retryThrottling": RETRY_THROTTLING,
    }
)

CHANNEL_OPTIONS = channel_options(_SERVICE_CONFIG)


class MemoryClients:
    """One channel of the gateway's own (round robin, retries) and, over it, a typed client per tenant
    that carries that tenant's API key: every call gets `deadline_s`."""

    def __init__(
        self,
        targets: Sequence[str],
        deadline_s: float,
        api_keys: Mapping[str, str],
        tls: ClientTls | None = None,
    ) -> None:
        self._target = channel_target(targets)
        self._deadline_s = deadline_s
        self._api_keys = dict(api_keys)
        self._channel = open_channel(
            self._target,
            tls,
            CHANNEL_OPTIONS,
            # With tracing on, each call is a client span whose context the server continues.
            interceptors=client_interceptors(self._target),
        )
        self._clients: dict[str, HindsightClient] = {}

    def for_tenant(self, tenant: str) -> HindsightClient:
        client = self._clients.get(tenant)
        if client is None:
            client = self._clients[tenant] = HindsightClient(
                self._target,
                timeout_s=self._deadline_s,
                channel=self._channel,
                api_key=self._api_keys.get(tenant, ""),
            )
        return client

    async def close(self) -> None:
        await self._channel.close()
