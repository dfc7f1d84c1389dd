"""The memory server with a real Triton inference tier: inline embeddings, the vector channel, and
memory that keeps working while the tier is down (writes deferred, recall degraded, backlog drained)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from embedder.client import TritonEmbedder
from embedder.triton import TritonServer
from hindsight.client import HindsightClient, memory_input
from hindsight.v1 import memory_pb2 as pb
from hindsight_server.config import Settings
from hindsight_server.domain.vectors import context_text
from hindsight_server.process.errors import StartupError
from hindsight_server.process.running import RunningServer
from hindsight_server.process.server import start_server
from tests.fixtures.triton import TEST_MAX_CHARS
from tests.support.eventually import eventually
from tests.support.figures import report
from tests.support.processes import run_cli


@pytest.fixture(scope="module")
async def tier_server(
    make_settings: Callable[..., Settings], triton_server: TritonServer
) -> AsyncIterator[RunningServer]:
    running = await start_server(
        make_settings(
            inference__url=triton_server.grpc_url,
            inference__health_interval_s=0.2,
            inference__backfill_idle_s=0.05,
            inference__inline_budget_s=2.0,  # the first calls warm the model on 2 busy cores
            # The cross-encoder for one profile (off by default): recalls with and without it side by side.
            recall__rerank_by_profile={"knowledge_qa": True},
        )
    )
    yield running
    await running.stop()


@pytest.fixture(scope="module")
async def tier_client(tier_server: RunningServer) -> AsyncIterator[HindsightClient]:
    async with HindsightClient(f"127.0.0.1:{tier_server.port}", timeout_s=10) as client:
        yield client


async def test_writes_are_embedded_inline_and_found_across_languages(
    tier_client: HindsightClient, tenant: str
) -> None:
    window = await tier_client.write(tenant, "用户偏好靠窗座位", tier="semantic", kind="preference")
    await tier_client.write(tenant, "用户每周五下午开例会", tier="semantic", kind="fact")
    assert window.memory.embedding_state == pb.EMBEDDING_STATE_READY
    assert not window.embedding_truncated
    # No word in common: only the vector channel can connect the English query to the Chinese memory.
    found = await tier_client.recall(tenant, "Which seat does the user like? By the window.", min_score=0)
    assert found.hits[0].memory.id == window.memory.id
    assert [c.channel for c in found.hits[0].channels] == [pb.CHANNEL_VECTOR]
    assert 0 < found.hits[0].components.similarity <= 1
    assert pb.CHANNEL_VECTOR in found.channels_used and not found.channels_degraded


async def test_vector_channel_respects_tenants_and_fills_its_quota_under_a_filter(
    tier_client: HindsightClient, tenant: str
) -> None:
    crowd = [
        memory_input(f"note {i} about the quarterly budget review", tier="semantic", kind="fact")
        for i in range(300)
    ]
    for start in range(0, len(crowd), 100):
        await tier_client.write_batch(f"{tenant}-crowd", crowd[start : start + 100])
    mine = [memory_input(f"budget review item {i}", tier="episodic", kind="event") for i in range(25)]
    # Near-identical notes that differ in a number would supersede each other; these are distinct records.
    written = await tier_client.write_batch(tenant, mine, verbatim=True)
    # A batch this size gets its English vectors from the background worker.
    ids = [r.memory.id for r in written.results]

    async def all_embedded() -> bool:
        states = [(await tier_client.get(tenant, i)).embedding_state for i in ids]
        return all(s == pb.EMBEDDING_STATE_READY for s in states)

    await eventually(all_embedded)
    found = await tier_client.recall(tenant, "quarterly budget", explain=True, top_k=25, min_score=0)
    vector = next(c for c in found.explanation.channels if c.channel == pb.CHANNEL_VECTOR)
    assert len(vector.memory_ids) == 20  # the channel's quota, although 92% of the rows are filtered out
    assert all(hit.memory.tenant_id == tenant for hit in found.hits)


async def test_the_exact_scan_finds_what_the_graph_finds(
    make_settings: Callable[..., Settings],
    triton_server: TritonServer,
    tier_client: HindsightClient,
    tenant: str,
) -> None:
    # This small tenant is scanned exactly by default (domain/search_plan.py); a server with the
    # factor at 0 walks the HNSW graph for it. Both must rank the same nearest memories.
    topics = [
        "budget review",
        "flight to Lisbon",
        "dentist appointment",
        "用户偏好靠窗座位",
        "quarterly report",
    ]
    texts = [f"{topic}, note {i}" for i in range(8) for topic in topics]
    written = await tier_client.write_batch(
        tenant, [memory_input(t, tier="semantic", kind="fact") for t in texts], verbatim=True
    )
    ids = [r.memory.id for r in written.results]

    async def all_embedded() -> bool:
        states = [(await tier_client.get(tenant, i)).embedding_state for i in ids]
        return all(s == pb.EMBEDDING_STATE_READY for s in states)

    await eventually(all_embedded)
    graph = await start_server(
        make_settings(inference__url=triton_server.grpc_url, recall__exact_search_factor=0.0)
    )
    try:
        async with HindsightClient(f"127.0.0.1:{graph.port}", timeout_s=10) as graph_client:
            for query in ("the budget meeting", "窗口座位", "a trip to Portugal"):
                found = [
                    await client.recall(tenant, query, explain=True, top_k=20, min_score=0)
                    for client in (tier_client, graph_client)
                ]
                vector = [
                    next(c for c in f.explanation.channels if c.channel == pb.CHANNEL_VECTOR).memory_ids
                    for f in found
                ]
                assert len(vector[0]) == 20 and vector[0] == vector[1], query
    finally:
        await graph.stop()


async def test_long_texts_are_truncated_and_say_so(tier_client: HindsightClient, tenant: str) -> None:
    long_text = "会议纪要：" + "预算评审" * TEST_MAX_CHARS
    written = await tier_client.write(tenant, long_text, tier="episodic", kind="event")
    assert written.embedding_truncated
    assert written.memory.embedding_state == pb.EMBEDDING_STATE_READY
    assert written.memory.content == long_text  # stored whole; only the vector covers the beginning
    found = await tier_client.recall(tenant, "预算评审" * (TEST_MAX_CHARS // 4 + 20), min_score=0)
    assert found.query_truncated
    assert found.hits[0].memory.id == written.memory.id


async def test_update_recomputes_the_embedding(tier_client: HindsightClient, tenant: str) -> None:
    written = await tier_client.write(tenant, "likes jazz", tier="semantic", kind="preference")
    updated = await tier_client.update(tenant, written.memory.id, content="喜欢古典音乐")
    assert updated.embedding_state == pb.EMBEDDING_STATE_PENDING

    async def embedded() -> bool:
        memory = await tier_client.get(tenant, written.memory.id)
        return memory.embedding_state == pb.EMBEDDING_STATE_READY

    await eventually(embedded)


async def test_a_turn_is_stored_at_once_embedded_by_the_worker_and_found_by_meaning(
    tier_client: HindsightClient, tenant: str
) -> None:
    said = await tier_client.append_turn(
        tenant, "s-1", "Remember that my manager is Dana, she runs the Lisbon office", subject="user-1"
    )
    # What the turn remembers beyond the session is embedded before the answer: its conflict rules
    # compare vectors.
    (remembered,) = said.remembered
    assert remembered.embedding_state == pb.EMBEDDING_STATE_READY
    (turn,) = [m async for m in tier_client.list_all(tenant, tiers=["working"], kinds=["event"])]
    assert turn.embedding_state in (pb.EMBEDDING_STATE_PENDING, pb.EMBEDDING_STATE_READY)

    async def embedded() -> bool:
        memory = await tier_client.get(tenant, turn.id)
        return memory.embedding_state == pb.EMBEDDING_STATE_READY

    await eventually(embedded)
    # No word in common with the turn: only its vector finds it.
    found = await tier_client.recall(
        tenant, "Who is the boss I report to?", tiers=["working"], kinds=["event"], min_score=0
    )
    assert [hit.memory.id for hit in found.hits] == [turn.id]
    assert [c.channel for c in found.hits[0].channels] == [pb.CHANNEL_VECTOR]


async def test_tier_down_writes_deferred_recall_degraded_then_backlog_drains(
    tier_client: HindsightClient, triton_server: TritonServer, tenant: str
) -> None:
    await asyncio.to_thread(triton_server.stop)
    try:
        await eventually(lambda: _inference_health_is(tier_client, "NOT_SERVING"))
        started = time.monotonic()
        single = await tier_client.write(
            tenant, "prefers aisle seats on trains", tier="semantic", kind="preference"
        )
        batch = await tier_client.write_batch(
            tenant,
            [
                memory_input(f"train trip {i} booked in coach 5", tier="episodic", kind="event")
                for i in range(40)
            ],
        )
        assert time.monotonic() - started < 2.0  # no write waited on the missing tier
        ids = [single.memory.id, *(r.memory.id for r in batch.results)]
        assert single.memory.embedding_state == pb.EMBEDDING_STATE_PENDING
        assert {r.memory.embedding_state for r in batch.results} == {pb.EMBEDDING_STATE_PENDING}

        found = await tier_client.recall(tenant, "aisle seats", min_score=0)
        assert found.hits[0].memory.id == single.memory.id  # the lexical channel answers at once
        assert list(found.channels_degraded) == [pb.CHANNEL_VECTOR]
        assert await tier_client.health() == "SERVING"  # the memory service itself is up
    finally:
        await asyncio.to_thread(triton_server.start)

    await eventually(lambda: _inference_health_is(tier_client, "SERVING"))
    back = time.monotonic()

    async def drained() -> bool:
        states = [(await tier_client.get(tenant, memory_id)).embedding_state for memory_id in ids]
        return set(states) == {pb.EMBEDDING_STATE_READY}

    await eventually(drained)
    report(
        "faults",
        f"triton stopped: {len(ids)} writes acknowledged while it was down (all PENDING, none waited on it), "
        f"{len(ids)} found and embedded {time.monotonic() - back:.2f}s after it was back; recall degraded to "
        "lexical/structured/session meanwhile (channels_degraded: VECTOR); errors: none",
    )
    found = await tier_client.recall(tenant, "Which seat on the train?", min_score=0)
    assert pb.CHANNEL_VECTOR in found.channels_used and not found.channels_degraded


async def test_a_model_of_another_dimension_stops_start_up(
    make_settings: Callable[..., Settings],
    triton_server: TritonServer,
    fresh_database: Callable[[], Awaitable[str]],
) -> None:
    settings = make_settings(
        database__dsn=await fresh_database(), embedding__dimension=384, inference__url=triton_server.grpc_url
    )
    with pytest.raises(
        StartupError, match="makes 512-dimensional embeddings but the memories table stores 384"
    ):
        await start_server(settings)


async def test_an_unreachable_tier_does_not_stop_start_up(
    make_settings: Callable[..., Settings], tenant: str
) -> None:
    running = await start_server(make_settings(inference__url="127.0.0.1:9"))  # nothing listens on port 9
    try:
        async with HindsightClient(f"127.0.0.1:{running.port}") as client:
            written = await client.write(tenant, "written without a tier", tier="semantic", kind="fact")
            assert written.memory.embedding_state == pb.EMBEDDING_STATE_PENDING
            assert await client.health("hindsight.inference") == "NOT_SERVING"
    finally:
        await running.stop()


async def _inference_health_is(client: HindsightClient, status: str) -> bool:
    return await client.health("hindsight.inference") == status


async def test_the_cross_encoder_rescores_the_best_candidates(
    tier_client: HindsightClient, tenant: str
) -> None:
    await tier_client.write_batch(
        tenant,
        [memory_input(f"project apollo status note {i}", tier="semantic", kind="fact") for i in range(6)],
        verbatim=True,
    )
    plain = await tier_client.recall(tenant, "apollo status", top_k=6, min_score=0)
    assert not plain.reranked  # off by default (recall.rerank) ...
    assert all(hit.components.rerank == 0 for hit in plain.hits)
    # ... on for knowledge_qa here (recall.rerank_by_profile); the fixture's tier serves the shipped model.
    found = await tier_client.recall(tenant, "apollo status", top_k=6, min_score=0, profile="knowledge_qa")
    assert found.reranked
    assert all(0 < hit.components.rerank < 1 for hit in found.hits)
    finals = [hit.score for hit in found.hits]
    assert finals == sorted(finals, reverse=True)


# A question whose answer shares few words with it, among turns that share many: the hybrid score
# (BM25 and bge-small's cosine) ranks the answer fifth, the shipped cross-encoder far above the rest
# (logit ~7 against < 2), which lifts it over turns that only share the question's words (at the default
# weight 0.3, past one of them: the hybrid score keeps most of the say).
DENVER_QUESTION = "What time does Sam's flight to Denver leave?"
DENVER_ANSWER = 'Sam said, "My plane departs for Colorado at 7:40 tomorrow morning"'
DENVER_MAPS = 'Sam said, "Leave the Denver maps on the desk"'
DENVER_PRICES = 'Sam said, "Flight prices to Denver keep going up"'
DENVER_TURNS = [
    DENVER_PRICES,
    'Ann said, "What time does the flight attendant shift start?"',
    DENVER_MAPS,
    'Ann said, "Sam, what time is it in Denver?"',
    'Sam said, "Did my flight to Denver get cancelled?"',
    DENVER_ANSWER,
]


async def test_the_shipped_cross_encoder_lifts_an_answer_the_hybrid_score_ranks_low(
    tier_client: HindsightClient, tenant: str
) -> None:
    await tier_client.write_batch(
        tenant, [memory_input(t, tier="semantic", kind="fact") for t in DENVER_TURNS], verbatim=True
    )
    # Without the cross-encoder: knowledge_qa's weights given explicitly ("custom" follows the
    # recall.rerank default, off).
    weights = {"similarity": 0.5, "recency": 0.2, "tier_priority": 0.2, "entity_match": 0.1}
    plain = await tier_client.recall(tenant, DENVER_QUESTION, top_k=6, min_score=0, weights=weights)
    assert not plain.reranked
    hybrid = [hit.memory.content for hit in plain.hits]
    assert hybrid.index(DENVER_ANSWER) == 4 and hybrid.index(DENVER_MAPS) < hybrid.index(DENVER_PRICES) < 4
    found = await tier_client.recall(tenant, DENVER_QUESTION, top_k=6, min_score=0, profile="knowledge_qa")
    assert found.reranked
    reranked = [hit.memory.content for hit in found.hits]
    assert reranked.index(DENVER_ANSWER) <= 3, reranked
    assert reranked.index(DENVER_ANSWER) < reranked.index(DENVER_PRICES), reranked
    assert max(found.hits, key=lambda hit: hit.components.rerank).memory.content == DENVER_ANSWER


async def test_a_chinese_query_is_not_sent_to_the_english_cross_encoder(
    tier_client: HindsightClient, tenant: str
) -> None:
    texts = ["我下周要去杭州出差", "杭州的酒店已经订好了", "I am travelling to Hangzhou next week"]
    await tier_client.write_batch(
        tenant, [memory_input(t, tier="semantic", kind="fact") for t in texts], verbatim=True
    )
    chinese = await tier_client.recall(tenant, "我下周去哪里出差？", min_score=0, profile="knowledge_qa")
    assert chinese.hits and not chinese.reranked
    assert all(hit.components.rerank == 0 for hit in chinese.hits)
    english = await tier_client.recall(tenant, "Where am I travelling next week?", profile="knowledge_qa")
    assert english.reranked  # the same profile and tier: only the script differs


async def test_a_slow_cross_encoder_is_skipped_not_waited_for(
    make_settings: Callable[..., Settings], triton_server: TritonServer, tenant: str
) -> None:
    # 1 µs: no cross-encoder answers that fast, whatever the machine.
    settings = make_settings(inference__url=triton_server.grpc_url, inference__rerank_timeout_s=0.000001)
    running = await start_server(settings)
    try:
        async with HindsightClient(f"127.0.0.1:{running.port}") as client:
            texts = [f"apollo launch window moved, update {i}" for i in range(12)]
            await client.write_batch(
                tenant, [memory_input(t, tier="semantic", kind="fact") for t in texts], verbatim=True
            )
            started = time.monotonic()
            found = await client.recall(tenant, "apollo launch", top_k=12, min_score=0)
            assert not found.reranked
            assert time.monotonic() - started < 1.0
            assert sorted(hit.memory.content for hit in found.hits) == sorted(texts)
            assert all(hit.components.rerank == 0 for hit in found.hits)
    finally:
        await running.stop()


async def test_an_export_carries_the_embeddings_and_an_import_reuses_them(
    tier_client: HindsightClient, tenant: str
) -> None:
    """With the same models here, an import keeps the exported vectors (nothing to embed again); the
    copy's export carries the same vectors, for both spaces of an English or a Chinese memory."""
    await tier_client.write(
        tenant, "The user keeps a spare key under the blue pot", tier="semantic", kind="fact"
    )
    await tier_client.write(tenant, "用户的备用钥匙在蓝色花盆下面", tier="semantic", kind="fact")

    async def exported(of: str) -> tuple[pb.ExportHeader, list[pb.ExportedMemory]]:
        items = [item async for item in tier_client.export(of, include_embeddings=True)]
        return items[0].header, [item.memory for item in items[1:]]

    async def embedded() -> bool:
        _, memories = await exported(tenant)
        return all(m.memory.embedding_state == pb.EMBEDDING_STATE_READY for m in memories)

    await eventually(embedded)
    header, memories = await exported(tenant)
    assert {(m.space, m.name) for m in header.models} == {
        ("multilingual", "embed"),
        ("english", "embed_en"),
        ("chinese", "embed_zh"),
        ("english_context", "embed_en"),  # the English model's, reading a turn with the one before it
    }
    spaces = {m.memory.content[:3]: sorted(e.space for e in m.embeddings) for m in memories}
    assert spaces == {"The": ["english", "multilingual"], "用户的": ["chinese", "multilingual"]}
    answer = await tier_client.import_memories(f"{tenant}-copy", memories, models=header.models)
    assert (answer.imported, answer.embeddings_reused, answer.embeddings_pending) == (2, 2, 0)
    _, copied = await exported(f"{tenant}-copy")
    vectors = {m.memory.id: {e.space: list(e.values) for e in m.embeddings} for m in memories}
    assert {m.memory.id: {e.space: list(e.values) for e in m.embeddings} for m in copied} == vectors
    assert all(m.memory.embedding_state == pb.EMBEDDING_STATE_READY for m in copied)

    other_model = [pb.EmbeddingModel(space="multilingual", name="another-model", dimension=512)]
    fresh = await tier_client.import_memories(f"{tenant}-other", memories, models=other_model)
    assert (fresh.embeddings_reused, fresh.embeddings_pending) == (0, 2)  # computed again by the worker

    async def recomputed() -> bool:
        _, again = await exported(f"{tenant}-other")
        return all(m.memory.embedding_state == pb.EMBEDDING_STATE_READY for m in again)

    await eventually(recomputed)


