"""The embedding worker leases its rows instead of locking them through inference: a Delete or an
Update of a row being embedded does not wait for the tier, and an Update's new text is never given the
old text's vector. A text the model fails on costs only itself a backoff; the rest of the backlog is
embedded. Nothing a round raises ends the worker."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime

import pytest

from embedder.client import EmbeddingResult, TritonEmbedder
from embedder.errors import InferenceError
from embedder.triton import TritonServer
from hindsight_server.domain.model import EmbeddingState, Kind, MemoryDraft, MemoryPatch, Tier, VectorSpace
from hindsight_server.domain.policy import Limits, TtlPolicy, WritePolicy
from hindsight_server.domain.vectors import ClaimRequest, EmbeddingClaim
from hindsight_server.inference.tier import InferenceTier
from hindsight_server.pipelines.backfill import BackfillSettings, EmbeddingBackfill
from hindsight_server.pipelines.write import WritePipeline, WriteSettings
from hindsight_server.process.running import RunningServer
from hindsight_server.store.memories import MemoryStore
from tests.support.eventually import eventually

POISON = "the text this model cannot take"


class FaultyEmbedder(TritonEmbedder):
    """The real model, with the two faults the tier cannot be made to show on demand: a call that
    hangs until released, and a model error on one particular text."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.gate: asyncio.Event | None = None
        self.waiting = asyncio.Event()

    async def embed(self, texts: Sequence[str], *, timeout_s: float) -> EmbeddingResult:
        if self.gate is not None:
            self.waiting.set()
            await self.gate.wait()
        if any(POISON in text for text in texts):
            raise InferenceError("the model failed on this input")
        return await super().embed(texts, timeout_s=timeout_s)


@pytest.fixture
async def faulty(triton_server: TritonServer) -> AsyncIterator[tuple[FaultyEmbedder, InferenceTier]]:
    embedder = FaultyEmbedder(triton_server.grpc_url)
    tier = InferenceTier({VectorSpace.MULTILINGUAL: embedder}, {VectorSpace.MULTILINGUAL: 512})
    try:
        assert await tier.refresh()
        yield embedder, tier
    finally:
        await tier.close()


async def _drained(store: MemoryStore, tier: InferenceTier, settings: BackfillSettings) -> EmbeddingBackfill:
    """A worker, after it embedded what earlier tests left pending (it takes the oldest rows first)."""
    worker = EmbeddingBackfill(store, tier, settings)
    for _ in range(100):
        if not await worker.run_once():
            break
    return worker


async def _pending(store: MemoryStore, tier: InferenceTier, tenant: str, texts: Sequence[str]) -> list[str]:
    now = datetime.now(UTC)
    pipeline = WritePipeline(store, WriteSettings(Limits(), TtlPolicy(), WritePolicy()), lambda: now, tier)
    drafts = [MemoryDraft(tenant, text, Tier.SEMANTIC, Kind.FACT, subject="ann") for text in texts]
    outcomes = await store.insert([pipeline.new_memory(draft, now) for draft in drafts])  # pending
    return [outcome.memory.id for outcome in outcomes]


async def _states(server: RunningServer, tenant: str) -> dict[str, tuple[str, int]]:
    rows = await server.pool.fetch(
        "SELECT content, embedding_state, embedding_attempts FROM memories WHERE tenant_id = $1", tenant
    )
    return {row["content"]: (row["embedding_state"], row["embedding_attempts"]) for row in rows}


