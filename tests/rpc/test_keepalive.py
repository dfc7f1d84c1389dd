"""The shared client's channel settings agree with what the memory server accepts."""

from __future__ import annotations

import json

from hindsight import client
from hindsight_server.rpc import server


def test_the_clients_pings_are_ones_the_server_accepts() -> None:
    # A client pinging more often than the server's minimum is sent GOAWAY (too_many_pings).
    assert client.KEEPALIVE_TIME_MS >= server.MIN_CLIENT_PING_INTERVAL_MS
    options = dict(client.CHANNEL_OPTIONS)
    assert options["grpc.keepalive_time_ms"] == client.KEEPALIVE_TIME_MS
    assert options["grpc.keepalive_permit_without_calls"] == 1  # an idle channel keeps its connection


def test_retries_are_throttled_and_only_for_calls_that_did_not_run() -> None:
    config = json.loads(str(dict(client.CHANNEL_OPTIONS)["grpc.service_config"]))
    assert config["retryThrottling"] == {"maxTokens": 10, "tokenRatio": 0.1}
    (method,) = config["methodConfig"]
    assert method["retryPolicy"]["retryableStatusCodes"] == ["UNAVAILABLE"]
