"""`hindsight bench console` against the session's memory server, small: every page loads, is timed,
and the report names each."""

from __future__ import annotations

import json

from hindsight_server.bench.console import report, run_console_bench
from hindsight_server.process.running import RunningServer


async def test_console_bench_times_every_page(server: RunningServer) -> None:
    result = await run_console_bench(f"127.0.0.1:{server.port}", memories=600, requests=3, warmup=1)
    assert result.errors == 0
    assert len(result.pages) == 8
    for summary in result.pages.values():
        assert summary.count == 3 and 0 < summary.p50_ms <= summary.p95_ms <= summary.max_ms
    text = report(result, as_json=False)
    assert "memory + history" in text and "600 memories in one subject" in text
    assert json.loads(report(result, as_json=True))["pages"]["pending"]["count"] == 3
