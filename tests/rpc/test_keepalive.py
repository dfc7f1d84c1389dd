"""The channels to the memory servers (the shared client's, the MCP gateway's) agree with what the
memory server accepts."""

from __future__ import annotations

import json

import pytest

from gateway_mcp import channel as gateway
from hindsight import client
from hindsight_server.rpc import server

CHANNELS = {"shared client": client.CHANNEL_OPTIONS, "mcp gateway": gateway.CHANNEL_OPTIONS}


@pytest.mark.parametrize("name", CHANNELS)
def test_the_channels_pings_are_ones_the_server_accepts(name: str) -> None:
    # A client pinging more often than the server's minimum is sent GOAWAY (too_many_pings).
    options = dict(CHANNELS[name])
    assert int(options["grpc.keepalive_time_ms"]) >= server.MIN_CLIENT_PING_INTERVAL_MS
    assert options["grpc.keepalive_permit_without_calls"] == 1  # an idle channel keeps its connection


@pytest.mark.parametrize("name", CHANNELS)
def test_retries_are_throttled_and_only_for_calls_that_did_not_run(name: str) -> None:
    config = json.loads(str(dict(CHANNELS[name])["grpc.service_config"]))
    assert config["retryThrottling"] == {"maxTokens": 10, "tokenRatio": 0.1}
    for method in config["methodConfig"]:
        assert method["retryPolicy"]["retryableStatusCodes"] == ["UNAVAILABLE", "RESOURCE_EXHAUSTED"]
