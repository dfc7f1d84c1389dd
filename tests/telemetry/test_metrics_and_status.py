"""Metrics of real recalls (latency histograms, the p99-target gauge on both sides of the target) and
`hindsight status` against running servers."""

from __future__ import annotations

import asyncio
import gc
import json
import re
import socket
import sys
from collections.abc import Callable
from typing import Any

from hindsight.client import HindsightClient
from hindsight.telemetry import RPC_DURATION_BUCKETS_S
from hindsight_server.config import Settings
from hindsight_server.process.running import RunningServer
from hindsight_server.process.server import start_server
from hindsight_server.telemetry.status import SERVER_ATTRIBUTE
from hindsight_server.telemetry.units import DB_OPERATION_BUCKETS_S, STAGE_BUCKETS_S
from tests.conftest import REPO_ROOT
from tests.telemetry.conftest import Telemetry, attributes_of, database_attributes, histogram_points


def _for(server: RunningServer, points: list[Any]) -> list[Any]:
    assert server.status is not None
    return [p for p in points if p.attributes.get(SERVER_ATTRIBUTE) == server.status.name]


async def _recall_a_few(client: HindsightClient, tenant: str) -> None:
    await client.write(tenant, "用户偏好靠窗座位", tier="semantic", kind="preference")
    for _ in range(3):
        await client.recall(tenant, "靠窗")


async def test_recall_latency_and_the_target_met(
    otel: Telemetry, traced_server: RunningServer, traced_client: HindsightClient, tenant: str
) -> None:
    await _recall_a_few(traced_client, tenant)
    latency = otel.points("hindsight.recall.duration")
    assert latency and sum(point.count for point in latency) >= 3
    # Seconds, OpenTelemetry's unit for durations, with boundaries made for seconds.
    for name in ("hindsight.recall.duration", "hindsight.stage.duration", "hindsight.write.duration"):
        (metric,) = otel.collected(name)
        assert metric.unit == "s", name
        assert all(p.explicit_bounds == STAGE_BUCKETS_S for p in histogram_points(metric)), name
    # A few recalls on a test database: well under 60 s each (in ms they would read as minutes).
    assert all(0 < point.max < 60 for point in latency)
    stages = {p.attributes["hindsight.stage"] for p in otel.points("hindsight.stage.duration")}
    assert {"recall.channel.lexical", "recall.fuse", "recall.rank", "recall.pack"} <= stages
    (met,) = _for(traced_server, otel.points("hindsight.recall.p99_target_met"))
    assert met.value == 1 and met.attributes["hindsight.target_ms"] == 60_000
    (p99,) = _for(traced_server, otel.points("hindsight.recall.p99"))
    assert 0 < p99.value < 60_000
    by_state = {
        p.attributes["db.client.connection.state"]: p.value
        for p in _for(traced_server, otel.points("db.client.connection.count"))
    }
    assert set(by_state) == {"used", "idle"}
    assert 1 <= by_state["used"] + by_state["idle"] <= traced_server.pool.get_max_size()


async def test_rpc_and_database_durations_follow_the_conventions(
    otel: Telemetry, traced_client: HindsightClient, tenant: str, postgres_dsn: str
) -> None:
    """rpc.server.call.duration and db.client.operation.duration: seconds, the conventions' buckets
    and attributes; the deprecated rpc.server.duration (ms) is gone."""
    await _recall_a_few(traced_client, tenant)
    assert otel.collected("rpc.server.duration") == []

    (rpc,) = otel.collected("rpc.server.call.duration")
    assert rpc.unit == "s"
    recalls = [
        p
        for p in histogram_points(rpc)
        if attributes_of(p)["rpc.method"] == "hindsight.v1.MemoryService/Recall"
    ]
    (ok,) = [p for p in recalls if attributes_of(p)["rpc.response.status_code"] == "OK"]
    assert dict(attributes_of(ok)) == {
        "rpc.system.name": "grpc",
        "rpc.method": "hindsight.v1.MemoryService/Recall",
        "rpc.response.status_code": "OK",
    }
    assert ok.count >= 3 and 0 < ok.max < 60 and ok.explicit_bounds == RPC_DURATION_BUCKETS_S

    (db,) = otel.collected("db.client.operation.duration")
    assert db.unit == "s"
    on_memories = [
        p for p in histogram_points(db) if attributes_of(p).get("db.collection.name") == "memories"
    ]
    assert {attributes_of(p)["db.operation.name"] for p in on_memories} >= {"SELECT", "INSERT"}
    where = database_attributes(postgres_dsn)
    for point in on_memories:
        assert point.explicit_bounds == DB_OPERATION_BUCKETS_S
        assert attributes_of(point)["db.system.name"] == "postgresql"
        assert {key: attributes_of(point)[key] for key in where} == where
        assert "error.type" not in attributes_of(point) and 0 < point.max < 60


