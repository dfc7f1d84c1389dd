"""The embedding worker on the in-memory queue and inference tier (tests/support/fakes): what a round
embeds and in which calls, which memories become ready, English vectors only for English text and only
while that model answers, a failing chunk's backoff without holding the rest back, a row that failed
before embedded alone, and the scope sizes told. The SQL behind the queue runs in
tests/inference/test_backfill_leases.py."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest

from hindsight_server.domain.model import EmbeddingState, Memory, Status, VectorSpace, Visibility
from hindsight_server.domain.vectors import context_text
from hindsight_server.pipelines.backfill import BackfillSettings, EmbeddingBackfill
from hindsight_server.pipelines.scope_sizes import ScopeSizes
from tests.domain.builders import memory
from tests.support.fakes.clock import FakeClock
from tests.support.fakes.embedding_queue import InMemoryEmbeddingQueue
from tests.support.fakes.inference import FakeInferenceTier, hashed_vector

NOW = datetime(2024, 5, 1, 12, tzinfo=UTC)


@dataclass
class Worker:
    backfill: EmbeddingBackfill
    queue: InMemoryEmbeddingQueue
    tier: FakeInferenceTier
    clock: FakeClock
    sizes: ScopeSizes

    def state(self, memory_id: str) -> EmbeddingState:
        return self.queue.get("acme", memory_id).embedding_state

    def has(self, space: VectorSpace, memory_id: str) -> bool:
        return memory_id in self.queue.vectors.get(space, {})


def worker(*memories: Memory, tier: FakeInferenceTier | None = None, **settings: Any) -> Worker:
    clock = FakeClock(NOW)
    queue = InMemoryEmbeddingQueue(clock=clock)
    for pending in memories:
        queue.add(pending)
    tier = tier or FakeInferenceTier()
    sizes = ScopeSizes(queue)
    backfill = EmbeddingBackfill(queue, tier, BackfillSettings(**settings), scope_sizes=sizes)
    return Worker(backfill, queue, tier, clock, sizes)


def pending(n: int, content: str = "", **fields: Any) -> Memory:
    return memory(
        **{
            "id": f"00000000-0000-7000-8000-{n:012d}",
            "content": content or f"The user visited museum number {n}",
            "embedding_state": EmbeddingState.PENDING,
            "created_at": NOW - timedelta(minutes=100 - n),
        }
        | fields
    )


async def test_a_round_embeds_the_oldest_pending_memories_in_chunks_and_makes_them_ready() -> None:
    w = worker(
        *(pending(n) for n in range(5)), pending(9, embedding_state=EmbeddingState.READY), batch=4, chunk=3
    )
    assert await w.backfill.run_once() == 4
    assert [len(texts) for _, texts in w.tier.embedded] == [3, 1]
    assert [w.state(pending(n).id) for n in range(5)] == [EmbeddingState.READY] * 4 + [EmbeddingState.PENDING]
    np.testing.assert_array_equal(
        w.queue.vectors[VectorSpace.MULTILINGUAL][pending(0).id], hashed_vector(pending(0).content)
    )
    assert not w.has(VectorSpace.MULTILINGUAL, pending(9).id)  # not pending: not the worker's
    assert await w.backfill.run_once() == 1
    assert await w.backfill.run_once() == 0


async def test_a_tenant_that_queued_after_a_long_backlog_is_embedded_in_the_next_round() -> None:
    flood = [pending(n, tenant_id="flood") for n in range(20)]
    w = worker(*flood, pending(50, tenant_id="quiet"), batch=4, chunk=4)
    assert await w.backfill.run_once() == 4  # the quiet tenant's one, the flood the rest of the batch
    assert w.queue.get("quiet", pending(50).id).embedding_state is EmbeddingState.READY
    assert await w.backfill.run_once() == 4  # the flood alone: its whole batch


async def test_a_round_waits_while_the_tier_is_down_and_claims_nothing() -> None:
    w = worker(pending(1), tier=FakeInferenceTier(up=False))
    assert await w.backfill.run_once() == 0
    assert w.queue.retry_at == {} and w.tier.embedded == []
    w.tier.up = True
    assert await w.backfill.run_once() == 1 and w.state(pending(1).id) is EmbeddingState.READY


@pytest.mark.parametrize(
    ("content", "english_vector"),
    [("The user prefers window seats", True), ("用户偏好靠窗座位", False)],
)
async def test_english_text_gets_the_english_models_vector_too(content: str, english_vector: bool) -> None:
    w = worker(pending(1, content), tier=FakeInferenceTier(english=True))
    await w.backfill.run_once()
    assert w.state(pending(1).id) is EmbeddingState.READY
    assert w.has(VectorSpace.MULTILINGUAL, pending(1).id)
    assert w.has(VectorSpace.ENGLISH, pending(1).id) is english_vector


async def test_while_the_english_model_is_away_english_memories_wait_for_it_once_multilingual() -> None:
    english, chinese = pending(1, "The user prefers window seats"), pending(2, "用户偏好靠窗座位")
    w = worker(english, chinese, tier=FakeInferenceTier(english=True, english_up=False))
    assert await w.backfill.run_once() == 2
    assert w.state(english.id) is EmbeddingState.PENDING and w.has(VectorSpace.MULTILINGUAL, english.id)
    assert w.state(chinese.id) is EmbeddingState.READY
    assert await w.backfill.run_once() == 0  # lacking only the English vector: left until it answers
    w.tier.english_up = True
    assert await w.backfill.run_once() == 1
    assert w.state(english.id) is EmbeddingState.READY and w.has(VectorSpace.ENGLISH, english.id)
    assert [space for space, _ in w.tier.embedded] == [VectorSpace.MULTILINGUAL, VectorSpace.ENGLISH]


@pytest.mark.parametrize(
    ("content", "own"),
    [("The user prefers window seats", VectorSpace.ENGLISH), ("用户偏好靠窗座位", VectorSpace.CHINESE)],
)
async def test_each_memory_gets_its_languages_own_vector_and_no_other(content: str, own: VectorSpace) -> None:
    w = worker(pending(1, content), tier=FakeInferenceTier(english=True, chinese=True))
    await w.backfill.run_once()
    assert w.state(pending(1).id) is EmbeddingState.READY
    assert {space for space in VectorSpace if w.has(space, pending(1).id)} == {VectorSpace.MULTILINGUAL, own}


async def test_while_the_chinese_model_is_away_only_chinese_memories_wait_for_it() -> None:
    english, chinese = pending(1, "The user prefers window seats"), pending(2, "用户偏好靠窗座位")
    w = worker(english, chinese, tier=FakeInferenceTier(english=True, chinese=True, chinese_up=False))
    assert await w.backfill.run_once() == 2
    assert w.state(english.id) is EmbeddingState.READY and w.has(VectorSpace.ENGLISH, english.id)
    assert w.state(chinese.id) is EmbeddingState.PENDING and w.has(VectorSpace.MULTILINGUAL, chinese.id)
    assert await w.backfill.run_once() == 0  # lacking only the Chinese vector: left until it answers
    w.tier.chinese_up = True
    assert await w.backfill.run_once() == 1
    assert w.state(chinese.id) is EmbeddingState.READY and w.has(VectorSpace.CHINESE, chinese.id)


async def test_a_failing_chunk_backs_off_and_its_bad_row_is_retried_alone() -> None:
    bad = pending(1, "a text the model cannot take")
    w = worker(
        pending(0),
        bad,
        pending(2),
        pending(3),
        tier=FakeInferenceTier(fails_on=frozenset({bad.content})),
        chunk=2,
        retry_s=10.0,
    )
    assert await w.backfill.run_once() == 4
    assert [w.state(pending(n).id) for n in range(4)] == [
        EmbeddingState.PENDING,
        EmbeddingState.PENDING,
        EmbeddingState.READY,
        EmbeddingState.READY,
    ]
    assert w.queue.attempts == {pending(0).id: 1, bad.id: 1}
    assert w.queue.retry_at[bad.id] == NOW + timedelta(seconds=10)
    assert await w.backfill.run_once() == 0  # backing off
    w.clock.advance(timedelta(seconds=10))
    assert await w.backfill.run_once() == 2
    assert w.tier.embedded[-2:] == [
        (VectorSpace.MULTILINGUAL, (pending(0).content,)),
        (VectorSpace.MULTILINGUAL, (bad.content,)),
    ]  # each alone: the bad one fails only itself
    assert w.state(pending(0).id) is EmbeddingState.READY and w.state(bad.id) is EmbeddingState.PENDING
    assert w.queue.attempts == {bad.id: 2}
    assert w.queue.retry_at[bad.id] == w.clock() + timedelta(seconds=20)  # doubled


@pytest.mark.parametrize(
    ("attempts", "seconds"), [(0, 10.0), (1, 20.0), (3, 80.0), (9, 3_600.0), (500, 3_600.0)]
)
def test_the_backoff_doubles_with_each_failure_up_to_its_cap(attempts: int, seconds: float) -> None:
    assert BackfillSettings(retry_s=10.0, max_retry_s=3_600.0).backoff(attempts) == timedelta(seconds=seconds)


def test_a_lease_outlasts_a_round_at_every_deadline() -> None:
    settings = BackfillSettings(batch=256, chunk=32, timeout_s=10.0, max_give_way_s=2.0)
    # 8 chunks of each language's own vectors, 8 of multilingual ones, 8 of English context vectors,
    # and the languages' partial last chunks.
    assert settings.lease == timedelta(seconds=2 * (8 + 8 + 8 + 2) * 12.0)
    assert settings.context_lease == timedelta(seconds=2 * 8 * 12.0)
    assert BackfillSettings(batch=1, chunk=32, timeout_s=1.0).lease == timedelta(seconds=60)


async def test_the_scope_sizes_are_told_what_a_round_embedded() -> None:
    w = worker(
        pending(1, "The user prefers window seats"),
        pending(2, "用户偏好靠窗座位", subject="user-8"),
        tier=FakeInferenceTier(english=True, english_up=False),
    )
    before = await w.sizes.of("acme", "user-7"), await w.sizes.of("acme", "user-8")  # counted: none yet
    await w.backfill.run_once()
    after = await w.sizes.of("acme", "user-7"), await w.sizes.of("acme", "user-8")  # noted, not recounted
    assert [
        (a.rows - b.rows, a.without_english - b.without_english) for a, b in zip(after, before, strict=True)
    ] == [
        (1, 1),  # embedded, its English vector still to come
        (1, 1),  # a Chinese memory never gets one
    ]


def _turn(n: int, content: str, session: str, **fields: Any) -> Memory:
    return pending(n, content, session_id=session, **fields)


async def test_a_sessions_english_memories_get_the_vector_of_them_read_after_the_turn_before() -> None:
    opener = _turn(1, "My sister let me adopt the shelter puppy", "s1")
    answer = _turn(2, "We named him Biscuit", "s1")
    elsewhere = _turn(3, "The user booked a table for two", "s2")
    loose = pending(4, "The user is allergic to peanuts", session_id="")
    tier = FakeInferenceTier(english=True, english_context=True)
    w = worker(opener, answer, elsewhere, loose, tier=tier)
    await w.backfill.run_once()
    context = w.queue.vectors[VectorSpace.ENGLISH_CONTEXT]
    assert set(context) == {opener.id, answer.id, elsewhere.id}  # a memory outside a session gets none
    # A session's first memory takes its own English vector, computed once; the next one is embedded read
    # after it, in one call for the batch.
    english = w.queue.vectors[VectorSpace.ENGLISH]
    np.testing.assert_array_equal(context[opener.id], english[opener.id])
    np.testing.assert_array_equal(context[elsewhere.id], english[elsewhere.id])
    expected = context_text(opener.content, answer.content)
    np.testing.assert_array_equal(context[answer.id], hashed_vector(expected, VectorSpace.ENGLISH))
    assert [call for call in w.tier.embedded if call[0] is VectorSpace.ENGLISH_CONTEXT] == [
        (VectorSpace.ENGLISH_CONTEXT, (expected,))
    ]
    assert w.queue.context_retry_at == {}
    await w.backfill.run_once()
    assert len([call for call in w.tier.embedded if call[0] is VectorSpace.ENGLISH_CONTEXT]) == 1  # done


async def test_the_turn_before_is_one_its_readers_may_read() -> None:
    """Another agent's private turn, or a deleted one, never lends its words to a memory's vector."""
    shared = _turn(1, "The user asked about the museum hours", "s1")
    private = _turn(
        2, "A private note of the planner agent", "s1", agent_id="planner", visibility=Visibility.PRIVATE
    )
    deleted = _turn(3, "A turn the user deleted", "s1", status=Status.DELETED)
    answer = _turn(4, "It opens at nine", "s1")
    w = worker(shared, private, deleted, answer, tier=FakeInferenceTier(english=True, english_context=True))
    await w.backfill.run_once()
    expected = hashed_vector(context_text(shared.content, answer.content), VectorSpace.ENGLISH)
    np.testing.assert_array_equal(w.queue.vectors[VectorSpace.ENGLISH_CONTEXT][answer.id], expected)


async def test_a_chunk_the_tier_fails_waits_for_its_lease_and_the_rest_go_on() -> None:
    first, second = _turn(1, "Where did you park the car", "s1"), _turn(2, "Behind the station", "s1")
    other_first, other = _turn(3, "Which film tonight", "s2"), _turn(4, "The one about whales", "s2")
    bad = context_text(first.content, second.content)
    tier = FakeInferenceTier(english=True, english_context=True, fails_on=frozenset({bad}))
    w = worker(first, second, other_first, other, tier=tier, chunk=1)
    await w.backfill.run_once()
    context = w.queue.vectors[VectorSpace.ENGLISH_CONTEXT]
    assert second.id not in context and other.id in context  # the failing chunk held back only itself
    tier.fails_on = frozenset()
    await w.backfill.run_once()
    assert second.id not in context  # leased: not claimed again before the lease ends
    w.clock.advance(BackfillSettings(chunk=1).context_lease)
    await w.backfill.run_once()
    np.testing.assert_array_equal(context[second.id], hashed_vector(bad, VectorSpace.ENGLISH))


async def test_without_the_context_space_no_context_vector_is_computed() -> None:
    w = worker(
        _turn(1, "Where did you park", "s1"),
        _turn(2, "Behind the station", "s1"),
        tier=FakeInferenceTier(english=True),
    )
    await w.backfill.run_once()
    assert VectorSpace.ENGLISH_CONTEXT not in w.queue.vectors
    assert all(space is not VectorSpace.ENGLISH_CONTEXT for space, _ in w.tier.embedded)