async def test_the_cli_round_trips_the_embeddings_through_json_lines(
    tier_server: RunningServer, tier_client: HindsightClient, tenant: str, tmp_path: Path
) -> None:
    """`hindsight export --embeddings` then `hindsight import`: the float32 vectors survive protobuf's
    JSON mapping exactly, and the import reuses them (the header names this deployment's models)."""
    await tier_client.write(tenant, "The spare tyre is under the boot floor", tier="semantic", kind="fact")

    async def embedded() -> bool:
        items = [item async for item in tier_client.export(tenant, include_embeddings=True)]
        return all(len(item.memory.embeddings) == 2 for item in items[1:])

    await eventually(embedded)
    target, file = f"127.0.0.1:{tier_server.port}", tmp_path / "export.jsonl"
    exported = await run_cli(
        ["export", "--target", target, "--tenant", tenant, "--embeddings", "--output", str(file)]
    )
    assert exported.code == 0, exported.stderr
    imported = await run_cli(["import", str(file), "--target", target, "--tenant", f"{tenant}-cli", "--json"])
    assert imported.code == 0, imported.stderr
    assert json.loads(imported.stdout)["embeddings_reused"] == 1

    async def vectors(of: str) -> list[list[list[float]]]:
        items = [item async for item in tier_client.export(of, include_embeddings=True)]
        return [[list(e.values) for e in item.memory.embeddings] for item in items[1:]]

    assert await vectors(f"{tenant}-cli") == await vectors(tenant)


