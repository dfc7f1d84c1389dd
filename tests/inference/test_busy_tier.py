"""A busy inference tier is not a tier that is down: a call past its deadline degrades, the tier stays
available (its health flapped under bulk loads before), and a query embedding goes ahead of the
document batches queued before it (each model's query twin, embedder/repository.py)."""

from __future__ import annotations

import asyncio
import time

import pytest

from embedder.client import CallRecord, TritonEmbedder
from embedder.triton import TritonServer
from hindsight_server.domain.errors import InferenceUnavailable
from hindsight_server.domain.model import VectorSpace
from hindsight_server.inference.tier import InferenceTier
from tests.fixtures.triton import TEST_MAX_BATCH


async def test_a_missed_deadline_degrades_the_call_but_not_the_tier(triton_server: TritonServer) -> None:
    embedder = TritonEmbedder(triton_server.grpc_url, model="embed")
    tier = InferenceTier({VectorSpace.MULTILINGUAL: embedder}, {VectorSpace.MULTILINGUAL: 512})
    try:
        assert await tier.refresh()
        with pytest.raises(InferenceUnavailable, match=r"deadline|DEADLINE"):
            await tier.embed_documents(["a sentence to embed"] * TEST_MAX_BATCH, timeout_s=1e-4)
        assert tier.available  # still up: the next call is tried, not skipped
        embedded = await tier.embed_documents(["a sentence to embed"], timeout_s=10)
        assert embedded.vectors.shape == (1, 512)
    finally:
        await tier.close()


def _tier(url: str, query_twins: dict[VectorSpace, str]) -> InferenceTier:
    models = {VectorSpace.MULTILINGUAL: "embed", VectorSpace.ENGLISH: "embed_en"}
    return InferenceTier(
        {space: TritonEmbedder(url, model=model) for space, model in models.items()},
        {VectorSpace.MULTILINGUAL: 512, VectorSpace.ENGLISH: 384},
        query_embedders={
            space: TritonEmbedder(url, model=m, cache_size=0) for space, m in query_twins.items()
        },
    )


async def test_a_query_goes_ahead_of_queued_document_batches(triton_server: TritonServer) -> None:
    tier = _tier(triton_server.grpc_url, {VectorSpace.ENGLISH: "embed_en_query"})
    try:
        assert await tier.refresh()
        await tier.embed_query("warm up", timeout_s=10, space=VectorSpace.ENGLISH)
        text = "a long sentence about the quarterly budget review meeting that keeps going " * 4
        batch = [text] * TEST_MAX_BATCH

        async def documents() -> None:
            await tier.embed_documents(batch, timeout_s=60, space=VectorSpace.ENGLISH)

        single_s = []
        for _ in range(3):
            started = time.perf_counter()
            await documents()
            single_s.append(time.perf_counter() - started)
        one_batch_s = min(single_s)

        # Eight batches queued at once, then a query: its model's twin answers it, not after the batches.
        backlog = [asyncio.ensure_future(documents()) for _ in range(8)]
        await asyncio.sleep(one_batch_s / 2)
        started = time.perf_counter()
        await tier.embed_query("the budget meeting", timeout_s=30, space=VectorSpace.ENGLISH)
        query_s = time.perf_counter() - started
        still_queued = sum(not task.done() for task in backlog)
        await asyncio.gather(*backlog)
    finally:
        await tier.close()
    assert still_queued >= 4, still_queued
    assert query_s < 3 * one_batch_s, (query_s, one_batch_s)


async def test_without_a_twin_deployed_the_model_itself_answers_queries(triton_server: TritonServer) -> None:
    tier = _tier(triton_server.grpc_url, {VectorSpace.MULTILINGUAL: "absent_query"})
    try:
        assert await tier.refresh()
        query = await tier.embed_query("the budget meeting", timeout_s=10)
        assert query.vector.shape == (512,)
    finally:
        await tier.close()


async def test_a_long_query_embeds_on_the_model_not_the_twin_short_ones_wait_on(
    triton_server: TritonServer,
) -> None:
    """The encoder's work grows with the text: a 4 KB query on the twin held each short query behind it."""
    calls: list[CallRecord] = []
    url = triton_server.grpc_url
    tier = InferenceTier(
        {VectorSpace.MULTILINGUAL: TritonEmbedder(url, model="embed", cache_size=0, on_call=calls.append)},
        {VectorSpace.MULTILINGUAL: 512},
        query_embedders={
            VectorSpace.MULTILINGUAL: TritonEmbedder(
                url, model="embed_query", cache_size=0, on_call=calls.append
            )
        },
        twin_max_chars=64,
    )
    try:
        assert await tier.refresh()
        calls.clear()
        await tier.embed_query("the budget meeting", timeout_s=10)
        await tier.embed_query("the budget meeting " * 20, timeout_s=10)
    finally:
        await tier.close()
    assert [call.model for call in calls if call.operation == "infer"] == ["embed_query", "embed"]
