"""The channels to the memory servers (the shared client's, the MCP gateway's) keep their connection
through the memory server's ping policy, and retry only what is safe to retry."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Sequence

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1._async import HealthServicer

from gateway_mcp import channel as gateway
from hindsight import client
from hindsight.tls import open_channel
from hindsight_server.rpc import server

CHANNELS = {"shared client": client.CHANNEL_OPTIONS, "mcp gateway": gateway.CHANNEL_OPTIONS}
# The production intervals a hundred times shorter: the client pings every 300 ms, the server accepts
# pings every 100 ms and pings every 600 ms itself. The timeouts (how long a ping's answer may take) stay.
SCALE = 100
_INTERVALS = ("grpc.keepalive_time_ms",)


def _scaled_server() -> server.Keepalive:
    production = server.KEEPALIVE
    return dataclasses.replace(
        production,
        time_ms=production.time_ms // SCALE,
        min_client_ping_interval_ms=production.min_client_ping_interval_ms // SCALE,
    )


def _scaled_channel(options: Sequence[tuple[str, int | str]]) -> list[tuple[str, int | str]]:
    assert any(key in _INTERVALS for key, _ in options)
    return [(key, int(value) // SCALE if key in _INTERVALS else value) for key, value in options]


class _PeerRecordingHealth(HealthServicer):  # type: ignore[misc]  # grpc_health ships no annotations
    """The health service, noting the client address of each check: a new connection, a new port."""

    def __init__(self) -> None:
        super().__init__()
        self.peers: list[str] = []

    async def Check(
        self, request: health_pb2.HealthCheckRequest, context: grpc.aio.ServicerContext[object, object]
    ) -> health_pb2.HealthCheckResponse:
        self.peers.append(context.peer())
        return await super().Check(request, context)


async def _record_states(channel: grpc.aio.Channel, states: list[grpc.ChannelConnectivity]) -> None:
    while True:
        state = channel.get_state()
        await channel.wait_for_state_change(state)
        states.append(channel.get_state())


@pytest.mark.parametrize("name", CHANNELS)
async def test_an_idle_channel_keeps_its_connection_through_the_servers_ping_policy(name: str) -> None:
    keepalive = _scaled_server()
    options = _scaled_channel(CHANNELS[name])
    health = _PeerRecordingHealth()
    await health.set("", health_pb2.HealthCheckResponse.SERVING)
    listener = grpc.aio.server(options=server.server_options(1024 * 1024, keepalive))
    health_pb2_grpc.add_HealthServicer_to_server(health, listener)
    port = listener.add_insecure_port("127.0.0.1:0")
    await listener.start()
    try:
        channel = open_channel(f"127.0.0.1:{port}", None, options)
        async with channel:
            stub = health_pb2_grpc.HealthStub(channel)
            await stub.Check(health_pb2.HealthCheckRequest(), timeout=5)
            assert channel.get_state() == grpc.ChannelConnectivity.READY
            states: list[grpc.ChannelConnectivity] = []
            watcher = asyncio.create_task(_record_states(channel, states))
            # Idle ten client pings long: a server that took them for abuse (more than max_ping_strikes
            # pings inside its minimum interval) would have sent GOAWAY after the third.
            client_ping_s = int(dict(options)["grpc.keepalive_time_ms"]) / 1000
            await asyncio.sleep(10 * client_ping_s)
            # No wait_for_ready: on a connection that was closed this fails or reconnects, and says so.
            await stub.Check(health_pb2.HealthCheckRequest(), timeout=5)
            watcher.cancel()
    finally:
        await listener.stop(None)
    assert states == [], f"the idle channel left READY: {[state.name for state in states]}"
    assert len(health.peers) == 2 and health.peers[0] == health.peers[1], health.peers  # one connection


@pytest.mark.parametrize("name", CHANNELS)
def test_retries_are_throttled_and_only_for_calls_that_did_not_run(name: str) -> None:
    config = json.loads(str(dict(CHANNELS[name])["grpc.service_config"]))
    assert config["retryThrottling"] == {"maxTokens": 10, "tokenRatio": 0.1}
    for method in config["methodConfig"]:
        assert method["retryPolicy"]["retryableStatusCodes"] == ["UNAVAILABLE", "RESOURCE_EXHAUSTED"]
