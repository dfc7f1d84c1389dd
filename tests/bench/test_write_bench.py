"""`hindsight bench write` measures real calls: a small run against the session's server."""

from __future__ import annotations

import json
from pathlib import Path

from hindsight_server.bench.eval_corpus import eval_corpus
from hindsight_server.bench.write import report, run_write_bench
from hindsight_server.process.running import RunningServer


async def test_write_bench_times_every_call(server: RunningServer) -> None:
    result = await run_write_bench(
        f"127.0.0.1:{server.port}", singles=30, batches=4, batch_size=25, concurrency=2
    )
    assert result.write.count == 30 and result.get.count == 30 and result.batch.count == 4
    for summary in (result.write, result.get, result.batch):
        assert 0 < summary.p50_ms <= summary.p95_ms <= summary.p99_ms <= summary.max_ms
    assert result.batch_memories_per_s > 0
    assert result.embedded_inline == 0.0  # the session's server has no inference tier
    assert json.loads(report(result, as_json=True))["batch_size"] == 25
    assert "WriteBatch throughput" in report(result, as_json=False)


async def test_the_real_text_import_is_followed_until_embedded(
    server: RunningServer, eval_file: Path
) -> None:
    corpus = eval_corpus(eval_file, 80)
    result = await run_write_bench(
        f"127.0.0.1:{server.port}", singles=5, batches=3, batch_size=10, concurrency=1, corpus=corpus
    )
    imported = result.imported
    assert imported is not None and imported.memories == 30
    # No inference tier in the test session: nothing is left pending, the backlog is empty at once.
    assert imported.embedded_s > 0 and imported.memories_per_s_embedded > 0
    assert imported.recall_idle.count >= 50
    text = report(result, as_json=False)
    assert corpus.prefix in text and "import fully embedded" in text and "Recall after it" in text