async def test_the_target_gauge_flips_to_missed_below_any_latency(
    otel: Telemetry, make_settings: Callable[..., Settings], tenant: str
) -> None:
    strict = await start_server(make_settings(telemetry__recall_p99_target_ms=0.001))
    try:
        assert strict.status is not None
        assert strict.status.target_met() is None  # nothing recalled yet: no verdict, no data point
        assert _for(strict, otel.points("hindsight.recall.p99_target_met")) == []
        async with HindsightClient(f"127.0.0.1:{strict.port}", timeout_s=10) as client:
            await _recall_a_few(client, tenant)
        (missed,) = _for(strict, otel.points("hindsight.recall.p99_target_met"))
        assert missed.value == 0
        assert strict.status.snapshot()["recall"]["target_met"] is False
        # The same board flips back once the target is one every recall keeps.
        strict.status.target_p99_ms = 60_000
        (met,) = _for(strict, otel.points("hindsight.recall.p99_target_met"))
        assert met.value == 1
    finally:
        await strict.stop()


async def _hindsight(*args: str) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "hindsight_server",
        *args,
        cwd=REPO_ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def test_status_json_shows_the_figures(
    traced_server: RunningServer, traced_client: HindsightClient, tenant: str
) -> None:
    await _recall_a_few(traced_client, tenant)
    gc.collect()  # the server runs in this process: its board records this collection's pause
    code, out, err = await _hindsight("status", "--json", "--target", f"127.0.0.1:{traced_server.port}")
    assert code == 0, err
    (server,) = json.loads(out)["servers"]
    assert server["serving"] == "SERVING" and server["inference"] == "NOT_CONFIGURED"
    figures = server["figures"]
    recall = figures["recall"]
    assert recall["count"] >= 3 and 0 < recall["p50_ms"] <= recall["p95_ms"] <= recall["p99_ms"]
    assert recall["target_p99_ms"] == 60_000 and recall["target_met"] is True
    assert recall["stages"]["recall.fuse"]["count"] >= 3
    assert figures["write"]["write"]["count"] >= 1
    assert figures["pool"]["max_size"] >= figures["pool"]["size"] >= 1
    pinned = traced_server.pool.pinned  # counted with the pool's own: the server's connections
    assert pinned is not None
    assert figures["pool"]["max_size"] == traced_server.pool.get_max_size() + pinned.get_max_size()
    assert set(figures["embedding_backlog"]) >= {"pending", "capped", "age_s"}
    assert figures["inference"] is None and figures["query_cache"] == {}
    collector = figures["garbage_collector"]
    assert collector["pauses"]["count"] >= 1 and collector["pauses"]["max_ms"] >= 0
    assert collector["frozen_objects"] == gc.get_freeze_count()  # none in a test process: it serves no call

    assert set(figures["hot_scopes"]) == {
        *("held", "memories", "bytes", "loads", "served", "missed"),
        *("vector_searches", "vector_passes"),
    }

    code, out, err = await _hindsight("status", "--target", f"127.0.0.1:{traced_server.port}")
    assert code == 0, err
    assert "target p99 <= 60000 ms: met" in out and "SERVING" in out


async def test_status_shows_the_subjects_held(
    traced_server: RunningServer, traced_client: HindsightClient, tenant: str
) -> None:
    """A subject recalled three times is read into the server's index; later recalls are served from it."""
    await traced_client.write(
        tenant, "Ann prefers window seats", tier="semantic", kind="preference", subject="ann"
    )
    for _ in range(20):
        found = await traced_client.recall(tenant, "window seats", subject="ann")
        assert [hit.memory.content for hit in found.hits] == ["Ann prefers window seats"]
        code, out, err = await _hindsight("status", "--json", "--target", f"127.0.0.1:{traced_server.port}")
        assert code == 0, err
        held = json.loads(out)["servers"][0]["figures"]["hot_scopes"]
        if held["served"]:
            break
    assert held["held"] >= 1 and held["memories"] >= 1 and held["bytes"] > 0 and held["loads"] >= 1
    assert held["missed"] >= 3  # the recalls that made it hot
    # No inference tier here: no query vector, so no vector search (tests/store/test_scope_index.py has them).
    assert held["vector_searches"] == held["vector_passes"] == 0
    code, out, err = await _hindsight("status", "--target", f"127.0.0.1:{traced_server.port}")
    assert code == 0, err
    assert re.search(
        r"subjects +\d+ held in memory \(\d+ memories, [\d.]+ MB\); \d+ recalls answered.*"
        r" \d+ vector searches in \d+ passes",
        out,
    ), out


async def test_status_of_an_unreachable_server_fails_clearly(traced_server: RunningServer) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    code, out, err = await _hindsight(
        "status", "--json", "--target", f"127.0.0.1:{traced_server.port}", "--target", f"127.0.0.1:{closed}"
    )
    assert code == 3  # not reached: the client commands' code
    assert f"hindsight status: cannot reach 127.0.0.1:{closed}: UNAVAILABLE" in err
    servers = json.loads(out)["servers"]
    assert "figures" in servers[0] and "error" in servers[1]  # the reachable one is still shown
