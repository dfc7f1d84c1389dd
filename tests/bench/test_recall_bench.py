"""`hindsight bench recall` end to end against the session's memory server (no inference tier there, so
the vector channel is absent): a small load, its idempotent repeat, and a short measured run."""

from __future__ import annotations

import json
import random

from hindsight.client import HindsightClient
from hindsight.v1 import memory_pb2 as pb
from hindsight_server.bench.corpus import recall_corpus
from hindsight_server.bench.recall import ensure_loaded, report, run_recall_bench
from hindsight_server.process.running import RunningServer


async def test_small_recall_bench_loads_once_and_measures(server: RunningServer) -> None:
    target = f"127.0.0.1:{server.port}"
    seed = random.randrange(1_000_000)  # a fresh corpus prefix, whatever ran before in this database
    corpus = recall_corpus(600, tenants=4, seed=seed)
    result = await run_recall_bench(
        target, corpus, concurrency=2, seconds=2, seed=seed, warmup_s=0.5, progress=None
    )

    assert result.load.memories == 600
    assert result.load.created == 600 and result.load.already_present == 0
    assert result.recalls > 0 and result.recalls_per_s > 0
    assert result.error_count == 0 and result.errors == {}
    latency = result.latency
    assert latency.count == result.recalls
    assert 0 < latency.p50_ms <= latency.p95_ms <= latency.p99_ms <= latency.max_ms
    assert result.channels_used.get("lexical", 0) > 0.5  # almost every query has lexical terms
    assert "vector" not in result.channels_used  # no inference tier in the test session
    assert result.hits_per_recall > 0

    async with HindsightClient(target, timeout_s=30) as client:
        again = await ensure_loaded(client, corpus, progress=None)  # the marker: nothing is sent
        assert (again.created, again.already_present, again.batches) == (0, 600, 0)
        resent = await ensure_loaded(client, corpus, trust_marker=False, progress=None)
        assert resent.batches > 0 and resent.created == 0  # idempotency keys: no duplicates
        stored = [m async for m in client.list_all(corpus.tenant_id(0), page_size=500)]
        assert len({m.idempotency_key for m in stored}) == len(stored)
        # Tenant 0 is the largest (Zipf); pending (low-confidence) memories are not listed as ACTIVE.
        assert 0 < len(stored) <= corpus.tenant_sizes()[0]

    text = report(result, as_json=False)
    assert "errors: none" in text and "recalls/s" in text and "600 memories in 4 tenants" in text
    parsed = json.loads(report(result, as_json=True))
    assert parsed["load"]["memories"] == 600 and parsed["latency"]["count"] == result.recalls


async def test_an_interrupted_load_resumes_from_its_last_checkpoint(server: RunningServer) -> None:
    target = f"127.0.0.1:{server.port}"
    seed = random.randrange(1_000_000)
    corpus = recall_corpus(500, tenants=3, seed=seed)
    async with HindsightClient(target, timeout_s=30) as client:
        # The first 300 memories were loaded in checkpoints of 100 (and the load then stopped).
        first = await ensure_loaded(
            client, recall_corpus(300, tenants=3, seed=seed), checkpoint=100, progress=None
        )
        assert (first.created, first.already_present) == (300, 0)
        markers = {m.idempotency_key for m in await _listed(client, corpus.meta_tenant)}
        assert markers == {"loaded:100", "loaded:200", "loaded:300"}  # one per finished step

        rest = await ensure_loaded(client, corpus, checkpoint=100, progress=None)
        assert (rest.created, rest.already_present) == (200, 300)  # only what the marker did not cover
        stored = [m for t in range(3) for m in await _listed(client, corpus.tenant_id(t))]
        keys = {m.idempotency_key for m in stored}
        assert len(keys) == len(stored) and keys <= {m.idempotency_key for m in corpus.memories}

        again = await ensure_loaded(client, corpus, checkpoint=100, progress=None)
        assert (again.created, again.batches) == (0, 0)


async def _listed(client: HindsightClient, tenant_id: str) -> list[pb.Memory]:
    return [m async for m in client.list_all(tenant_id, page_size=500)]
