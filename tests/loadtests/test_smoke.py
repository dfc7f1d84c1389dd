"""The locust load test, 10 seconds headless with a few users, against the session's memory server and an
MCP gateway in this process: every request type of the mix is made and none fails."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sys
from pathlib import Path

import pytest

from gateway_mcp.config import load_gateway_settings
from hindsight.client import HindsightClient
from hindsight_server.bench.corpus import recall_corpus
from hindsight_server.bench.recall import ensure_loaded
from hindsight_server.process.running import RunningServer
from loadtests.run import figures, locust_argv, report
from tests.support.mcp_sessions import http_gateway

# Never import locust here: it monkey-patches the whole process for gevent (the suite runs on asyncio).
if importlib.util.find_spec("locust") is None:
    pytest.skip("locust is not installed (the dev extras have it)", allow_module_level=True)

MEMORIES, TENANTS, SECONDS = 300, 10, 10


@pytest.mark.timeout(60)
async def test_a_short_locust_run_makes_every_call_without_errors(
    server: RunningServer, tmp_path: Path
) -> None:
    target = f"127.0.0.1:{server.port}"
    async with HindsightClient(target, timeout_s=30) as client:
        await ensure_loaded(client, recall_corpus(MEMORIES, tenants=TENANTS), progress=None)
    settings = load_gateway_settings(port=0, targets=[target], tenant="load-mcp", deadline_s=10.0)
    async with http_gateway(settings) as mcp_url:
        argv = locust_argv(
            target=target,
            mcp_url=mcp_url,
            users=5,  # by the classes' weights: 4 gRPC users, 1 MCP user
            spawn_rate=5,
            seconds=SECONDS,
            pace=0.05,  # at most 20 calls/s per user: a smoke run, not a stress test, on 2 busy cores
            memories=MEMORIES,
            tenants=TENANTS,
            csv_prefix=str(tmp_path / "locust"),
            raw_out=str(tmp_path / "raw.json"),
            mcp=True,
        )
        # The server and the gateway run in this event loop: wait for locust without blocking it.
        process = await asyncio.create_subprocess_exec(
            *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
        )
        output, _ = await asyncio.wait_for(process.communicate(), SECONDS + 30)
    log = output.decode(errors="replace")
    assert process.returncode == 0, log  # --exit-code-on-error 1: any failed call fails the run
    rows = figures(json.loads((tmp_path / "raw.json").read_text()), SECONDS)
    print(report(rows, "smoke run"), file=sys.stderr)
    made = {row.name: row.calls for row in rows}
    for name in (
        "grpc Recall",
        "grpc Write",
        "grpc AppendTurn",
        "POST mcp memory_recall",
        "POST mcp memory_write",
    ):
        assert made.get(name, 0) > 0, (name, made, log)
    assert all(row.failures == 0 for row in rows), log
    assert all(row.degraded == 0 for row in rows), report(rows, "degraded recalls")  # the tier is up
    stats = (tmp_path / "locust_stats.csv").read_text()
    assert "Recall" in stats and "Aggregated" in stats  # locust's own CSV is written
