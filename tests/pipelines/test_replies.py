"""Idempotent replies on the in-memory ledger (tests/support/fakes): a keyed request runs once and its
retries get its answer; the same key for another request, a retry while the first runs, a first call that
fails or was abandoned; the cleanup job's batches and its time budget. The SQL behind the same calls runs
against PostgreSQL in tests/rpc/test_security.py and tests/rpc/test_memories.py."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest

from hindsight_server.domain.errors import Aborted, FailedPrecondition
from hindsight_server.pipelines.replies import IdempotentReplies, ReplySettings
from tests.support.fakes.clock import FakeClock
from tests.support.fakes.reply_ledger import InMemoryReplyLedger

NOW = datetime(2024, 5, 1, 12, tzinfo=UTC)
SETTINGS = ReplySettings(
    keep=timedelta(hours=24),
    abandoned_after=timedelta(minutes=10),
    forget_batch=2,
    forget_budget=timedelta(minutes=2),
)


@dataclass
class Replies:
    pipeline: IdempotentReplies
    ledger: InMemoryReplyLedger
    clock: FakeClock
    ran: list[bytes] = field(default_factory=list)  # the answers the requests' runs computed, in order

    def answering(self, answer: bytes) -> Callable[[], Awaitable[bytes]]:
        async def run() -> bytes:
            self.ran.append(answer)
            return answer

        return run

    async def update(
        self, key: str, request: bytes = b"req", answer: bytes = b"ok", tenant: str = "acme"
    ) -> bytes:
        return await self.pipeline.once(tenant, "Update", key, request, self.answering(answer))


def replies(monotonic_step_s: float = 0.0) -> Replies:
    clock = FakeClock(NOW, monotonic_step_s=monotonic_step_s)
    ledger = InMemoryReplyLedger()
    return Replies(IdempotentReplies(ledger, clock, SETTINGS, clock.monotonic), ledger, clock)


async def test_a_request_without_a_key_runs_every_time_and_keeps_nothing() -> None:
    r = replies()
    assert [await r.update("", answer=b"one"), await r.update("", answer=b"two")] == [b"one", b"two"]
    assert r.ran == [b"one", b"two"] and r.ledger.replies == {}


async def test_a_retry_gets_the_first_answer_without_running_again() -> None:
    r = replies()
    assert await r.update("k1", answer=b"first") == b"first"
    assert await r.update("k1", answer=b"second") == b"first"
    assert r.ran == [b"first"]


@pytest.mark.parametrize(
    ("tenant", "method"),
    [("other", "Update"), ("acme", "Delete")],  # a key names one tenant's request of one method
)
async def test_a_key_of_another_tenant_or_method_is_another_request(tenant: str, method: str) -> None:
    r = replies()
    await r.update("k1", answer=b"first")
    answer = await r.pipeline.once(tenant, method, "k1", b"req", r.answering(b"second"))
    assert answer == b"second" and r.ran == [b"first", b"second"]


async def test_a_key_reused_for_another_request_is_refused_and_the_first_answer_kept() -> None:
    r = replies()
    await r.update("k1", request=b"set colour blue", answer=b"first")
    with pytest.raises(FailedPrecondition) as raised:
        await r.update("k1", request=b"set colour red")
    message = "idempotency_key 'k1' was used for a different Update request; use a new key"
    assert str(raised.value) == message and raised.value.cause == "IDEMPOTENCY_KEY_REUSED"
    assert [v.subject for v in raised.value.violations] == ["idempotency_keys/k1"]
    assert r.ran == [b"first"] and await r.update("k1", request=b"set colour blue") == b"first"


async def test_a_retry_while_the_first_call_runs_is_told_to_retry_later() -> None:
    r = replies()
    release = asyncio.Event()

    async def slow() -> bytes:
        await release.wait()
        return b"first"

    first = asyncio.create_task(r.pipeline.once("acme", "Update", "k1", b"req", slow))
    await asyncio.sleep(0)  # the first call claims the key
    with pytest.raises(Aborted, match="a Update request with idempotency_key 'k1' is still running; retry"):
        await r.update("k1")
    release.set()
    assert await first == b"first" and await r.update("k1") == b"first"
    assert r.ran == []  # the retries never ran


@pytest.mark.parametrize("failure", [ValueError("the store refused it"), asyncio.CancelledError()])
async def test_a_first_call_that_fails_frees_its_key_for_a_retry(failure: BaseException) -> None:
    r = replies()

    async def failing() -> bytes:
        raise failure

    with pytest.raises(type(failure)):
        await r.pipeline.once("acme", "Update", "k1", b"req", failing)
    assert r.ledger.replies == {}
    assert await r.update("k1", answer=b"retried") == b"retried" and r.ran == [b"retried"]


@pytest.mark.parametrize(
    ("later", "taken_over"), [(timedelta(minutes=9), False), (timedelta(minutes=11), True)]
)
async def test_a_claim_left_without_an_answer_is_taken_over_only_once_abandoned(
    later: timedelta, taken_over: bool
) -> None:
    """A claim whose server died is never answered: past abandoned_after a retry runs in its place."""
    r = replies()
    never = asyncio.Event()

    async def hung() -> bytes:
        await never.wait()
        return b"never"

    dead = asyncio.create_task(r.pipeline.once("acme", "Update", "k1", b"req", hung))
    await asyncio.sleep(0)
    r.clock.advance(later)
    try:
        if taken_over:
            assert await r.update("k1", answer=b"retried") == b"retried"
        else:
            with pytest.raises(Aborted):
                await r.update("k1")
    finally:
        dead.cancel()
        with pytest.raises(asyncio.CancelledError):
            await dead
    # The hung call's release, as it is cancelled, frees an unanswered key but leaves an answer alone.
    kept = r.ledger.replies.get(("acme", "Update", "k1"))
    assert (None if kept is None else kept.answer) == (b"retried" if taken_over else None)


@pytest.mark.parametrize(
    ("monotonic_step_s", "forgotten"),
    [
        (0.0, 10),  # within its budget: batch after batch until nothing old is left
        (50.0, 6),  # 50 s a batch, a budget of 120 s: the run stops after the batch that spends it
        (500.0, 2),  # over budget at once: one batch still goes
    ],
)
async def test_forgetting_drops_answers_past_the_retry_window_within_the_time_budget(
    monotonic_step_s: float, forgotten: int
) -> None:
    r = replies(monotonic_step_s)
    for n in range(10):
        await r.update(f"old-{n}")
    r.clock.advance(timedelta(hours=23))
    await r.update("recent")
    r.clock.advance(timedelta(hours=2))  # the old ones are 25 h old, the recent one 2 h
    assert await r.pipeline.forget_expired(r.clock()) == forgotten
    left = {key for _, _, key in r.ledger.replies}
    assert "recent" in left and len(left) == 11 - forgotten
    assert await r.update("recent", answer=b"again") == b"ok"  # still answered from the ledger
