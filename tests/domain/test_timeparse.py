from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from hindsight_server.domain.model import TimeWindow
from hindsight_server.domain.timeparse import TimeExpression, find_times, parse_time

SHANGHAI = ZoneInfo("Asia/Shanghai")
NOW = datetime(2025, 1, 15, 10, 30, tzinfo=SHANGHAI)  # a Wednesday; its ISO week starts Mon Jan 13


def at(year: int, month: int, day: int, hour: int = 0) -> datetime:
    return datetime(year, month, day, hour, tzinfo=SHANGHAI)


def days(first: date, end: date) -> TimeWindow:
    return TimeWindow(at(first.year, first.month, first.day), at(end.year, end.month, end.day))


def day(year: int, month: int, dom: int) -> TimeWindow:
    first = date(year, month, dom)
    return days(first, first + timedelta(days=1))


def week(year: int, month: int, monday: int) -> TimeWindow:
    first = date(year, month, monday)
    assert first.weekday() == 0
    return days(first, first + timedelta(weeks=1))


def month(year: int, number: int) -> TimeWindow:
    return days(date(year, number, 1), date(year + number // 12, number % 12 + 1, 1))


def year(number: int) -> TimeWindow:
    return days(date(number, 1, 1), date(number + 1, 1, 1))


def hours(year: int, month: int, dom: int, first: int, end: int) -> TimeWindow:
    start = at(year, month, dom, first)
    return TimeWindow(start, start + timedelta(hours=end - first))


def since(year: int, month: int, dom: int) -> TimeWindow:
    return TimeWindow(at(year, month, dom), NOW)


# (query, phrase, window): a hard expression, resolved against NOW.
CHINESE = [
    ("今天", "今天", day(2025, 1, 15)),
    ("昨天", "昨天", day(2025, 1, 14)),
    ("前天", "前天", day(2025, 1, 13)),
    ("大前天", "大前天", day(2025, 1, 12)),
    ("明天", "明天", day(2025, 1, 16)),
    ("后天", "后天", day(2025, 1, 17)),
    ("上周", "上周", week(2025, 1, 6)),
    ("上个星期", "上个星期", week(2025, 1, 6)),
    ("上礼拜", "上礼拜", week(2025, 1, 6)),
    ("这周", "这周", week(2025, 1, 13)),
    ("本周", "本周", week(2025, 1, 13)),
    ("下周", "下周", week(2025, 1, 20)),
    ("上上周", "上上周", week(2024, 12, 30)),
    ("上周三", "上周三", day(2025, 1, 8)),
    ("上星期三", "上星期三", day(2025, 1, 8)),
    ("上礼拜三", "上礼拜三", day(2025, 1, 8)),
    ("上个周五", "上个周五", day(2025, 1, 10)),
    ("周三", "周三", day(2025, 1, 8)),  # today is Wednesday: a bare weekday is strictly past
    ("星期三", "星期三", day(2025, 1, 8)),
    ("礼拜三", "礼拜三", day(2025, 1, 8)),
    ("周一", "周一", day(2025, 1, 13)),
    ("星期天", "星期天", day(2025, 1, 12)),
    ("下周五", "下周五", day(2025, 1, 24)),
    ("这周五", "这周五", day(2025, 1, 17)),
    ("上个月", "上个月", month(2024, 12)),
    ("这个月", "这个月", month(2025, 1)),
    ("本月", "本月", month(2025, 1)),
    ("下个月", "下个月", month(2025, 2)),
    ("上个月8号", "上个月8号", day(2024, 12, 8)),
    ("三天前", "三天前", day(2025, 1, 12)),
    ("3天前", "3天前", day(2025, 1, 12)),
    ("十天以前", "十天以前", day(2025, 1, 5)),
    ("两周前", "两周前", week(2024, 12, 30)),
    ("两个星期前", "两个星期前", week(2024, 12, 30)),
    ("一个月前", "一个月前", month(2024, 12)),
    ("两个月前", "两个月前", month(2024, 11)),
    ("半年前", "半年前", days(date(2024, 6, 1), date(2024, 9, 1))),
    ("两年前", "两年前", year(2023)),
    ("去年", "去年", year(2024)),
    ("今年", "今年", year(2025)),
    ("前年", "前年", year(2023)),
    ("明年", "明年", year(2026)),
    ("2023年", "2023年", year(2023)),
    ("去年五月", "去年五月", month(2024, 5)),
    ("去年5月", "去年5月", month(2024, 5)),
    ("去年的十二月", "去年的十二月", month(2024, 12)),
    ("五月", "五月", month(2024, 5)),
    ("5月份", "5月份", month(2024, 5)),
    ("一月", "一月", month(2025, 1)),  # the month under way has begun
    ("今年五月", "今年五月", month(2025, 5)),
    ("明年五月", "明年五月", month(2026, 5)),
    ("2023年5月", "2023年5月", month(2023, 5)),
    ("2023年5月8日", "2023年5月8日", day(2023, 5, 8)),
    ("5月8日", "5月8日", day(2024, 5, 8)),
    ("5月8号", "5月8号", day(2024, 5, 8)),
    ("五月八号", "五月八号", day(2024, 5, 8)),
    ("十二月三十一日", "十二月三十一日", day(2024, 12, 31)),
    ("1月15日", "1月15日", day(2025, 1, 15)),  # today counts as begun
    ("元旦", "元旦", day(2025, 1, 1)),
    ("国庆", "国庆", days(date(2024, 10, 1), date(2024, 10, 8))),
    ("去年国庆节", "去年国庆节", days(date(2024, 10, 1), date(2024, 10, 8))),
    ("圣诞节", "圣诞节", day(2024, 12, 25)),
    ("情人节", "情人节", day(2024, 2, 14)),
    ("春节", "春节", days(date(2024, 2, 9), date(2024, 2, 16))),  # 2025's starts Jan 28: not yet
    ("中秋", "中秋", day(2024, 9, 17)),
    ("除夕", "除夕", day(2024, 2, 9)),  # 2025's is Jan 28: not yet
    ("元宵节", "元宵节", day(2024, 2, 24)),
    ("端午", "端午", day(2024, 6, 10)),
    ("去年端午节", "去年端午节", day(2024, 6, 10)),
    ("七夕那天", "七夕", day(2024, 8, 10)),
    ("重阳节", "重阳节", day(2024, 10, 11)),
    ("清明节回老家", "清明节", day(2024, 4, 4)),
    ("大年三十", "大年三十", day(2024, 2, 9)),
    ("2035年中秋", "2035年中秋", day(2035, 9, 16)),  # past the old table's 2030
    ("2033年春节", "2033年春节", days(date(2033, 1, 30), date(2033, 2, 6))),
    ("2100年除夕", "2100年除夕", day(2100, 2, 8)),
    ("1916年春节", "1916年春节", days(date(1916, 2, 2), date(1916, 2, 9))),
    ("去年夏天", "去年夏天", days(date(2024, 6, 1), date(2024, 9, 1))),
    ("昨天下午", "昨天下午", hours(2025, 1, 14, 12, 18)),
    ("今天早上", "今天早上", hours(2025, 1, 15, 6, 12)),
    ("昨天晚上", "昨天晚上", hours(2025, 1, 14, 18, 24)),
    ("昨晚", "昨晚", hours(2025, 1, 14, 18, 30)),
    ("今晚", "今晚", hours(2025, 1, 15, 18, 24)),
    ("三天前的凌晨", "三天前的凌晨", hours(2025, 1, 12, 0, 6)),
    ("上周末", "上周末", days(date(2025, 1, 11), date(2025, 1, 13))),
    ("周末", "周末", days(date(2025, 1, 11), date(2025, 1, 13))),
    ("这周末", "这周末", days(date(2025, 1, 18), date(2025, 1, 20))),
    ("最近三天", "最近三天", since(2025, 1, 12)),
    ("过去两周", "过去两周", since(2025, 1, 1)),
    ("３天前", "３天前", day(2025, 1, 12)),  # full-width digits
    ("周五下午的会", "周五下午", hours(2025, 1, 10, 12, 18)),
    ("我们上周三下午讨论的方案", "上周三下午", hours(2025, 1, 8, 12, 18)),
    ("帮我找去年五月的发票", "去年五月", month(2024, 5)),
    ("这个星期五", "这个星期五", day(2025, 1, 17)),
    ("下周一下午", "下周一下午", hours(2025, 1, 20, 12, 18)),
]

ENGLISH = [
    ("today", "today", day(2025, 1, 15)),
    ("yesterday", "yesterday", day(2025, 1, 14)),
    ("the day before yesterday", "the day before yesterday", day(2025, 1, 13)),
    ("tomorrow", "tomorrow", day(2025, 1, 16)),
    ("last week", "last week", week(2025, 1, 6)),
    ("this week", "this week", week(2025, 1, 13)),
    ("next week", "next week", week(2025, 1, 20)),
    ("the week before last", "the week before last", week(2024, 12, 30)),
    ("last Wednesday", "last Wednesday", day(2025, 1, 8)),
    ("What did we decide on Wednesday?", "on Wednesday", day(2025, 1, 8)),
    ("Monday", "Monday", day(2025, 1, 13)),
    ("next Friday", "next Friday", day(2025, 1, 24)),
    ("this Friday", "this Friday", day(2025, 1, 17)),
    ("last month", "last month", month(2024, 12)),
    ("this month", "this month", month(2025, 1)),
    ("next month", "next month", month(2025, 2)),
    ("three days ago", "three days ago", day(2025, 1, 12)),
    ("3 days ago", "3 days ago", day(2025, 1, 12)),
    ("two weeks ago", "two weeks ago", week(2024, 12, 30)),
    ("a month ago", "a month ago", month(2024, 12)),
    ("a year ago", "a year ago", year(2024)),
    ("last year", "last year", year(2024)),
    ("this year", "this year", year(2025)),
    ("in May", "in May", month(2024, 5)),
    ("in May 2023", "in May 2023", month(2023, 5)),
    ("May 2023", "May 2023", month(2023, 5)),
    ("in March last year", "in March last year", month(2024, 3)),
    ("January", "January", month(2025, 1)),
    ("May 8, 2023", "May 8, 2023", day(2023, 5, 8)),
    ("8 May 2023", "8 May 2023", day(2023, 5, 8)),
    ("2023-05-08", "2023-05-08", day(2023, 5, 8)),
    ("2023/5/8", "2023/5/8", day(2023, 5, 8)),
    ("May 8", "May 8", day(2024, 5, 8)),
    ("the 8th of May", "the 8th of May", day(2024, 5, 8)),
    ("last weekend", "last weekend", days(date(2025, 1, 11), date(2025, 1, 13))),
    ("over the weekend", "over the weekend", days(date(2025, 1, 11), date(2025, 1, 13))),
    ("this morning", "this morning", hours(2025, 1, 15, 6, 12)),
    ("yesterday afternoon", "yesterday afternoon", hours(2025, 1, 14, 12, 18)),
    ("last night", "last night", hours(2025, 1, 14, 18, 30)),
    ("last Friday night", "last Friday night", hours(2025, 1, 10, 18, 30)),
    ("earlier today", "earlier today", since(2025, 1, 15)),
    ("earlier this week", "earlier this week", since(2025, 1, 13)),
    ("last summer", "last summer", days(date(2024, 6, 1), date(2024, 9, 1))),
    ("last winter", "last winter", days(date(2023, 12, 1), date(2024, 3, 1))),  # not the one under way
    ("this winter", "this winter", days(date(2024, 12, 1), date(2025, 3, 1))),
    ("in the summer of 2023", "in the summer of 2023", days(date(2023, 6, 1), date(2023, 9, 1))),
    ("in 2022", "in 2022", year(2022)),
    ("Christmas", "Christmas", day(2024, 12, 25)),
    ("Christmas 2023", "Christmas 2023", day(2023, 12, 25)),
    ("Thanksgiving", "Thanksgiving", day(2024, 11, 28)),
    ("Mid-Autumn Festival 2035", "Mid-Autumn Festival 2035", day(2035, 9, 16)),
    ("Chinese New Year 2031", "Chinese New Year 2031", days(date(2031, 1, 22), date(2031, 1, 29))),
    ("last Dragon Boat Festival", "last Dragon Boat Festival", day(2024, 6, 10)),
    ("the Lantern Festival", "Lantern Festival", day(2024, 2, 24)),
    ("Qixi 2026", "Qixi 2026", day(2026, 8, 19)),
    ("Double Ninth Festival", "Double Ninth Festival", day(2024, 10, 11)),
    ("Qingming 2031", "Qingming 2031", day(2031, 4, 5)),
    ("the past 3 days", "the past 3 days", since(2025, 1, 12)),
    ("in the last week", "in the last week", since(2025, 1, 8)),
    ("this past weekend", "this past weekend", days(date(2025, 1, 11), date(2025, 1, 13))),
    ("Halloween last year", "Halloween last year", day(2024, 10, 31)),
    ("We met on May 8th last year", "on May 8th last year", day(2024, 5, 8)),
    ("I talked with Jan on Monday morning", "on Monday morning", hours(2025, 1, 13, 6, 12)),
    ("Tuesday's standup", "Tuesday", day(2025, 1, 14)),
]


@pytest.mark.parametrize(("query", "phrase", "window"), CHINESE + ENGLISH)
def test_hard_expressions(query: str, phrase: str, window: TimeWindow) -> None:
    found = parse_time(query, NOW)
    assert found is not None
    assert (found.phrase, found.window, found.vague) == (phrase, window, False)
    assert query[found.span[0] : found.span[1]] == phrase


# (query, phrase, window): a preference for recent memories rather than a hard range.
VAGUE = [
    ("上次", "上次", TimeWindow(None, NOW)),
    ("上回说的那家店", "上回", TimeWindow(None, NOW)),
    ("最近", "最近", since(2025, 1, 8)),
    ("近来", "近来", since(2025, 1, 8)),
    ("这几天", "这几天", since(2025, 1, 8)),
    ("这两天", "这两天", since(2025, 1, 13)),
    ("刚才", "刚才", TimeWindow(at(2025, 1, 15, 9) + timedelta(minutes=30), NOW)),
    ("前几天", "前几天", days(date(2025, 1, 8), date(2025, 1, 14))),
    ("几天前", "几天前", days(date(2025, 1, 8), date(2025, 1, 14))),
    ("两三天前", "两三天前", days(date(2025, 1, 8), date(2025, 1, 14))),  # not one number: "a few"
    ("几个月前", "几个月前", days(date(2024, 9, 1), date(2024, 12, 1))),
    ("last time", "last time", TimeWindow(None, NOW)),
    ("previously", "previously", TimeWindow(None, NOW)),
    ("I told you before.", "before", TimeWindow(None, NOW)),
    ("recently", "recently", since(2025, 1, 8)),
    ("lately", "lately", since(2025, 1, 8)),
    ("these days", "these days", since(2025, 1, 8)),
    ("just now", "just now", TimeWindow(at(2025, 1, 15, 9) + timedelta(minutes=30), NOW)),
    ("a few days ago", "a few days ago", days(date(2025, 1, 8), date(2025, 1, 14))),
    ("the other day", "the other day", days(date(2025, 1, 8), date(2025, 1, 14))),
    ("a few weeks ago", "a few weeks ago", days(date(2024, 12, 16), date(2025, 1, 6))),
    ("the past few days", "the past few days", since(2025, 1, 8)),
]


@pytest.mark.parametrize(("query", "phrase", "window"), VAGUE)
def test_vague_expressions(query: str, phrase: str, window: TimeWindow) -> None:
    found = parse_time(query, NOW)
    assert found is not None
    assert (found.phrase, found.window, found.vague) == (phrase, window, True)


@pytest.mark.parametrize(
    "query",
    [
        "",
        "Mayor Smith signed it",
        "maybe later",
        "I may be late",
        "5 may be enough",
        "we march on",
        "the fall of Rome",
        "spring water",
        "before the meeting",
        "Mondays are busy",
        "weekends are busy",
        "the last day of the trip",
        "it takes 3 days",
        "05/08/2023",  # month-first or day-first: ambiguous, skipped
        "3天",
        "需要3天完成",
        "三天后",  # after some event, not after now
        "一周一次",
        "每周三开会",
        "每个星期五都开会",
        "马上周末了",
        "2023-02-30",
        "二月河的小说",
        "这周围有什么",
        "1990年代的歌",
        "下午开会",
        "晚上周会",
        "吃元宵",  # the dumpling; the festival is 元宵节
        "清明上河图",
    ],
)
def test_non_matches(query: str) -> None:
    assert find_times(query, NOW) == []
    assert parse_time(query, NOW) is None


@pytest.mark.parametrize("name", ["春节", "除夕", "元宵节", "端午", "七夕", "中秋", "重阳", "清明"])
def test_festivals_resolve_in_every_year_the_parser_takes(name: str) -> None:
    for number in range(1900, 2101):
        found = parse_time(f"{number}年{name}", NOW)
        assert found is not None and found.window.start is not None, number
        assert found.window.start.year == number


def test_find_times_returns_every_expression_in_order_without_overlap() -> None:
    found = find_times("上周三下午和昨天晚上", NOW)
    assert [(f.phrase, f.span) for f in found] == [("上周三下午", (0, 5)), ("昨天晚上", (6, 10))]
    english = find_times("Compare last Friday with yesterday and May 2023", NOW)
    assert [f.phrase for f in english] == ["last Friday", "yesterday", "May 2023"]


def test_parse_time_prefers_the_first_hard_expression_over_a_vague_one() -> None:
    query = "最近我们在上周三讨论过"
    assert [f.phrase for f in find_times(query, NOW)] == ["最近", "上周三"]
    assert parse_time(query, NOW) == TimeExpression(day(2025, 1, 8), "上周三", (5, 8), False)
    only_vague = parse_time("上次说的那个方案", NOW)
    assert only_vague is not None and only_vague.vague


@pytest.mark.parametrize(
    ("now", "query", "window"),
    [
        # New Year's Day, a Wednesday: last week and last month are in the previous year.
        (at(2025, 1, 1) + timedelta(minutes=30), "昨天", day(2024, 12, 31)),
        (at(2025, 1, 1) + timedelta(minutes=30), "上个月", month(2024, 12)),
        (at(2025, 1, 1) + timedelta(minutes=30), "上周", week(2024, 12, 23)),
        (at(2025, 1, 1) + timedelta(minutes=30), "上周三", day(2024, 12, 25)),
        (at(2025, 1, 1) + timedelta(minutes=30), "去年", year(2024)),
        # A Saturday: the bare weekend is the one under way.
        (at(2025, 1, 18, 9), "周末", days(date(2025, 1, 18), date(2025, 1, 20))),
        # During the 2025 Spring Festival week (Jan 28 - Feb 3).
        (at(2025, 2, 1, 9), "春节", days(date(2025, 1, 28), date(2025, 2, 4))),
        # In May: "in May" is this one, "last May" the one before, "next May" the coming one.
        (at(2025, 5, 20, 9), "in May", month(2025, 5)),
        (at(2025, 5, 20, 9), "last May", month(2024, 5)),
        (at(2025, 5, 20, 9), "next May", month(2026, 5)),
        (at(2025, 5, 20, 9), "五月", month(2025, 5)),
        (at(2025, 5, 20, 9), "February 29", day(2024, 2, 29)),
    ],
)
def test_boundaries(now: datetime, query: str, window: TimeWindow) -> None:
    found = parse_time(query, now)
    assert found is not None and found.window == window


def utc(year: int, month: int, dom: int, hour: int = 0) -> datetime:
    return datetime(year, month, dom, hour, tzinfo=UTC)


@pytest.mark.parametrize(
    ("now", "query", "start", "end"),
    [
        (utc(2024, 3, 1, 8), "yesterday", utc(2024, 2, 29), utc(2024, 3, 1)),  # a leap day
        (utc(2024, 3, 31, 12), "last month", utc(2024, 2, 1), utc(2024, 3, 1)),
        (utc(2024, 3, 31, 12), "a month ago", utc(2024, 2, 1), utc(2024, 3, 1)),
        (utc(2024, 3, 31, 12), "过去一个月", utc(2024, 2, 29), utc(2024, 3, 31, 12)),  # Mar 31 -> Feb 29
        (utc(2024, 12, 31, 23), "next year", utc(2025, 1, 1), utc(2026, 1, 1)),
        (utc(2024, 12, 31, 23), "明天", utc(2025, 1, 1), utc(2025, 1, 2)),
    ],
)
def test_utc(now: datetime, query: str, start: datetime, end: datetime) -> None:
    found = parse_time(query, now)
    assert found is not None and found.window == TimeWindow(start, end)


def test_days_are_resolved_in_the_timezone_of_now() -> None:
    instant = datetime(2025, 1, 14, 17, tzinfo=UTC)  # Jan 15, 01:00 in Shanghai
    in_utc = parse_time("today", instant)
    in_shanghai = parse_time("today", instant.astimezone(SHANGHAI))
    assert in_utc is not None and in_shanghai is not None
    assert in_utc.window == TimeWindow(datetime(2025, 1, 14, tzinfo=UTC), datetime(2025, 1, 15, tzinfo=UTC))
    assert in_shanghai.window == day(2025, 1, 15)
    assert in_shanghai.window.start is not None and in_shanghai.window.start.tzinfo is SHANGHAI


def test_a_day_across_a_dst_change_keeps_its_local_midnights() -> None:
    new_york = ZoneInfo("America/New_York")
    found = parse_time("today", datetime(2024, 3, 10, 12, tzinfo=new_york))  # clocks spring forward
    assert found is not None
    start, end = found.window.start, found.window.end
    assert start == datetime(2024, 3, 10, tzinfo=new_york) and end == datetime(2024, 3, 11, tzinfo=new_york)
    assert end.astimezone(UTC) - start.astimezone(UTC) == timedelta(hours=23)  # same tzinfo: wall time


def test_naive_now_is_refused() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        parse_time("today", datetime(2025, 1, 15, 10, 30))
