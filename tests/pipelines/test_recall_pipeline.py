"""The recall pipeline's logic on an in-memory store (tests/support/fakes): which channels run, what the
gate keeps, the context stage, packing, and a store that cannot answer. No inference tier here: the
vector channel is covered against a real Triton in tests/inference."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from hindsight_server.domain.errors import Unavailable
from hindsight_server.domain.model import Channel, Kind, Memory, RecallQuery, Tier
from hindsight_server.domain.policy import Limits, RecallPolicy
from hindsight_server.pipelines.recall import RecallPipeline, RecallSettings
from tests.domain.builders import memory, recall_query
from tests.support.fakes.memory_store import InMemoryMemoryStore

NOW = datetime(2024, 5, 1, 12, tzinfo=UTC)
POLICY = RecallPolicy()


def query(text: str, **fields: Any) -> RecallQuery:
    return recall_query(text, NOW, POLICY, **fields)


def turn(n: int, content: str, *, session: str = "s1", **fields: Any) -> Memory:
    return memory(
        id=f"00000000-0000-7000-8000-{n:012d}",
        content=content,
        session_id=session,
        tier=Tier.EPISODIC,
        kind=Kind.EVENT,
        created_at=NOW - timedelta(hours=10 - n),
        **fields,
    )


def holding(memories: list[Memory]) -> InMemoryMemoryStore:
    store = InMemoryMemoryStore()
    for stored in memories:
        store.add(stored)
    return store


def pipeline(store: InMemoryMemoryStore) -> RecallPipeline:
    return RecallPipeline(store, RecallSettings(Limits(), POLICY))


CONVERSATION = [
    turn(1, "We talked about the weather all morning"),
    turn(2, "I booked the harbour ferry for Friday"),
    turn(3, "It leaves at nine from pier four"),  # the answer, right after the matching turn
    turn(4, "Then we had lunch", session="s2"),
    turn(5, "The harbour ferry was cancelled", tenant_id="other"),  # another tenant
]


async def test_the_words_of_the_query_find_the_memory_and_its_next_turn() -> None:
    store = holding(CONVERSATION)
    result = await pipeline(store).recall(query("when does the harbour ferry leave"))
    ids = [hit.memory.id for hit in result.hits]
    assert ids[0] == CONVERSATION[1].id
    assert CONVERSATION[2].id in ids  # the context stage's turn
    assert all(hit.memory.tenant_id == "acme" for hit in result.hits)  # never another tenant's
    assert CONVERSATION[3].id not in ids  # matches nothing, not next to a match
    assert Channel.CONTEXT in [r.channel for r in result.channel_results]
    assert Channel.VECTOR not in result.channels_used and not result.channels_degraded
    assert result.hits[0].directly_relevant
    assert "harbour ferry" in result.injection_text and result.tokens_used > 0
    assert store.counted == []  # no inference tier: no vector search, so no scope to count


async def test_the_ongoing_sessions_memory_is_kept_without_a_match() -> None:
    store = holding(CONVERSATION)
    result = await pipeline(store).recall(query("what about dessert", session_id="s2"))
    assert [hit.memory.id for hit in result.hits] == [CONVERSATION[3].id]
    assert Channel.SESSION in result.channels_used
    assert not result.hits[0].directly_relevant


async def test_nothing_relevant_means_no_hit_and_no_injection() -> None:
    store = holding(CONVERSATION)
    result = await pipeline(store).recall(query("quantum chromodynamics"))
    assert result.hits == [] and result.injection_text == "" and result.tokens_used == 0


async def test_a_store_that_cannot_answer_fails_the_recall_with_its_error() -> None:
    store = holding(CONVERSATION)
    store.failing = Unavailable("the database is down")
    with pytest.raises(Unavailable, match="the database is down"):
        await pipeline(store).recall(query("harbour ferry"))
