from dataclasses import replace
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from hindsight_server.domain.conversation import Role, Turn
from hindsight_server.domain.errors import InvalidArgument
from hindsight_server.domain.model import JsonValue
from hindsight_server.domain.session_summary import (
    RefreshDecision,
    SessionSummary,
    refresh_decision,
    summarize,
)

SHANGHAI = ZoneInfo("Asia/Shanghai")
NOW = datetime(2025, 1, 15, 10, 30, tzinfo=SHANGHAI)  # a Wednesday


def dialogue(*texts: str, first: int = 1) -> list[Turn]:
    """Alternating user / assistant turns, a minute apart, starting with the user."""
    return [
        Turn(first + n, Role.USER if n % 2 == 0 else Role.ASSISTANT, text, NOW + timedelta(minutes=n))
        for n, text in enumerate(texts)
    ]


BOOKING_ZH = dialogue(
    "我要订下周三下午的会议室, 10个人, A栋",
    "好的，下周三下午A栋有空，请问几点开始？",
    "改成周五",
)
BOOKING_EN = dialogue(
    "I need to book a meeting room next Wednesday afternoon for 10 people in building A",
    "Building A is free next Wednesday afternoon. What time should it start?",
    "Make it Friday",
)


@pytest.mark.parametrize(
    ("turns", "text"),
    [
        (BOOKING_ZH[:1], "目标：订会议室；已确认：2025-01-22（周三）下午、10人、A栋；待确认：具体时段"),
        (BOOKING_ZH, "目标：订会议室；已确认：2025-01-24（周五）下午、10人、A栋；待确认：具体时段"),
        (
            BOOKING_EN[:1],
            "Goal: book a meeting room; confirmed: 2025-01-22 (Wed) afternoon, 10 people, building A; "
            "open: exact time",
        ),
        (
            BOOKING_EN,
            "Goal: book a meeting room; confirmed: 2025-01-24 (Fri) afternoon, 10 people, building A; "
            "open: exact time",
        ),
    ],
)
def test_the_booking_scenario_ends_on_friday(turns: list[Turn], text: str) -> None:
    summary = summarize(turns, now=NOW)
    assert summary.text == text
    assert summary.intent == "book_meeting_room"
    assert summary.turn_count == len(turns)
    assert summary.updated_at == NOW


def test_the_booking_summary_is_structured() -> None:
    summary = summarize(BOOKING_ZH, now=NOW)
    assert summary.goal == "订会议室"
    assert list(summary.confirmed.items()) == [
        ("date", "2025-01-24"),
        ("part_of_day", "afternoon"),
        ("people", 10),
        ("building", "A"),
    ]
    assert summary.open_items == ("具体时段",)  # the time question is the same open item, not a second one
    assert summary.questions == ("请问几点开始？",)
    assert summary.language == "zh"


def test_folding_from_the_previous_summary_equals_summarizing_everything() -> None:
    first = summarize(BOOKING_ZH[:1], now=NOW)
    later = summarize(BOOKING_ZH[1:], first, now=NOW)  # working memory may have dropped turn 1
    whole = summarize(BOOKING_ZH, now=NOW)
    assert (later.confirmed, later.open_items, later.text, later.turn_count) == (
        whole.confirmed,
        whole.open_items,
        whole.text,
        whole.turn_count,
    )


def test_turns_the_previous_summary_covers_are_not_applied_again() -> None:
    whole = summarize(BOOKING_ZH, now=NOW)
    again = summarize(BOOKING_ZH, whole, now=NOW)
    assert again.confirmed["date"] == "2025-01-24"  # turn 1's Wednesday does not come back
    assert again == replace(whole, updated_at=NOW)