async def test_a_turn_gets_the_vector_of_it_read_after_the_one_before_until_that_one_is_erased(
    tier_client: HindsightClient, tier_server: RunningServer, triton_server: TritonServer, tenant: str
) -> None:
    """The worker gives each English memory of a session the English model's vector of the turn before
    and it read together (a session's first: its own English vector; a memory outside a session: none).
    Erasing the turn before takes its words out of the vector: computed again from what is left."""
    texts = ["My sister finally let me adopt the shelter puppy", "We named him Biscuit", "The user likes tea"]
    inputs = [
        memory_input(t, tier="semantic", kind="fact", session_id="s1" if n < 2 else "")
        for n, t in enumerate(texts)
    ]
    written = await tier_client.write_batch(tenant, inputs, verbatim=True)
    opener, answer, loose = (result.memory.id for result in written.results)

    async def vectors() -> dict[str, tuple[list[float] | None, list[float] | None]]:
        rows = await tier_server.pool.fetch(
            "SELECT id::text, embedding_en, embedding_en_ctx FROM memories WHERE tenant_id = $1", tenant
        )

        def listed(vector: Any) -> list[float] | None:
            return None if vector is None else list(vector.to_list())

        return {r["id"]: (listed(r["embedding_en"]), listed(r["embedding_en_ctx"])) for r in rows}

    async def with_context(*ids: str) -> bool:
        held = await vectors()
        return all(held[i][1] is not None for i in ids)

    await eventually(lambda: with_context(opener, answer))
    held = await vectors()
    assert held[opener][1] == held[opener][0]  # the session's first memory: its own English vector
    assert held[loose][1] is None  # outside a session: none
    async with TritonEmbedder(triton_server.grpc_url, model="embed_en") as model:
        pair = (await model.embed([context_text(texts[0], texts[1])], timeout_s=10)).vectors[0]
    assert _cosine(held[answer][1], pair) > 0.99 and _cosine(held[answer][1], held[answer][0]) < 0.99

    await tier_client.erase(tenant, memory_ids=[opener])
    # Now the session's first memory: its context vector is its own English vector again.
    await eventually(lambda: _own_vector_again(vectors, answer))


