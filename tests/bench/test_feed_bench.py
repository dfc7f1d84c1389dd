"""`hindsight bench feed` measures real events: a small run against the session's server."""

from __future__ import annotations

import json

from hindsight_server.bench.feed import report, run_feed_bench
from hindsight_server.process.running import RunningServer


async def test_feed_bench_follows_every_write_to_its_event(server: RunningServer) -> None:
    result = await run_feed_bench(f"127.0.0.1:{server.port}", rate=40, seconds=1.5)
    batched = await run_feed_bench(f"127.0.0.1:{server.port}", rate=100, seconds=1, batch=10)
    assert batched.errors == 0 and batched.missing == 0 and batched.commit_to_watch.count == 100
    assert result.errors == 0 and result.missing == 0
    assert result.write.count == 60 and result.commit_to_watch.count == 60
    summary = result.commit_to_watch
    assert 0 < summary.p50_ms <= summary.p95_ms <= summary.p99_ms <= summary.max_ms
    # The session's server polls the outbox every feed.poll_s (200 ms): an event waits at most about that.
    assert summary.max_ms < 2_000
    assert json.loads(report(result, as_json=True))["missing"] == 0
    assert "commit -> Watch" in report(result, as_json=False)