@pytest.mark.parametrize(
    ("texts", "confirmed", "decision", "open_items"),
    [
        (
            ("帮我订个会议室，明天下午，5个人", "A栋301会议室有空，可以吗？", "好的"),
            {"date": "2025-01-16", "part_of_day": "afternoon", "people": 5, "building": "A", "room": "301"},
            "accepted",
            ("具体时段",),
        ),
        (
            ("帮我订个会议室，明天下午，5个人", "A栋301会议室有空，可以吗？", "不行"),
            {"date": "2025-01-16", "part_of_day": "afternoon", "people": 5},
            "rejected",
            ("具体时段", "地点", "替代方案"),
        ),
        (
            ("帮我订个会议室，明天下午，5个人", "A栋301会议室有空，可以吗？", "不，换成B栋"),
            {"date": "2025-01-16", "part_of_day": "afternoon", "people": 5, "building": "B"},
            "",
            ("具体时段",),
        ),
        (
            ("Book a meeting room tomorrow at 3pm for 4 people", "Room 301 is free. Shall I book it?", "yes"),
            {"date": "2025-01-16", "part_of_day": "afternoon", "time": "15:00", "people": 4, "room": "301"},
            "accepted",
            (),
        ),
        (  # a yes with no proposal before it changes nothing
            ("Book a meeting room tomorrow at 3pm for 4 people", "What time?", "yes"),
            {"date": "2025-01-16", "part_of_day": "afternoon", "time": "15:00", "people": 4},
            "",
            ("place",),
        ),
    ],
)
def test_yes_and_no_answer_the_last_proposal(
    texts: tuple[str, ...], confirmed: dict[str, JsonValue], decision: str, open_items: tuple[str, ...]
) -> None:
    summary = summarize(dialogue(*texts), now=NOW)
    assert dict(summary.confirmed) == confirmed
    assert summary.decision == decision
    assert summary.open_items == open_items


@pytest.mark.parametrize(
    ("texts", "open_items"),
    [
        (("帮我订会议室", "请问几位？"), ("日期", "时间", "人数", "地点")),
        (("帮我订会议室", "请问几位？", "十个"), ("日期", "时间", "地点")),  # a bare count answers 几位
        (("帮我订会议室，明天下午3点，6个人，A栋", "需要投影仪吗？"), ("需要投影仪吗？",)),
        (("帮我订会议室，明天下午3点，6个人，A栋", "需要投影仪吗？", "要"), ()),
        (("帮我查一下订单", "请提供订单号？"), ("请提供订单号？",)),
        (("Can you check my order?", "Which order number?", "12345"), ()),
    ],
)
def test_open_items_are_what_is_missing_and_unanswered(
    texts: tuple[str, ...], open_items: tuple[str, ...]
) -> None:
    assert summarize(dialogue(*texts), now=NOW).open_items == open_items


@pytest.mark.parametrize(
    ("texts", "key", "value"),
    [
        (("和张三开会，明天下午", "好的", "再加上李四，跟李四讨论"), "participants", ["张三", "李四"]),
        (("和张三开会，明天下午", "好的", "改成和李四"), "participants", ["李四"]),
        (("明天下午3点开会", "好的", "改成上午"), "time", None),  # 15:00 is not in the morning
        (("明天下午3点开会", "好的", "改成4点"), "time", "16:00"),
        (("Meet Alice tomorrow at 3pm", "Sure", "make it 10am"), "time", "10:00"),
    ],
)
def test_later_turns_override_earlier_parameters(texts: tuple[str, ...], key: str, value: JsonValue) -> None:
    assert summarize(dialogue(*texts), now=NOW).confirmed.get(key) == value


def test_caller_entities_join_what_the_words_say() -> None:
    turn = Turn(1, Role.USER, "我要订会议室", NOW, {"building": "C", "projector": True})
    summary = summarize([turn], now=NOW)
    assert dict(summary.confirmed) == {"building": "C", "projector": True}
    assert summary.text == "目标：订会议室；已确认：C栋、projector：True；待确认：日期、时间、人数"


@pytest.mark.parametrize(
    ("texts", "goal", "intent"),
    [
        (("你好", "您好，有什么可以帮您？", "我想查一下我的订单状态"), "查一下我的订单状态", ""),
        (("Hi", "Hello! How can I help?", "I want to get a refund for my order"), "get a refund", "refund"),
        (("订下周五的机票",), "订机票", "book_flight"),  # an intent named without 我要/帮我
        (("今天天气不错",), "", ""),
    ],
)
def test_the_goal_is_the_first_request(texts: tuple[str, ...], goal: str, intent: str) -> None:
    summary = summarize(dialogue(*texts), now=NOW)
    assert (summary.goal, summary.intent) == (goal, intent)


def test_no_turns_keep_the_previous_summary() -> None:
    previous = summarize(BOOKING_EN, now=NOW)
    later = NOW + timedelta(hours=1)
    assert summarize([], previous, now=later) == replace(previous, updated_at=later)
    assert summarize([], now=NOW) == SessionSummary(updated_at=NOW)


