from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from hindsight_server.domain.conflicts import Action, Existing, NewMemory, resolve
from hindsight_server.domain.consolidation import (
    ConsolidationDecision,
    ConsolidationEvent,
    ConsolidationPolicy,
    Outcome,
    Provenance,
    build_episode,
    consolidation_due,
    explicit_event,
)
from hindsight_server.domain.conversation import Role, Turn
from hindsight_server.domain.errors import InvalidArgument
from hindsight_server.domain.model import Kind, Tier
from hindsight_server.domain.session_summary import summarize
from tests.domain.builders import memory

SHANGHAI = ZoneInfo("Asia/Shanghai")
NOW = datetime(2025, 1, 15, 10, 30, tzinfo=SHANGHAI)
SECOND = timedelta(seconds=1)


def dialogue(*texts: str) -> list[Turn]:
    return [
        Turn(n + 1, Role.USER if n % 2 == 0 else Role.ASSISTANT, text, NOW + timedelta(minutes=n))
        for n, text in enumerate(texts)
    ]


@pytest.mark.parametrize(
    ("turns", "idle", "event", "policy", "decision"),
    [
        (
            0,
            600,
            ConsolidationEvent.TASK_DONE,
            None,
            ConsolidationDecision(False, "", "no turn since the last consolidation"),
        ),
        (
            1,
            0,
            ConsolidationEvent.TASK_DONE,
            None,
            ConsolidationDecision(True, "event", "explicit event: task_done"),
        ),
        (
            2,
            0,
            ConsolidationEvent.REMEMBER_THIS,
            None,
            ConsolidationDecision(True, "event", "explicit event: remember_this"),
        ),
        (5, 0, None, None, ConsolidationDecision(True, "turns", "5 turns since the last consolidation")),
        (4, 0, None, None, ConsolidationDecision(False, "", "not yet")),
        (4, 119, None, None, ConsolidationDecision(False, "", "not yet")),
        (1, 120, None, None, ConsolidationDecision(True, "idle", "idle for 120 s")),
        (
            3,
            30,
            None,
            ConsolidationPolicy(every_turns=3),
            ConsolidationDecision(True, "turns", "3 turns since the last consolidation"),
        ),
        (
            1,
            30,
            None,
            ConsolidationPolicy(idle=timedelta(seconds=30)),
            ConsolidationDecision(True, "idle", "idle for 30 s"),
        ),
    ],
)
def test_consolidation_due(
    turns: int,
    idle: int,
    event: ConsolidationEvent | None,
    policy: ConsolidationPolicy | None,
    decision: ConsolidationDecision,
) -> None:
    last_turn_at = NOW - idle * SECOND
    assert (
        consolidation_due(
            turns_since_last=turns, last_turn_at=last_turn_at, now=NOW, event=event, policy=policy
        )
        == decision
    )


def test_no_last_turn_time_never_counts_as_idle() -> None:
    assert not consolidation_due(turns_since_last=1, last_turn_at=None, now=NOW).consolidate


def test_bad_trigger_input() -> None:
    with pytest.raises(InvalidArgument, match="turns_since_last"):
        consolidation_due(turns_since_last=-1, last_turn_at=None, now=NOW)
    with pytest.raises(InvalidArgument, match="every_turns"):
        ConsolidationPolicy(every_turns=0)
    with pytest.raises(InvalidArgument, match="idle"):
        ConsolidationPolicy(idle=timedelta(0))


@pytest.mark.parametrize(
    ("role", "text", "event"),
    [
        (Role.USER, "记住这个", ConsolidationEvent.REMEMBER_THIS),
        (Role.USER, "这个方案不错，记下来", ConsolidationEvent.REMEMBER_THIS),
        (Role.USER, "Remember this.", ConsolidationEvent.REMEMBER_THIS),
        (Role.USER, "please keep this in mind", ConsolidationEvent.REMEMBER_THIS),
        (Role.USER, "算了，不订了", ConsolidationEvent.TASK_DONE),
        (Role.USER, "never mind", ConsolidationEvent.TASK_DONE),
        (Role.ASSISTANT, "已为您预订A栋301会议室。", ConsolidationEvent.TASK_DONE),
        (Role.ASSISTANT, "I've booked room 301 for Friday.", ConsolidationEvent.TASK_DONE),
        (Role.USER, "不用了，改成周五", None),  # a change, not a cancellation
        (Role.USER, "remember that my flight is on Friday", None),  # a statement: remember.decide keeps it
        (Role.ASSISTANT, "记住这个", None),
        (Role.USER, "我要订会议室", None),
    ],
)
def test_explicit_event(role: Role, text: str, event: ConsolidationEvent | None) -> None:
    assert explicit_event(Turn(1, role, text, NOW)) is event


BOOKING_ZH = dialogue(
    "我要订下周三下午的会议室, 10个人, A栋",
    "好的，请问几点开始？",
    "改成周五，3点",
    "已为您预订A栋301会议室，周五15:00。",
)
BOOKING_EN = dialogue(
    "I need to book a meeting room next Wednesday afternoon for 10 people in building A",
    "What time should it start?",
    "Make it Friday at 3pm",
    "I've booked room 301 in building A for Friday at 15:00.",
)