async def _own_vector_again(
    vectors: Callable[[], Awaitable[dict[str, tuple[list[float] | None, list[float] | None]]]], memory_id: str
) -> bool:
    own, context = (await vectors())[memory_id]
    return context is not None and context == own


def _cosine(a: Sequence[float] | None, b: Sequence[float] | None) -> float:
    assert a is not None and b is not None
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


async def test_deleting_a_turn_clears_only_the_context_vector_of_the_one_after_it(
    tier_client: HindsightClient, tier_server: RunningServer, tenant: str
) -> None:
    """One recomputation for each memory deleted, never the whole session: a tenant deleting one turn of
    a long session cannot make the shared tier embed it all again."""
    texts = [f"Turn {n} of a long talk about the garden and its roses" for n in range(6)]
    inputs = [memory_input(t, tier="semantic", kind="fact", session_id="long") for t in texts]
    ids = [r.memory.id for r in (await tier_client.write_batch(tenant, inputs, verbatim=True)).results]

    async def all_have_context() -> bool:
        missing = await tier_server.pool.fetchval(
            "SELECT count(*) FROM memories WHERE tenant_id = $1 AND embedding_en_ctx IS NULL", tenant
        )
        return bool(missing == 0)

    await eventually(all_have_context)
    # In one transaction, so the worker cannot give the vector back before it is looked at.
    async with tier_server.pool.acquire() as connection, connection.transaction():
        await connection.execute(
            "DELETE FROM memories WHERE tenant_id = $1 AND id = $2::uuid", tenant, ids[2]
        )
        cleared = await connection.fetch(
            "SELECT id::text FROM memories WHERE tenant_id = $1 AND embedding_en_ctx IS NULL", tenant
        )
    assert [r["id"] for r in cleared] == [ids[3]]
