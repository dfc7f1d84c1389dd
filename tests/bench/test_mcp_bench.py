"""`hindsight bench mcp` against the session's memory server: the gateway runs as its own process, every
query goes both ways, and the two paths return the same memories."""

from __future__ import annotations

import json
import random

from hindsight_server.bench.mcp import report, run_mcp_bench
from hindsight_server.process.running import RunningServer


async def test_mcp_bench_times_both_paths(server: RunningServer) -> None:
    seed = random.randrange(1_000_000)  # a fresh corpus, whatever ran before in this database
    result = await run_mcp_bench(
        f"127.0.0.1:{server.port}", memories=80, calls=30, warmup=3, seed=seed, progress=None
    )
    assert result.load.created == 80
    assert result.errors == 0
    assert result.grpc.count == result.mcp.count == 30
    for summary in (result.grpc, result.mcp):
        assert 0 < summary.p50_ms <= summary.p95_ms <= summary.p99_ms <= summary.max_ms
    assert result.added_p50_ms <= result.added_p95_ms <= result.added_p99_ms
    assert result.different_results <= 3  # same data, same query: the same hits (recency may reorder ties)
    assert result.gateway_cpu_s > 0
    assert result.gateway.startswith("http://127.0.0.1:") and result.gateway.endswith("/mcp")
    text = report(result, as_json=False)
    assert "Recall, MCP over HTTP" in text and "MCP adds (same query)" in text
    assert json.loads(report(result, as_json=True))["calls"] == 30
