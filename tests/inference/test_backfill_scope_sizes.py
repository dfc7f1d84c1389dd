"""The background worker tells the scope sizes what it embedded: a recall right after an import plans its
searches on what the import now holds (a multilingual search restricted to memories without an English
vector, planned on a count from before the English vectors were filled, walked the whole graph in vain)."""

from __future__ import annotations

from datetime import UTC, datetime

from embedder.client import TritonEmbedder
from embedder.triton import TritonServer
from hindsight_server.domain.model import Kind, MemoryDraft, Tier, VectorSpace
from hindsight_server.domain.policy import Limits, TtlPolicy, WritePolicy
from hindsight_server.inference.tier import InferenceTier
from hindsight_server.pipelines.backfill import BackfillSettings, EmbeddingBackfill
from hindsight_server.pipelines.scope_sizes import ScopeSizes
from hindsight_server.pipelines.write import WritePipeline, WriteSettings
from hindsight_server.process.running import RunningServer
from hindsight_server.store.memories import MemoryStore


async def test_what_the_worker_embeds_reaches_the_scope_sizes_at_once(
    server: RunningServer, triton_server: TritonServer, tenant: str
) -> None:
    url = triton_server.grpc_url
    tier = InferenceTier(
        {
            VectorSpace.MULTILINGUAL: TritonEmbedder(url),
            VectorSpace.ENGLISH: TritonEmbedder(url, model="embed_en"),
        },
        {VectorSpace.MULTILINGUAL: 512, VectorSpace.ENGLISH: 384},
    )
    store = MemoryStore(server.pool)  # the session's server has no tier, hence no worker of its own
    sizes = ScopeSizes(store)
    try:
        assert await tier.refresh()
        worker = EmbeddingBackfill(store, tier, BackfillSettings(), scope_sizes=sizes)
        # The worker takes the oldest pending rows of any tenant first: embed what earlier tests left
        # pending, so the claim below is this test's rows.
        for _ in range(100):
            if not await worker.run_once():
                break
        now = datetime.now(UTC)
        pipeline = WritePipeline(
            store, WriteSettings(Limits(), TtlPolicy(), WritePolicy()), lambda: now, tier
        )
        texts = [f"the harbour office note {i}" for i in range(6)] + ["用户偏好靠窗座位", "会议改到周五"]
        drafts = [MemoryDraft(tenant, t, Tier.SEMANTIC, Kind.FACT, subject="ann") for t in texts]
        await store.insert([pipeline.new_memory(d, now) for d in drafts])  # pending, as an import leaves them
        before = await sizes.of(tenant, "ann")
        assert (before.rows, before.without_english) == (0, 0)  # nothing has a vector yet

        assert await worker.run_once() == 8
        after = await sizes.of(tenant, "ann")  # the cached count, moved by the worker: no recount
        assert (after.rows, after.without_english) == (8, 2)  # the two Chinese ones never get one
        counted = await store.scope_size(tenant, "ann")
        assert (counted.rows, counted.without_english) == (after.rows, after.without_english)
    finally:
        await tier.close()
