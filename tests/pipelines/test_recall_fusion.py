"""The recall pipeline with an inference tier, on the fakes (tests/support/fakes): the vector channel fused
with the lexical one, a sick embedder or reranker degrading the recall instead of failing it, the
cross-encoder's rescoring, and the token budget of the injected text."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from hindsight_server.domain.model import Channel, Kind, Memory, RecallResult, Tier, VectorSpace
from hindsight_server.domain.policy import Limits, RecallPolicy
from hindsight_server.domain.vectors import context_text
from hindsight_server.pipelines.recall import RecallPipeline, RecallSettings
from tests.domain.builders import memory, recall_query
from tests.support.fakes.inference import FakeInferenceTier, hashed_vector
from tests.support.fakes.memory_store import InMemoryMemoryStore

NOW = datetime(2024, 5, 1, 12, tzinfo=UTC)

FACTS = [
    "The user is allergic to peanuts",
    "The user lives in Lisbon near the river",
    "The user's daughter plays the violin",
    "The user drives an old blue Volvo",
]


def fact(n: int, content: str) -> Memory:
    return memory(
        id=f"00000000-0000-7000-8000-{n:012d}",
        content=content,
        session_id="",
        tier=Tier.SEMANTIC,
        kind=Kind.FACT,
        created_at=NOW - timedelta(days=n),
    )


def embedded_store(contents: list[str]) -> InMemoryMemoryStore:
    """The memories with the fake embedder's vectors, as the write path would have stored them."""
    store = InMemoryMemoryStore()
    for n, content in enumerate(contents, start=1):
        store.add(fact(n, content), {VectorSpace.MULTILINGUAL: hashed_vector(content)})
    return store


async def recall(
    store: InMemoryMemoryStore,
    inference: FakeInferenceTier,
    text: str,
    *,
    policy: RecallPolicy | None = None,
    **fields: Any,
) -> RecallResult:
    policy = policy or RecallPolicy()
    query = recall_query(text, NOW, policy, **fields)
    return await RecallPipeline(store, RecallSettings(Limits(), policy), inference).recall(query)


async def test_the_vector_and_lexical_channels_are_fused_on_the_best_memory() -> None:
    store = embedded_store(FACTS)
    result = await recall(store, FakeInferenceTier(), "is the user allergic to peanuts")
    best = result.hits[0]
    assert best.memory.content == FACTS[0] and best.directly_relevant
    assert set(best.channels) >= {Channel.VECTOR, Channel.LEXICAL}  # found by both, fused into one hit
    assert {Channel.VECTOR, Channel.LEXICAL} <= set(result.channels_used) and not result.channels_degraded
    assert [h.memory.id for h in result.hits].count(best.memory.id) == 1
    assert store.counted == [("acme", "")]  # the vector search was planned by the scope's size


async def test_a_sick_embedder_degrades_the_vector_channel_and_the_words_still_answer() -> None:
    store = embedded_store(FACTS)
    result = await recall(store, FakeInferenceTier(up=False), "is the user allergic to peanuts")
    assert result.channels_degraded == [Channel.VECTOR]
    assert Channel.VECTOR not in result.channels_used and Channel.LEXICAL in result.channels_used
    assert result.hits[0].memory.content == FACTS[0]
    assert set(result.hits[0].channels) == {Channel.LEXICAL}


@pytest.mark.parametrize(
    ("reranks", "on_gpu", "policy", "reranked"),
    [
        (True, False, RecallPolicy(rerank=True), True),
        (False, False, RecallPolicy(rerank=True), False),  # no cross-encoder: answered without it
        (True, True, RecallPolicy(), True),  # unset: on where it runs on a GPU
        (True, False, RecallPolicy(), False),  # ... and off on CPU
        (True, True, RecallPolicy(rerank=False), False),
    ],
)
async def test_the_cross_encoder_rescores_when_the_policy_and_the_tier_allow(
    reranks: bool, on_gpu: bool, policy: RecallPolicy, reranked: bool
) -> None:
    store = embedded_store(FACTS)
    tier = FakeInferenceTier(reranks=reranks, on_gpu=on_gpu)
    result = await recall(store, tier, "is the user allergic to peanuts", policy=policy)
    assert result.reranked is reranked
    assert result.hits[0].memory.content == FACTS[0]


