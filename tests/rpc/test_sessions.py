"""Sessions over real gRPC: turns, the summary and its versions, remember-or-not, consolidation, and the
issue's scenarios in Chinese and in English."""

from __future__ import annotations

from collections.abc import Awaitable
from datetime import date, timedelta

import grpc
import pytest
from google.rpc import error_details_pb2

from hindsight.client import HindsightClient
from hindsight.v1 import memory_pb2 as pb
from tests.conftest import MovableClock
from tests.support.rich_errors import detail
from tests.support.structs import list_of, str_of


async def _say(
    client: HindsightClient, tenant: str, session: str, *texts: str, role: str = "user"
) -> pb.AppendTurnResponse:
    response = pb.AppendTurnResponse()
    for text in texts:
        response = await client.append_turn(tenant, session, text, role=role, subject="u1")
    return response


@pytest.mark.parametrize(
    ("first", "change", "weekday_word"),
    [
        ("我要订下周三下午的会议室, 10个人, A栋", "改成周五", "周五"),
        (
            "I want to book a meeting room next Wednesday afternoon for 10 people in building A",
            "make it Friday",
            "Fri",
        ),
    ],
)
async def test_a_changed_booking_date_supersedes_the_old_summary(
    client: HindsightClient, tenant: str, clock: MovableClock, first: str, change: str, weekday_word: str
) -> None:
    booked = await _say(client, tenant, "s1", first)
    assert booked.summary_refreshed
    wednesday = date.fromisoformat(str_of(booked.summary.confirmed["date"]))
    assert wednesday.weekday() == 2
    assert booked.summary.confirmed["people"] == 10
    assert booked.summary.confirmed["building"] == "A"
    clock.advance(timedelta(minutes=1))
    before_change = clock()
    clock.advance(timedelta(minutes=1))

    changed = await _say(client, tenant, "s1", change)
    assert changed.summary_refreshed
    assert changed.summary.confirmed["date"] == (wednesday + timedelta(days=2)).isoformat()
    assert weekday_word in changed.summary.text
    summarized = await client.summarize(tenant, "s1")
    assert summarized.confirmed["date"] == changed.summary.confirmed["date"]
    assert [t.text for t in summarized.recent_turns] == [first, change]
    assert summarized.turn_count == 2

    query = "会议室预订" if weekday_word == "周五" else "meeting room booking"
    found = await client.recall(tenant, query, now=clock(), tiers=["working"], kinds=["summary"], min_score=0)
    assert len(found.hits) == 1
    friday_summary = found.hits[0].memory
    assert friday_summary.entities["date"] == changed.summary.confirmed["date"]

    chain = await client.history(tenant, friday_summary.id)
    assert [m.entities["date"] for m in chain.versions] == [
        wednesday.isoformat(),
        changed.summary.confirmed["date"],
    ]
    assert chain.versions[0].status == pb.STATUS_SUPERSEDED

    then = await client.recall(
        tenant, query, now=clock(), as_of=before_change, tiers=["working"], kinds=["summary"], min_score=0
    )
    assert [h.memory.entities["date"] for h in then.hits] == [wednesday.isoformat()]


@pytest.mark.parametrize(
    ("preference", "later_query"),
    [
        ("以后都给我订靠窗的位置", "帮我订个座位"),
        ("From now on always book me a window seat", "book me a seat"),
    ],
)
async def test_an_explicit_preference_is_recalled_first_in_a_later_session(
    client: HindsightClient, tenant: str, clock: MovableClock, preference: str, later_query: str
) -> None:
    said = await _say(client, tenant, "monday", preference)
    (kept,) = said.remembered
    assert (kept.tier, kept.kind, kept.status) == (pb.TIER_SEMANTIC, pb.KIND_PREFERENCE, pb.STATUS_ACTIVE)
    assert kept.confidence >= 0.9
    assert kept.provenance["session_id"] == "monday"
    clock.advance(timedelta(days=3))
    await _say(client, tenant, "thursday", "你好" if preference.startswith("以后") else "hello")
    found = await client.recall(tenant, later_query, session_id="thursday", now=clock())
    assert found.hits and found.hits[0].memory.id == kept.id
    assert kept.content in found.injection_text


