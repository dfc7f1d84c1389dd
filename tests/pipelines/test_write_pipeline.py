"""The write pipeline's logic on the in-memory store and inference tier (tests/support/fakes): what a write
stores with which vectors and states, how it resolves against the memories already there (the rules are
domain/conflicts.py's; which writes are checked, and with what, is the pipeline's), replays, and a sick
inference tier. The SQL behind the same calls is tested against PostgreSQL in tests/store."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pytest

from hindsight_server.domain.errors import InvalidArgument
from hindsight_server.domain.model import (
    EmbeddingState,
    Kind,
    MemoryDraft,
    MemoryPatch,
    Resolution,
    Status,
    Tier,
    VectorSpace,
)
from hindsight_server.domain.policy import Limits, TtlPolicy, WritePolicy
from hindsight_server.pipelines.write import WritePipeline, WriteSettings
from tests.support.fakes.inference import FakeInferenceTier, hashed_vector
from tests.support.fakes.memory_store import InMemoryMemoryStore

NOW = datetime(2024, 5, 1, 12, tzinfo=UTC)


@dataclass
class Writes:
    pipeline: WritePipeline
    store: InMemoryMemoryStore


def writes(inference: FakeInferenceTier | None = None) -> Writes:
    store = InMemoryMemoryStore()
    settings = WriteSettings(Limits(), TtlPolicy(), WritePolicy())
    return Writes(WritePipeline(store, settings, lambda: NOW, inference), store)


def draft(content: str, **fields: Any) -> MemoryDraft:
    return MemoryDraft(
        **{"tenant_id": "acme", "subject": "user-7", "tier": Tier.SEMANTIC, "kind": Kind.FACT} | fields,
        content=content,
    )


async def test_a_write_is_stored_ready_with_its_embedding() -> None:
    w = writes(FakeInferenceTier())
    outcome = await w.pipeline.write(draft("The user lives in Lisbon"))
    stored = w.store.get("acme", outcome.memory.id)
    assert outcome.created and outcome.resolution is Resolution.CREATED
    assert stored.status is Status.ACTIVE and stored.embedding_state is EmbeddingState.READY
    vector = w.store.vectors[VectorSpace.MULTILINGUAL][stored.id]
    np.testing.assert_array_equal(vector, hashed_vector("The user lives in Lisbon"))
    assert stored.id not in w.store.vectors.get(VectorSpace.ENGLISH, {})  # no English model configured


@pytest.mark.parametrize(
    ("inference", "state"),
    [
        (FakeInferenceTier(up=False), EmbeddingState.PENDING),  # the worker embeds it later
        (None, EmbeddingState.DISABLED),  # a server without an inference tier
    ],
)
async def test_a_write_without_embeddings_is_acknowledged_without_a_vector(
    inference: FakeInferenceTier | None, state: EmbeddingState
) -> None:
    w = writes(inference)
    outcome = await w.pipeline.write(draft("The user lives in Lisbon"))
    assert outcome.created and w.store.get("acme", outcome.memory.id).embedding_state is state
    assert all(outcome.memory.id not in by_id for by_id in w.store.vectors.values())


@pytest.mark.parametrize(
    ("content", "english_vector"),
    [("The user lives in Lisbon", True), ("用户住在里斯本", False)],  # only English gets the English model's
)
async def test_an_english_write_gets_both_models_vectors_inline(content: str, english_vector: bool) -> None:
    w = writes(FakeInferenceTier(english=True))
    outcome = await w.pipeline.write(draft(content))
    assert w.store.get("acme", outcome.memory.id).embedding_state is EmbeddingState.READY
    assert outcome.memory.id in w.store.vectors[VectorSpace.MULTILINGUAL]
    assert (outcome.memory.id in w.store.vectors.get(VectorSpace.ENGLISH, {})) is english_vector


@pytest.mark.parametrize(
    ("content", "own"),
    [
        ("The user lives in Lisbon", VectorSpace.ENGLISH),
        ("用户住在里斯本", VectorSpace.CHINESE),
        ("用户说 I moved to Porto last week", VectorSpace.ENGLISH),  # mostly Latin letters: English
    ],
)
async def test_a_write_gets_its_own_languages_vector_beside_the_multilingual_one(
    content: str, own: VectorSpace
) -> None:
    w = writes(FakeInferenceTier(english=True, chinese=True))
    outcome = await w.pipeline.write(draft(content))
    assert w.store.get("acme", outcome.memory.id).embedding_state is EmbeddingState.READY
    held = {space for space, by_id in w.store.vectors.items() if outcome.memory.id in by_id}
    assert held == {VectorSpace.MULTILINGUAL, own}
    np.testing.assert_array_equal(w.store.vectors[own][outcome.memory.id], hashed_vector(content, own))


async def test_a_mixed_batch_sends_each_language_to_its_own_model_once() -> None:
    tier = FakeInferenceTier(english=True, chinese=True)
    w = writes(tier)
    contents = ["The user lives in Lisbon", "用户喜欢喝咖啡", "The user owns a bike", "用户住在杭州"]
    await w.pipeline.write_batch([draft(content) for content in contents])
    own_calls = [(space, texts) for space, texts in tier.embedded if space is not VectorSpace.MULTILINGUAL]
    assert sorted(own_calls) == sorted(
        [
            (VectorSpace.ENGLISH, ("The user lives in Lisbon", "The user owns a bike")),
            (VectorSpace.CHINESE, ("用户喜欢喝咖啡", "用户住在杭州")),
        ]
    )


async def test_a_chinese_write_while_its_model_is_down_waits_for_the_worker_for_that_vector_only() -> None:
    w = writes(FakeInferenceTier(english=True, chinese=True, chinese_up=False))
    chinese = await w.pipeline.write(draft("用户住在里斯本"))
    english = await w.pipeline.write(draft("The user lives in Lisbon"))
    assert w.store.get("acme", chinese.memory.id).embedding_state is EmbeddingState.PENDING
    assert chinese.memory.id in w.store.vectors[VectorSpace.MULTILINGUAL]
    assert w.store.get("acme", english.memory.id).embedding_state is EmbeddingState.READY


async def test_a_large_english_batch_leaves_its_english_vectors_to_the_worker() -> None:
    w = writes(FakeInferenceTier(english=True))
    drafts = [draft(f"The user visited museum number {n}", kind=Kind.EVENT) for n in range(17)]
    outcomes = await w.pipeline.write_batch(drafts)
    assert len(w.store.of_tenant("acme")) == 17
    assert all(w.store.get("acme", o.memory.id).embedding_state is EmbeddingState.PENDING for o in outcomes)
    assert w.store.vectors.get(VectorSpace.ENGLISH, {}) == {}
    assert len(w.store.vectors[VectorSpace.MULTILINGUAL]) == 17


@pytest.mark.parametrize(
    ("first", "second", "resolution"),
    [
        # the same normalised content: said again
        ("I prefer window seats", "i prefer WINDOW seats!", Resolution.MERGED),
        # the same slot, a new value: a new version
        ("The user lives in Lisbon", "The user moved to Porto", Resolution.SUPERSEDED),
        # two facts
        ("The user lives in Lisbon", "The user's dog is called Rex", Resolution.CREATED),
    ],
)
async def test_a_write_resolves_against_its_peers(first: str, second: str, resolution: Resolution) -> None:
    w = writes(FakeInferenceTier())
    old = (await w.pipeline.write(draft(first))).memory
    outcome = await w.pipeline.write(draft(second))
    assert outcome.resolution is resolution
    active = [m for m in w.store.of_tenant("acme") if m.status is Status.ACTIVE]
    if resolution is Resolution.MERGED:
        assert outcome.reason and not outcome.created and outcome.memory.id == old.id
        assert [(m.id, m.seen_count) for m in active] == [(old.id, 2)]
    elif resolution is Resolution.SUPERSEDED:
        assert outcome.reason and outcome.created and outcome.memory.supersedes == old.id
        assert [m.id for m in active] == [outcome.memory.id]
        assert w.store.get("acme", old.id).superseded_by == outcome.memory.id
    else:
        assert outcome.created and {m.id for m in active} == {old.id, outcome.memory.id}


@pytest.mark.parametrize(("embedded", "resolution"), [(True, Resolution.MERGED), (False, Resolution.CREATED)])
async def test_a_rewording_merges_by_the_similarity_of_its_embedding(
    embedded: bool, resolution: Resolution
) -> None:
    """The rules judge a rewording by the cosine to its peers, which only an embedded write has."""
    w = writes(FakeInferenceTier(up=embedded))
    await w.pipeline.write(draft("The user is allergic to peanuts"))
    outcome = await w.pipeline.write(draft("User is allergic to peanuts, badly"))
    assert outcome.resolution is resolution
    assert len(w.store.of_tenant("acme")) == (1 if embedded else 2)


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ({"tier": Tier.WORKING}, {"tier": Tier.WORKING}),  # the raw conversation: never merged
        ({}, {"confidence": 0.5}),  # pending: not believed yet, replaces nothing
        ({}, {"tier": Tier.EPISODIC}),  # another tier: not a peer
        ({}, {"subject": "user-8"}),  # another subject: not a peer
        ({}, {"kind": Kind.PREFERENCE}),  # another kind: not a peer
    ],
)
async def test_the_same_words_not_checked_or_not_peers_are_stored_beside(
    first: dict[str, Any], second: dict[str, Any]
) -> None:
    w = writes(FakeInferenceTier())
    await w.pipeline.write(draft("I prefer window seats", **first))
    outcome = await w.pipeline.write(draft("I prefer window seats", **second))
    assert outcome.created and outcome.resolution is Resolution.CREATED
    assert len(w.store.of_tenant("acme")) == 2


async def test_a_verbatim_batch_stores_duplicates_as_given() -> None:
    w = writes(FakeInferenceTier())
    outcomes = await w.pipeline.write_batch([draft("I prefer window seats")] * 2, verbatim=True)
    assert [o.resolution for o in outcomes] == [Resolution.CREATED] * 2
    assert len(w.store.of_tenant("acme")) == 2


async def test_a_low_confidence_write_waits_in_the_pending_area_until_confirmed() -> None:
    w = writes(FakeInferenceTier())
    outcome = await w.pipeline.write(draft("The user might own a boat", confidence=0.5))
    assert w.store.get("acme", outcome.memory.id).status is Status.PENDING
    confirmed = await w.pipeline.decide_pending("acme", outcome.memory.id, confirm=True)
    assert confirmed.status is Status.ACTIVE and confirmed.version == 2


async def test_a_retried_write_is_answered_with_the_first_one() -> None:
    w = writes(FakeInferenceTier())
    first = await w.pipeline.write(draft("The user lives in Lisbon", idempotency_key="k1"))
    again = await w.pipeline.write(draft("The user lives in Lisbon", idempotency_key="k1"))
    assert not again.created and again.resolution is Resolution.REPLAYED
    assert again.memory.id == first.memory.id and len(w.store.of_tenant("acme")) == 1


async def test_an_invalid_batch_stores_nothing() -> None:
    w = writes(FakeInferenceTier())
    with pytest.raises(InvalidArgument):
        await w.pipeline.write_batch([draft("The user lives in Lisbon"), draft("")])
    assert w.store.of_tenant("acme") == []


async def test_an_update_of_the_content_leaves_its_new_vectors_to_the_worker() -> None:
    w = writes(FakeInferenceTier())
    outcome = await w.pipeline.write(draft("The user lives in Lisbon"))
    patch = MemoryPatch("acme", outcome.memory.id, frozenset({"content"}), content="The user lives in Porto")
    updated = await w.pipeline.update(patch)
    assert updated.content == "The user lives in Porto" and updated.embedding_state is EmbeddingState.PENDING
    assert outcome.memory.id not in w.store.vectors[VectorSpace.MULTILINGUAL]
