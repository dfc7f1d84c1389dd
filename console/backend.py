"""The console's only way to the memory servers: gRPC, through the shared client (hindsight.client) on
one round-robin channel, each logged-in session with its own typed client carrying its API key; the
Ops/Status figures of each server on a channel of its own; the servers' Prometheus metrics over HTTP
when an endpoint is configured. Never SQL (an import-linter contract holds that line)."""

from __future__ import annotations

import asyncio
import json
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc
import httpx2
from google.protobuf import json_format
from grpc_health.v1 import health_pb2, health_pb2_grpc

from console.config import ConsoleSettings
from hindsight.client import RETRY_THROTTLING, HindsightClient, channel_options
from hindsight.ops.v1 import ops_pb2, ops_pb2_grpc
from hindsight.tls import open_channel

__all__ = ["Backend", "MetricLine", "OpsSample", "ServerFigures"]

_SERVICE_CONFIG = json.dumps(
    {
        "loadBalancingConfig": [{"round_robin": {}}],
        "methodConfig": [
            {
                "name": [{"service": "hindsight.v1.MemoryService"}],
                "retryPolicy": {
                    "maxAttempts": 3,
                    "initialBackoff": "0.05s",
                    "maxBackoff": "0.5s",
                    "backoffMultiplier": 2,
                    "retryableStatusCodes": ["UNAVAILABLE"],
                },
            }
        ],
        "retryThrottling": RETRY_THROTTLING,
    }
)
INFERENCE_HEALTH = "hindsight.inference"  # the memory server's health entry for its inference tier
MAX_METRICS_BYTES = 4 * 1024 * 1024
MAX_METRIC_LINES = 400  # shown on the Operations page
SAMPLES_KEPT = 120  # per server: the console's own history of the figures, for the charts
# The series of the servers' metrics the Operations page shows (OpenTelemetry names as Prometheus
# exports them: dots become underscores, units and _total appended).
METRIC_PREFIXES = ("hindsight_", "db_client_connection")


def _target(targets: Sequence[str]) -> str:
    return targets[0] if len(targets) == 1 else "ipv4:" + ",".join(targets)


@dataclass(frozen=True, slots=True)
class ServerFigures:
    target: str
    serving: str = ""
    inference: str = ""
    figures: dict[str, Any] = field(default_factory=dict)
    error: str = ""


@dataclass(frozen=True, slots=True)
class OpsSample:
    at: float
    p50_ms: float | None
    p95_ms: float | None
    p99_ms: float | None


@dataclass(frozen=True, slots=True)
class MetricLine:
    name: str
    labels: str
    value: str


def _whole(value: Any) -> Any:
    """A Struct carries numbers as doubles: whole ones back to int (a pid, a count)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {key: _whole(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_whole(item) for item in value]
    return value


def parse_metrics(text: str) -> list[MetricLine]:
    """The hindsight series of a Prometheus text exposition, at most MAX_METRIC_LINES; histogram
    buckets are left out (their _sum and _count stay)."""
    lines: list[MetricLine] = []
    for raw in text.splitlines():
        if raw.startswith("#") or not raw.strip() or not raw.startswith(METRIC_PREFIXES):
            continue
        head, _, value = raw.rpartition(" ")
        name, brace, labels = head.partition("{")
        if name.endswith("_bucket"):
            continue
        lines.append(MetricLine(name, labels.rstrip("}") if brace else "", value))
        if len(lines) >= MAX_METRIC_LINES:
            break
    return lines


class Backend:
    def __init__(self, settings: ConsoleSettings) -> None:
        self.settings = settings
        self._tls = settings.targets_client_tls
        self._channel = open_channel(_target(settings.targets), self._tls, channel_options(_SERVICE_CONFIG))
        self._server_channels: dict[str, grpc.aio.Channel] = {}
        self.samples: dict[str, deque[OpsSample]] = {}
        self._http: httpx2.AsyncClient | None = None

    def client(self, api_key: str) -> HindsightClient:
        """A typed client over the shared channel with this key (its consistency tokens are its own:
        a session reads what it just changed)."""
        return HindsightClient(
            _target(self.settings.targets),
            timeout_s=self.settings.deadline_s,
            channel=self._channel,
            api_key=api_key,
        )

    def _server_channel(self, target: str) -> grpc.aio.Channel:
        channel = self._server_channels.get(target)
        if channel is None:
            channel = self._server_channels[target] = open_channel(target, self._tls, ())
        return channel

    async def _one_server(self, target: str, api_key: str) -> ServerFigures:
        channel = self._server_channel(target)
        metadata = (("authorization", f"Bearer {api_key}"),) if api_key else None
        timeout = self.settings.deadline_s
        health = health_pb2_grpc.HealthStub(channel)

        async def check(service: str) -> str:
            try:
                answer = await health.Check(health_pb2.HealthCheckRequest(service=service), timeout=timeout)
            except grpc.aio.AioRpcError as error:
                if error.code() == grpc.StatusCode.NOT_FOUND:
                    return "NOT_CONFIGURED"
                raise
            return str(health_pb2.HealthCheckResponse.ServingStatus.Name(answer.status))

        try:
            status, serving, inference = await asyncio.gather(
                ops_pb2_grpc.OpsStub(channel).Status(
                    ops_pb2.StatusRequest(), timeout=timeout, metadata=metadata
                ),
                check(""),
                check(INFERENCE_HEALTH),
            )
        except grpc.aio.AioRpcError as error:
            return ServerFigures(target, error=f"{error.code().name}: {error.details()}")
        figures: dict[str, Any] = _whole(json_format.MessageToDict(status.figures))
        self._sample(target, figures)
        return ServerFigures(target, serving, inference, figures)

    def _sample(self, target: str, figures: dict[str, Any]) -> None:
        recall = figures.get("recall", {})
        kept = self.samples.setdefault(target, deque(maxlen=SAMPLES_KEPT))
        kept.append(OpsSample(time.time(), recall.get("p50_ms"), recall.get("p95_ms"), recall.get("p99_ms")))

    async def servers(self, api_key: str) -> list[ServerFigures]:
        """Each configured server's health and Ops/Status figures, asked at once."""
        return list(await asyncio.gather(*(self._one_server(t, api_key) for t in self.settings.targets)))

    async def metrics(self) -> tuple[list[MetricLine], str]:
        """The servers' metrics (lines, "") or why they could not be read ([], reason); ([], "") when no
        endpoint is configured."""
        url = self.settings.metrics_url
        if not url:
            return [], ""
        if self._http is None:
            self._http = httpx2.AsyncClient(timeout=2.0)
        try:
            async with self._http.stream("GET", url) as response:
                response.raise_for_status()
                body = bytearray()
                async for chunk in response.aiter_bytes():
                    body += chunk
                    if len(body) > MAX_METRICS_BYTES:
                        return [], f"larger than {MAX_METRICS_BYTES // (1024 * 1024)} MiB"
        except httpx2.HTTPError as error:
            return [], str(error) or type(error).__name__
        # Megabytes of text: parsed off the event loop.
        return await asyncio.to_thread(parse_metrics, body.decode("utf-8", "replace")), ""

    async def close(self) -> None:
        await self._channel.close()
        for channel in self._server_channels.values():
            await channel.close()
        if self._http is not None:
            await self._http.aclose()