async def test_chit_chat_and_one_off_parameters_are_not_remembered(
    client: HindsightClient, tenant: str
) -> None:
    for text in ("你好", "这次订下午吧", "thanks!", "what time is it?"):
        assert not (await _say(client, tenant, "s", text)).remembered


@pytest.mark.parametrize("hedged", ["I think maybe I like jazz", "我可能喜欢爵士乐"])
async def test_an_unsure_statement_waits_as_pending_until_confirmed(
    client: HindsightClient, tenant: str, hedged: str
) -> None:
    (pending,) = (await _say(client, tenant, "s", hedged)).remembered
    assert pending.status == pb.STATUS_PENDING
    assert pending.confidence < 0.7
    query = "jazz" if hedged.startswith("I") else "爵士乐"
    assert pending.id not in {h.memory.id for h in (await client.recall(tenant, query, min_score=0)).hits}
    await client.confirm_pending(tenant, pending.id)
    assert pending.id in {h.memory.id for h in (await client.recall(tenant, query, min_score=0)).hits}


@pytest.mark.parametrize("language", ["zh", "en"])
async def test_working_memory_leaves_after_a_day_and_its_episode_stays(
    client: HindsightClient, tenant: str, clock: MovableClock, language: str
) -> None:
    turns = {
        "zh": ["我要订下周三下午的会议室", "10个人", "A栋", "好的", "就这样，谢谢"],
        "en": [
            "I want to book a meeting room next Wednesday afternoon",
            "for 10 people",
            "in building A",
            "yes",
            "that's all, thanks",
        ],
    }[language]
    last = await _say(client, tenant, "book", *turns)
    episode = last.episode
    assert episode.tier == pb.TIER_EPISODIC
    assert episode.entities["building"] == "A"
    assert episode.provenance["session_id"] == "book"
    assert list_of(episode.provenance["turns"]) == [1, 5]
    query = "会议室" if language == "zh" else "meeting room"
    now = await client.recall(tenant, query, now=clock(), top_k=20, min_score=0)
    assert {h.memory.tier for h in now.hits} >= {pb.TIER_WORKING, pb.TIER_EPISODIC}

    clock.advance(timedelta(hours=25))
    later = await client.recall(tenant, query, now=clock(), top_k=20, min_score=0)
    assert [h.memory.id for h in later.hits if h.memory.tier == pb.TIER_WORKING] == []
    assert episode.id in {h.memory.id for h in later.hits}


async def test_end_session_consolidates_once(client: HindsightClient, tenant: str) -> None:
    await _say(client, tenant, "short", "I need a flight to Berlin on Friday")
    ended = await client.end_session(tenant, "short", reason="task_done")
    assert ended.episode.tier == pb.TIER_EPISODIC
    assert ended.episode.provenance["trigger"] == "task_done"
    again = await client.end_session(tenant, "short", reason="task_done")
    assert not again.HasField("episode")


async def test_the_same_preference_said_five_times_is_one_memory(
    client: HindsightClient, tenant: str
) -> None:
    ids: set[str] = set()
    for session in ("a", "b", "c", "d", "e"):
        said = await _say(client, tenant, session, "I prefer window seats")
        ids.update(m.id for m in said.remembered)
    (only,) = ids
    assert (await client.get(tenant, only)).seen_count == 5


async def test_a_retried_append_is_not_counted_twice(client: HindsightClient, tenant: str) -> None:
    first = await client.append_turn(tenant, "s", "hello", idempotency_key="k1")
    again = await client.append_turn(tenant, "s", "hello", idempotency_key="k1")
    assert again.turn.index == first.turn.index == 1
    assert (await client.summarize(tenant, "s")).turn_count == 1


