import time
from datetime import date, datetime
from zoneinfo import ZoneInfo

import pytest

from hindsight_server.domain.model import JsonValue
from hindsight_server.domain.numerals import parse_number
from hindsight_server.domain.slots import describe, describe_all, extract

SHANGHAI = ZoneInfo("Asia/Shanghai")
NOW = datetime(2025, 1, 15, 10, 30, tzinfo=SHANGHAI)  # a Wednesday


@pytest.mark.parametrize(
    ("text", "number"),
    [
        ("10", 10),
        ("１０", 10),  # full-width
        ("十", 10),
        ("十二", 12),
        ("二十", 20),
        ("二十五", 25),
        ("两", 2),
        ("两百", 200),
        ("一百零五", 105),
        ("三千二百", 3200),
        ("二〇二五", 2025),
        ("ten", 10),
        ("Twenty-five", 25),
        ("twenty five", 25),
        ("a dozen", 12),
        ("十十", None),
        ("两三", None),  # "two or three", not a number
        ("二三十", None),
        ("lots", None),
        ("", None),
        ("9" * 18, 999_999_999_999_999_999),
        ("9" * 19, None),  # an identifier, not a count
        ("9" * 5000, None),  # past Python's 4,300-digit limit: no ValueError
    ],
)
def test_parse_number(text: str, number: int | None) -> None:
    assert parse_number(text) == number


# (text, the parameters it states), all said at NOW.
EXTRACTED: list[tuple[str, dict[str, JsonValue]]] = [
    (
        "我要订下周三下午的会议室, 10个人, A栋",
        {"date": "2025-01-22", "part_of_day": "afternoon", "people": 10, "building": "A"},
    ),
    ("改成周五", {"date": "2025-01-17"}),  # no date agreed yet: the coming Friday
    ("周三", {"date": "2025-01-15"}),  # a bare weekday is the next one, today included
    ("上周三", {"date": "2025-01-08"}),  # explicitly past: kept
    ("明天上午十点半", {"date": "2025-01-16", "part_of_day": "morning", "time": "10:30"}),
    ("后天晚上8点", {"date": "2025-01-17", "part_of_day": "evening", "time": "20:00"}),
    ("5月8日", {"date": "2025-05-08"}),
    ("1月3日", {"date": "2026-01-03"}),  # passed this year: next year's
    ("2024年1月3日", {"date": "2024-01-03"}),  # a year given: kept
    ("下午3点", {"part_of_day": "afternoon", "time": "15:00"}),
    ("3点开会", {"part_of_day": "afternoon", "time": "15:00"}),  # office hours without 上午/下午
    ("上午9点一刻", {"part_of_day": "morning", "time": "09:15"}),
    ("一点半", {"part_of_day": "afternoon", "time": "13:30"}),
    ("快一点", {}),  # "a little faster"
    ("下午2点到4点", {"part_of_day": "afternoon", "time": "14:00-16:00"}),
    ("14:00-16:00", {"part_of_day": "afternoon", "time": "14:00-16:00"}),
    ("晚上", {"part_of_day": "evening"}),
    ("早上好", {}),  # a greeting, not a time
    ("十个人", {"people": 10}),
    ("两位", {"people": 2}),
    ("人数：8", {"people": 8}),
    ("第三名", {}),
    ("A栋3楼301会议室", {"building": "A", "floor": 3, "room": "301"}),
    ("3号楼", {"building": "3"}),
    ("会议室B12", {"room": "B12"}),
    ("靠窗的座位", {}),
    ("和张三、李四一起开会", {"participants": ["张三", "李四"]}),
    ("跟王总开会", {"participants": ["王总"]}),
    ("和同事开会", {}),
    (
        "book a meeting room next Wednesday afternoon for 10 people in building A",
        {"date": "2025-01-22", "part_of_day": "afternoon", "people": 10, "building": "A"},
    ),
    ("make it Friday", {"date": "2025-01-17"}),
    ("tomorrow at 3pm", {"date": "2025-01-16", "part_of_day": "afternoon", "time": "15:00"}),
    ("2-4pm", {"part_of_day": "afternoon", "time": "14:00-16:00"}),
    ("at 3 o'clock", {"part_of_day": "afternoon", "time": "15:00"}),
    ("a table for four at 7:30pm", {"part_of_day": "evening", "time": "19:30", "people": 4}),
    ("for 2 hours", {}),
    ("good morning", {}),
    ("room 301 on the 3rd floor", {"floor": 3, "room": "301"}),
    ("building 3, floor 2", {"building": "3", "floor": 2}),
    ("a building with a view", {}),
    ("a call with Alice and Bob Smith", {"participants": ["Alice", "Bob Smith"]}),
    ("a room for Alice on Friday", {"date": "2025-01-17", "participants": ["Alice"]}),
    ("meet with Team Blue", {}),
]


@pytest.mark.parametrize(("text", "expected"), EXTRACTED)
def test_extract(text: str, expected: dict[str, JsonValue]) -> None:
    assert extract(text, NOW) == expected


@pytest.mark.parametrize(
    ("text", "anchor", "day"),
    [
        ("改成周五", date(2025, 1, 22), "2025-01-24"),  # the Friday of the agreed week
        ("make it Friday", date(2025, 1, 22), "2025-01-24"),
        ("改成周一", date(2025, 1, 15), "2025-01-20"),  # that week's Monday is past: the next one
        ("改成下周五", date(2025, 1, 29), "2025-01-24"),  # an explicit week wins over the anchor
    ],
)
def test_a_bare_weekday_lands_in_the_agreed_week(text: str, anchor: date, day: str) -> None:
    assert extract(text, NOW, anchor)["date"] == day


@pytest.mark.parametrize(
    ("key", "value", "zh", "en"),
    [
        ("date", "2025-01-24", "2025-01-24（周五）", "2025-01-24 (Fri)"),
        ("part_of_day", "afternoon", "下午", "afternoon"),
        ("people", 10, "10人", "10 people"),
        ("people", 1, "1人", "1 person"),
        ("building", "A", "A栋", "building A"),
        ("building", "3", "3号楼", "building 3"),
        ("floor", 3, "3楼", "floor 3"),
        ("room", "301", "301室", "room 301"),
        ("participants", ["张三", "李四"], "与张三、李四", "with 张三, 李四"),
        ("projector", True, "projector：True", "projector: True"),
    ],
)
def test_describe(key: str, value: JsonValue, zh: str, en: str) -> None:
    assert (describe(key, value, "zh"), describe(key, value, "en")) == (zh, en)


def test_describe_all_groups_the_day_and_the_place() -> None:
    values: dict[str, JsonValue] = {
        "date": "2025-01-22",
        "part_of_day": "afternoon",
        "people": 10,
        "building": "A",
        "floor": 3,
    }
    assert describe_all(values, "zh") == ["2025-01-22（周三）下午", "10人", "A栋3楼"]
    assert describe_all(values | {"time": "15:00"}, "en") == [
        "2025-01-22 (Wed) 15:00",
        "10 people",
        "building A, floor 3",
    ]


@pytest.mark.parametrize(
    "text",
    [
        "9" * 16_000,
        "9" * 8_000 + "人",
        "一" * 5_460 + "人",
        "十" * 16_000 + "个人",
        "9" * 4_400 + "人 for 9" * 3,
    ],
)
def test_long_runs_of_digits_are_read_in_linear_time(text: str) -> None:
    """Unanchored, a count pattern retried from every digit of a run: 16,000 digits took 2.7 s."""
    started = time.process_time()  # CPU time: a loaded CI core is not the pattern's cost
    extract(text, NOW)
    assert time.process_time() - started < 0.25