@pytest.mark.parametrize(
    ("turns", "field"),
    [
        ([Turn(1, Role.USER, "  ", NOW)], "turns[0].text"),
        ([Turn(1, Role.USER, "hi", NOW), Turn(2, Role.USER, "", NOW)], "turns[1].text"),
        ([Turn(1, Role.USER, "hi", datetime(2025, 1, 15))], "turns[0].occurred_at"),
        ([Turn(2, Role.USER, "hi", NOW), Turn(2, Role.USER, "again", NOW)], "turns[1].index"),
        ([Turn(0, Role.USER, "hi", NOW)], "turns[0].index"),
    ],
)
def test_bad_turns_name_the_field(turns: list[Turn], field: str) -> None:
    with pytest.raises(InvalidArgument) as error:
        summarize(turns, now=NOW)
    assert error.value.field == field


STORED = summarize(BOOKING_ZH[:1], now=NOW)  # turn 1: Wednesday


@pytest.mark.parametrize(
    ("stored", "turns", "every", "keys", "decision"),
    [
        (None, BOOKING_ZH[:1], 3, None, RefreshDecision(True, "first")),
        (STORED, BOOKING_ZH[1:], 3, None, RefreshDecision(True, "key_entity_changed", ("date",))),
        (STORED, BOOKING_ZH[1:2], 3, None, RefreshDecision(False, "")),  # one turn, nothing changed
        (STORED, dialogue("好", "嗯", "好的", first=2), 3, None, RefreshDecision(True, "every_n_turns")),
        (STORED, dialogue("好", "嗯", "好的", first=2), 4, None, RefreshDecision(False, "")),
        (STORED, BOOKING_ZH[1:], 3, {"people"}, RefreshDecision(False, "")),  # the date is not a key here
        (
            STORED,
            dialogue("改成下午3点", first=2),
            3,
            None,
            RefreshDecision(True, "key_entity_changed", ("time",)),
        ),
    ],
)
def test_refresh_every_three_turns_or_when_a_key_entity_changes(
    stored: SessionSummary | None,
    turns: list[Turn],
    every: int,
    keys: set[str] | None,
    decision: RefreshDecision,
) -> None:
    current = summarize(turns, stored, now=NOW)
    assert refresh_decision(stored, current, every_n_turns=every, key_entities=keys) == decision


def test_refresh_rejects_a_zero_period() -> None:
    with pytest.raises(InvalidArgument, match="every_n_turns"):
        refresh_decision(STORED, STORED, every_n_turns=0)


@pytest.mark.parametrize(
    ("first", "second", "wednesday", "friday"),
    [
        ("我要订下周三下午的会议室, 10个人, A栋", "改成周五", "2025-01-22", "2025-01-24"),
        (
            "I want to book a meeting room next Wednesday afternoon, 10 people, building A",
            "change it to Friday",
            "2025-01-22",
            "2025-01-24",
        ),
    ],
)
def test_the_issue_scenario_turn_two_moves_the_booking_to_friday(
    first: str, second: str, wednesday: str, friday: str
) -> None:
    turn_one = Turn(1, Role.USER, first, NOW)
    turn_two = Turn(2, Role.USER, second, NOW + timedelta(minutes=1))
    stored = summarize([turn_one], now=NOW)
    current = summarize([turn_one, turn_two], stored, now=NOW)
    assert (stored.confirmed["date"], current.confirmed["date"]) == (wednesday, friday)
    assert current.confirmed["part_of_day"] == "afternoon" and current.confirmed["people"] == 10
    assert refresh_decision(stored, current) == RefreshDecision(True, "key_entity_changed", ("date",))


def test_a_known_intent_named_without_a_request_keeps_the_goal() -> None:
    turns = dialogue("订下周五的机票", "好的", "帮我查一下订单")
    assert (summarize(turns, now=NOW).goal, summarize(turns, now=NOW).intent) == ("订机票", "book_flight")


def test_caller_entities_in_any_shape_do_not_break_the_summary() -> None:
    turns = [
        Turn(1, Role.USER, "明天下午开会", NOW, {"time": "下午晚些", "date": "soon"}),
        Turn(2, Role.USER, "改成上午", NOW, {"people": "ten"}),
    ]
    summary = summarize(turns, now=NOW)
    assert summary.confirmed["time"] == "下午晚些"  # not a clock time: kept as the caller gave it
    assert summary.text == "目标：安排会议；已确认：soon下午晚些、people：ten"
