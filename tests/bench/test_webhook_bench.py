"""`hindsight bench webhooks` measures real deliveries: a small run against a server of its own that
delivers to loopback."""

from __future__ import annotations

import json
from collections.abc import Callable

from hindsight_server.bench.webhooks import report, run_webhook_bench
from hindsight_server.config import Settings
from hindsight_server.process.server import start_server


async def test_webhook_bench_counts_every_delivery(make_settings: Callable[..., Settings]) -> None:
    running = await start_server(
        make_settings(
            webhooks__enabled=True,
            webhooks__allow_private_networks=True,
            webhooks__poll_s=0.1,
            webhooks__rate_per_s=0,  # as the bench's own stack: deliveries unlimited (20/s would take 10 s)
        )
    )
    try:
        result = await run_webhook_bench(f"127.0.0.1:{running.port}", events=200, wait_s=60)
    finally:
        await running.stop()
    assert result.events == 200 and result.delivered == 200 and result.duplicates == 0
    assert result.latency.count == 200 and 0 < result.latency.p50_ms <= result.latency.max_ms
    assert result.deliveries_per_s > 0
    assert json.loads(report(result, as_json=True))["delivered"] == 200
    assert "deliveries a second" in report(result, as_json=False)