def test_admission_is_told_the_cross_encoder_work_a_recall_will_cost() -> None:
    limits = Limits()
    pipeline = RecallPipeline(
        InMemoryMemoryStore(),
        RecallSettings(limits, RecallPolicy()),
        FakeInferenceTier(reranks=True, on_gpu=True),
    )
    assert pipeline.rerank_load("is the user allergic to peanuts", "") == (30, True)
    assert pipeline.rerank_load("用户对花生过敏吗", "") == (0, True)  # Chinese: not reranked
    # Asked before validation: a query past the limit is read only as far as a valid one may go (here
    # English words), not through the megabytes behind them.
    hostile = "word " * (limits.max_query_bytes // 5) + "中" * 2_000_000
    assert pipeline.rerank_load(hostile, "") == (30, True)


@pytest.mark.parametrize("budget", [40, 80, 4000])
async def test_the_injected_text_keeps_to_the_token_budget(budget: int) -> None:
    contents = [f"The user visited the harbour museum on trip number {n} with friends" for n in range(12)]
    store = embedded_store(contents)
    result = await recall(store, FakeInferenceTier(), "harbour museum trip", token_budget=budget)
    packed = [hit for hit in result.hits if hit.packed]
    assert result.tokens_used <= budget
    assert all(hit.memory.content in result.injection_text for hit in packed)
    assert not any(hit.memory.content in result.injection_text for hit in result.hits if not hit.packed)
    if budget == 4000:
        assert len(packed) == len(result.hits) > 1  # room for every hit
    else:
        assert 0 < len(packed) < len(result.hits)  # the best that fit, the rest left out


async def test_another_tenants_memories_are_never_recalled() -> None:
    store = embedded_store(FACTS)
    other = replace(fact(9, FACTS[0]), tenant_id="other")
    store.add(other, {VectorSpace.MULTILINGUAL: hashed_vector(FACTS[0])})
    result = await recall(store, FakeInferenceTier(), "is the user allergic to peanuts")
    assert result.hits and all(hit.memory.tenant_id == "acme" for hit in result.hits)


def _english_store(turns: list[tuple[str, str]], *, with_context: bool) -> InMemoryMemoryStore:
    """English memories (session, content) as the write path and the worker store them: each its
    multilingual and English vectors and, `with_context`, the English model's vector of it read after
    the session's memory before it (its own English vector for a session's first)."""
    store = InMemoryMemoryStore()
    before: dict[str, str] = {}
    for n, (session, content) in enumerate(turns, start=1):
        vectors = {
            VectorSpace.MULTILINGUAL: hashed_vector(content),
            VectorSpace.ENGLISH: hashed_vector(content, VectorSpace.ENGLISH),
        }
        if with_context:
            text = content if session not in before else context_text(before[session], content)
            vectors[VectorSpace.ENGLISH_CONTEXT] = hashed_vector(text, VectorSpace.ENGLISH_CONTEXT)
        before[session] = content
        store.add(
            replace(fact(n, content), session_id=session, created_at=NOW - timedelta(hours=10 - n)), vectors
        )
    return store


async def test_an_english_query_also_compares_each_turn_read_after_the_one_before_it() -> None:
    """A turn that answers seldom says what it answers: "We named him Biscuit" holds none of the words of
    a question about the shelter puppy, the turn before it does. Its context vector (the English model
    reading both) joins an English query's cosine with its own vector and lifts it."""
    answer = "We named him Biscuit after the cookie he stole"
    turns = [
        ("s1", "My sister finally let me adopt the shelter puppy"),
        ("s1", answer),
        ("s2", "The neighbours puppy barks at night"),
        ("s3", "A new animal shelter opened downtown"),
        ("s4", "The user bought a sister a birthday cake"),
    ]
    similarity: dict[bool, float] = {}
    for with_context in (False, True):
        tier = FakeInferenceTier(english=True, english_context=with_context)
        result = await recall(
            _english_store(turns, with_context=with_context), tier, "what name did the shelter puppy get"
        )
        assert not result.channels_degraded
        hit = next(hit for hit in result.hits if hit.memory.content == answer)
        similarity[with_context] = hit.score.similarity
    assert similarity[True] > similarity[False] + 0.03
    assert [hit.memory.content for hit in result.hits][:2] == [turns[0][1], answer]