async def test_assistant_turns_answer_and_are_never_remembered(client: HindsightClient, tenant: str) -> None:
    await _say(client, tenant, "s", "帮我订明天的会议室")
    offered = await _say(client, tenant, "s", "好的，几位参加？", role="assistant")
    assert not offered.remembered
    answered = await _say(client, tenant, "s", "8个人")
    assert answered.summary.confirmed["people"] == 8


@pytest.mark.parametrize(
    ("call", "code", "field"),
    [
        (lambda c, t: c.summarize(t, "nosuch"), grpc.StatusCode.NOT_FOUND, "session"),
        (lambda c, t: c.end_session(t, "nosuch"), grpc.StatusCode.NOT_FOUND, "session"),
        (lambda c, t: c.append_turn(t, "s", "   "), grpc.StatusCode.INVALID_ARGUMENT, "text"),
        (lambda c, t: c.append_turn(t, "", "hello"), grpc.StatusCode.INVALID_ARGUMENT, "session_id"),
        (lambda c, t: c.summarize(t, ""), grpc.StatusCode.INVALID_ARGUMENT, "session_id"),
        (lambda c, t: c.append_turn("", "s", "hello"), grpc.StatusCode.INVALID_ARGUMENT, "tenant_id"),
    ],
)
async def test_bad_session_requests_name_what_is_wrong(
    client: HindsightClient, tenant: str, call: object, code: grpc.StatusCode, field: str
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as failed:
        await call(client, tenant)  # type: ignore[operator]
    assert failed.value.code() == code
    assert field in (failed.value.details() or "")


async def _refused_as_mismatch(call: Awaitable[object]) -> str:
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await call
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    info = detail(refused.value, error_details_pb2.ErrorInfo)
    assert info is not None and info.reason == "SESSION_SUBJECT_MISMATCH"
    return refused.value.details() or ""


async def test_expected_subject_confines_a_call_to_that_subjects_sessions(
    client: HindsightClient, tenant: str
) -> None:
    """The gateway's bound tokens: one statement decides, with no read before it (no race, one call)."""
    await client.append_turn(tenant, "bob-s", "I like jazz", subject="bob")
    await client.append_turn(tenant, "anyone-s", "a session of no subject")
    for session in ("bob-s", "anyone-s"):
        message = await _refused_as_mismatch(
            client.append_turn(tenant, session, "I am alice now", expected_subject="alice")
        )
        assert message == f"session {session!r} is not a session of subject 'alice'"  # nothing of bob
        await _refused_as_mismatch(client.end_session(tenant, session, expected_subject="alice"))
    bobs = await client.summarize(tenant, "bob-s")
    assert bobs.subject == "bob" and bobs.turn_count == 1  # nothing was appended

    first = await client.append_turn(tenant, "alice-s", "I moved to Porto", expected_subject="alice")
    assert first.summary.subject == "alice"  # a new session becomes the expected subject's
    again = await client.append_turn(
        tenant, "alice-s", "and I like tea", subject="alice", expected_subject="alice", idempotency_key="k1"
    )
    assert again.turn.index == 2
    ended = await client.end_session(tenant, "alice-s", expected_subject="alice")
    assert ended.HasField("episode")

    # A retried append (same key) into another subject's session is refused as well, not replayed.
    await client.append_turn(tenant, "bob-s", "and blues", subject="bob", idempotency_key="k2")
    await _refused_as_mismatch(
        client.append_turn(tenant, "bob-s", "and blues", idempotency_key="k2", expected_subject="alice")
    )
    with pytest.raises(grpc.aio.AioRpcError) as both:
        await client.append_turn(tenant, "x-s", "hi", subject="bob", expected_subject="alice")
    assert both.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (both.value.details() or "").startswith("subject:")
