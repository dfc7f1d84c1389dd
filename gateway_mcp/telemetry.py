"""The gateway's OpenTelemetry: the SDK for the process (service hindsight-mcp) per its settings.

A span per tool call comes from the MCP SDK itself (`tools/call memory_recall`, continuing a client's
trace from the request's `_meta` when it sends one); the gRPC channel's interceptor adds a client span per
call, and its duration to `rpc.client.call.duration`, and carries its context to the memory server as
`traceparent` metadata (gateway_mcp/channel.py). OTLP goes over gRPC or HTTP/protobuf, as the standard
OTEL_EXPORTER_OTLP_[TRACES_|METRICS_]PROTOCOL say (hindsight/telemetry.py).
"""

from __future__ import annotations

from gateway_mcp.config import GatewaySettings
from hindsight.telemetry import InstalledTelemetry, TelemetryConfig, install

__all__ = ["SERVICE_NAME", "install_telemetry"]

SERVICE_NAME = "hindsight-mcp"


def install_telemetry(settings: GatewaySettings) -> InstalledTelemetry | None:
    """Call before the gateway's channel is made: the channel asks whether tracing is on. A telemetry
    setting or OTEL_* variable it cannot use (an unknown OTLP protocol) raises TelemetryConfigError,
    which the CLI reports like the gateway's other configuration errors."""
    return install(
        TelemetryConfig(
            SERVICE_NAME, exporter=settings.telemetry_exporter, otlp_endpoint=settings.otlp_endpoint
        )
    )