@pytest.mark.parametrize(
    ("turns", "summary_line"),
    [
        (BOOKING_ZH, "用户订会议室：2025-01-24（周五）15:00、10人、A栋；已完成"),
        (BOOKING_EN, "User: book a meeting room (2025-01-24 (Fri) 15:00, 10 people, building A); done"),
    ],
)
def test_an_episode_is_one_structured_record(turns: list[Turn], summary_line: str) -> None:
    summary = summarize(turns, now=NOW)
    episode = build_episode(
        turns, summary, session_id="s-1", agent_id="booker", subject="user-7", trigger="task_done"
    )
    assert episode.summary == summary_line
    assert (episode.occurred_at, episode.ended_at) == (turns[0].occurred_at, turns[-1].occurred_at)
    assert (episode.intent, episode.outcome) == ("book_meeting_room", Outcome.DONE)
    assert dict(episode.entities) == {
        "date": "2025-01-24",
        "part_of_day": "afternoon",
        "time": "15:00",
        "people": 10,
        "building": "A",
    }
    assert episode.actions == (turns[3].text,)
    assert episode.provenance == Provenance("s-1", 1, 4, "booker", "user-7", "task_done")
    assert episode.memory_entities() == dict(episode.entities) | {
        "session_id": "s-1",
        "turns": [1, 4],
        "outcome": "done",
    }


@pytest.mark.parametrize(
    ("texts", "outcome", "summary_line"),
    [
        (
            ("帮我订会议室，明天下午", "好的"),
            Outcome.OPEN,
            "用户订会议室：2025-01-16（周四）下午；未完成；待确认：具体时段、人数、地点",
        ),
        (
            ("帮我订会议室，明天下午", "好的", "算了，不订了"),
            Outcome.CANCELLED,
            "用户订会议室：2025-01-16（周四）下午；已取消",
        ),
        (
            ("Book a meeting room tomorrow at 3pm for 4 people", "Room 301 is free. Shall I book it?", "yes"),
            Outcome.CONFIRMED,
            "User: book a meeting room (2025-01-16 (Thu) 15:00, 4 people, room 301); confirmed",
        ),
        (
            ("Hello", "Hi! How can I help?"),
            Outcome.OPEN,
            "User: conversation; open; still open: How can I help?",
        ),
    ],
)
def test_the_outcome(texts: tuple[str, ...], outcome: Outcome, summary_line: str) -> None:
    turns = dialogue(*texts)
    episode = build_episode(turns, summarize(turns, now=NOW), session_id="s-1")
    assert (episode.outcome, episode.summary) == (outcome, summary_line)


@pytest.mark.parametrize(
    ("turns", "session_id", "field"),
    [
        ([], "s-1", "turns"),
        (BOOKING_ZH, "", "session_id"),
        ([Turn(1, Role.USER, "", NOW)], "s-1", "turns[0].text"),
    ],
)
def test_bad_episode_input(turns: list[Turn], session_id: str, field: str) -> None:
    with pytest.raises(InvalidArgument) as error:
        build_episode(turns, summarize(BOOKING_ZH, now=NOW), session_id=session_id)
    assert error.value.field == field


def test_an_episode_becomes_an_idempotent_episodic_draft() -> None:
    summary = summarize(BOOKING_ZH, now=NOW)
    episode = build_episode(BOOKING_ZH, summary, session_id="s-1", agent_id="booker", subject="user-7")
    draft = episode.draft("acme")
    assert (draft.tenant_id, draft.tier, draft.kind) == ("acme", Tier.EPISODIC, Kind.EVENT)
    assert (draft.subject, draft.agent_id, draft.session_id) == ("user-7", "booker", "s-1")
    assert (draft.content, draft.intent, draft.entities) == (
        episode.summary,
        "book_meeting_room",
        episode.memory_entities(),
    )
    assert (draft.valid_from, draft.occurred_at) == (BOOKING_ZH[0].occurred_at, BOOKING_ZH[0].occurred_at)
    assert draft.idempotency_key == "episode:s-1:1-4"
    assert (
        build_episode(BOOKING_ZH, summary, session_id="s-1").draft("acme").idempotency_key
        == draft.idempotency_key
    )


def test_episodes_of_different_sessions_never_supersede_each_other() -> None:
    summary = summarize(BOOKING_ZH, now=NOW)
    first = build_episode(BOOKING_ZH, summary, session_id="s-1").draft("acme")
    second = build_episode(BOOKING_ZH[:3], summary, session_id="s-2").draft("acme")
    stored = Existing.of(
        memory(
            id="m-1",
            tier=first.tier,
            kind=first.kind,
            subject=first.subject,
            intent=first.intent,
            entities=first.entities,
            content=first.content,
        )
    )
    assert resolve(NewMemory.of(second), [stored]).action is Action.NEW
    again = build_episode(BOOKING_ZH[:3], summary, session_id="s-1").draft(
        "acme"
    )  # same session, fewer turns
    assert resolve(NewMemory.of(again), [stored]).action is Action.SUPERSEDE