async def test_writes_to_rows_being_embedded_do_not_wait_for_the_tier(
    server: RunningServer, faulty: tuple[FaultyEmbedder, InferenceTier], tenant: str
) -> None:
    embedder, tier = faulty
    store = MemoryStore(server.pool)
    worker = await _drained(store, tier, BackfillSettings())
    deleted, updated, _ = await _pending(
        store, tier, tenant, ["a note to delete", "an old text", "a note to keep"]
    )

    embedder.gate = asyncio.Event()
    embedding = asyncio.create_task(worker.run_once())
    await asyncio.wait_for(embedder.waiting.wait(), 10)  # the worker is inside the inference call
    now = datetime.now(UTC)
    await asyncio.wait_for(store.soft_delete(tenant, deleted, now), 2)
    patch = MemoryPatch(tenant, updated, frozenset({"content"}), content="a new text")
    await asyncio.wait_for(store.update(patch, now, EmbeddingState.PENDING), 2)
    embedder.gate.set()
    assert await embedding == 3

    states = await _states(server, tenant)
    assert states["a note to keep"] == ("ready", 0) and states["a note to delete"][0] == "ready"
    assert states["a new text"] == ("pending", 0)  # the old text's vector was not stored for it
    embedder.gate = None
    assert await worker.run_once() == 1
    assert (await _states(server, tenant))["a new text"] == ("ready", 0)


async def test_a_text_the_model_fails_on_backs_off_alone_and_the_backlog_goes_on(
    server: RunningServer, faulty: tuple[FaultyEmbedder, InferenceTier], tenant: str
) -> None:
    _, tier = faulty
    store = MemoryStore(server.pool)
    worker = await _drained(store, tier, BackfillSettings(retry_s=0.0))  # retried at once, for the test
    texts = ["the first note", f"{POISON}, here", "the third note", "the fourth note"]
    await _pending(store, tier, tenant, texts)

    for _ in range(6):  # rounds: the failed chunk, then each of its rows alone
        await tier.refresh()  # a model error takes the tier for down until the next probe
        await worker.run_once()
    states = await _states(server, tenant)
    assert {text: state for text, state in states.items() if POISON not in text} == {
        text: ("ready", 0) for text in texts if POISON not in text
    }
    (poisoned,) = [state for text, state in states.items() if POISON in text]
    assert poisoned[0] == "pending" and poisoned[1] >= 2

    # With a real backoff the poisoned row waits, and a newer row is embedded in the next round.
    patient = EmbeddingBackfill(store, tier, BackfillSettings(retry_s=600.0))
    await tier.refresh()
    await patient.run_once()  # the poisoned row fails once more: it now waits 10 minutes or more
    await _pending(store, tier, tenant, ["a later note"])
    await tier.refresh()
    assert await patient.run_once() == 1
    assert (await _states(server, tenant))["a later note"] == ("ready", 0)


class FailsFirstClaim(MemoryStore):
    """The store with a bug that shows once: the fault is the exception, whatever its kind."""

    failures = 0

    async def claim_pending_embeddings(self, request: ClaimRequest) -> EmbeddingClaim:
        if self.failures == 0:
            self.failures += 1
            raise RuntimeError("an unforeseen bug in one round")
        return await super().claim_pending_embeddings(request)


async def test_the_worker_survives_any_exception_and_goes_on(
    server: RunningServer,
    faulty: tuple[FaultyEmbedder, InferenceTier],
    tenant: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    _, tier = faulty
    await _drained(MemoryStore(server.pool), tier, BackfillSettings())
    store = FailsFirstClaim(server.pool)
    await _pending(store, tier, tenant, ["a note written while the worker hit a bug"])
    worker = EmbeddingBackfill(store, tier, BackfillSettings(idle_s=0.05))
    with caplog.at_level(logging.WARNING, logger="hindsight_server.pipelines.backfill"):
        running = asyncio.create_task(worker.run_forever())
        try:

            async def ready() -> bool:
                states = await _states(server, tenant)
                return states.get("a note written while the worker hit a bug", ("",))[0] == "ready"

            await eventually(ready, timeout_s=10)
            assert not running.done()
        finally:
            running.cancel()
    assert (await _states(server, tenant))["a note written while the worker hit a bug"] == ("ready", 0)
    assert store.failures == 1
    assert any("RuntimeError" in record.getMessage() for record in caplog.records)
