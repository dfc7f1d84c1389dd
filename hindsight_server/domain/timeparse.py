"""Time expressions in a recall query ("上周三下午", "last Friday"), resolved against the caller's `now`.

Pure: standard library only, no I/O, no locale. Every window is made of whole days (or parts of one
day) in the timezone of `now`, built from calendar dates rather than by adding hours, so a DST change
inside a window keeps its midnights at local midnight.

Rules for the ambiguous cases (the tests pin each one):

* Weeks are ISO weeks (Monday first). "上周三" / "last Wednesday" is the Wednesday of the previous ISO
  week, "下周五" / "next Friday" the Friday of the next one, "这周五" / "this Friday" the one of this week.
* A weekday alone ("周三", "on Wednesday") is the most recent one strictly before today: someone who
  meant today would say 今天 / today.
* "N天前" / "N days ago" is that calendar day; "N周前" / "N weeks ago" the ISO week N weeks back (so
  "两周前" == "上上周"); "N个月前" / "N months ago" the calendar month; "N年前" / "N years ago" the year.
* "半年前" / "half a year ago": the three calendar months around six months back.
* "几天前", "前几天", "两三天前", "a few days ago", "the other day": days 2..7 back (vague). "A few"
  weeks, months and years: 2..4 of them back (vague). "a couple of" is two.
* "最近", "这几天", "recently", "lately", "these days": since midnight seven days ago, up to now (vague).
  "最近三天" / "the past 3 days": since midnight N days ago, up to now (not vague); "the last week" with
  "the" is such a range, "last week" without it is the previous ISO week.
* "上次", "上回", "last time", "previously", "before"/"earlier" at the end of a clause: anything before now
  (vague; the caller should prefer recent memories, not filter). "刚才", "just now": the last hour (vague).
* A month, date, holiday or season without a year is the most recent one that has begun (so "五月" in
  January 2025 is May 2024, "一月" is January 2025, "5月8日" on May 8 is today). "last May" / "last
  Christmas" is the most recent one that has ended; "next May" the first that has not begun; "this May"
  / "今年五月" the one under way, else the one in this calendar year.
* A winter belongs to the year of its December (seasons are northern and meteorological: Mar-May,
  Jun-Aug, Sep-Nov, Dec-Feb). "last winter" in January 2025 is Dec 2023 - Feb 2024, since the winter
  under way is not "last".
* Parts of a day narrow a one-day expression that they follow: 凌晨 0-6, 早上/上午/morning 6-12, 中午
  11-14, 下午/afternoon 12-18, 傍晚 17-20, 晚上/evening/tonight 18-24, 夜里/night 18-06 of the next day.
  "昨晚" and "last night" are the night; a part without a day ("下午开会") is not a time expression.
* Holidays: 元旦 Jan 1, 情人节 Feb 14, 劳动节/五一 May 1-5, 国庆 Oct 1-7 (the national holiday week, which
  is what "国庆的时候" means), 万圣节 Oct 31, 平安夜 Dec 24, 圣诞 Dec 25, US Thanksgiving; from the Chinese
  calendar, computed for any year (domain/lunar.py): 春节 (除夕 through 初六), 除夕, 元宵节, 端午, 七夕, 中秋,
  重阳, and 清明 (a solar term, not a lunar date). A holiday is one day unless said otherwise.
* English words must stand alone ("May" never matches in "Mayor" or "maybe"). The month names that are
  also ordinary words (May, March) and all abbreviations need context: "in/last/this/next May", a day
  ("May 8") or a year ("May 2023"). Numeric dates are taken only year first (2023-05-08, 2023/5/8);
  05/08/2023 is ambiguous between countries and is skipped. An English year needs "in"/"during" (a
  bare 2022 may be a count); a Chinese one needs 年 ("2022年", not "2022年代").
* Chinese: a weekday or weekend after a numeral or 每(个) is a frequency ("一周一次", "每周三"), not a date;
  "这周围", "1990年代", "二月河" are not times; "3天" without 前 is a duration, and "三天后" (after some
  event) is not resolved. A leading "on/in/during/over" joins an English phrase ("on Wednesday").
* Numbers: Chinese 一..九十九 and 两 (十一, 二十, 三十一), digits (full-width too), English one..twelve,
  a/an, a couple (of).
* Overlapping candidates: the longest wins, then the leftmost. `parse_time` returns the first
  expression that is not vague, else the first vague one.
* Not covered: clock times ("3点", "at 5pm"), hours ago, future offsets ("三天后", "in 3 days"),
  traditional characters (上週), ranges between two dates ("从5月到7月" gives both months).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime, time, timedelta
from enum import Enum
from typing import Literal, TypeAlias

from hindsight_server.domain.lunar import Festival, festival_date
from hindsight_server.domain.model import TimeWindow

__all__ = ["TimeExpression", "find_times", "parse_time"]


@dataclass(frozen=True, slots=True)
class TimeExpression:
    window: TimeWindow  # the range the expression means; start inclusive, end exclusive
    phrase: str  # the matched text as written, e.g. "上周三" / "on Wednesday"
    span: tuple[int, int]  # [start, end) of the phrase in the query
    vague: bool  # a preference for recent memories rather than a hard range ("上次", "recently")


def find_times(text: str, now: datetime) -> list[TimeExpression]:
    """Every time expression in `text`, non-overlapping, in text order; [] when there is none."""
    clock = _Now.of(now)
    normalised = text.translate(_NORMALISE)  # same length as `text`, so spans carry over
    chosen = _choose(list(_candidates(normalised, clock)))
    expressions: list[TimeExpression] = []
    for index, found in enumerate(chosen):
        limit = chosen[index + 1].start if index + 1 < len(chosen) else len(normalised)
        found = _with_part_of_day(found, normalised, limit, clock)
        floor = expressions[-1].span[1] if expressions else 0
        start = _with_preposition(found.start, normalised, floor)
        window = TimeWindow(found.resolved.start, found.resolved.end)
        expressions.append(
            TimeExpression(window, text[start : found.end], (start, found.end), found.resolved.vague)
        )
    return expressions


def parse_time(text: str, now: datetime) -> TimeExpression | None:
    """The expression to filter by: the first hard one, else the first vague one, else None."""
    found = find_times(text, now)
    for expression in found:
        if not expression.vague:
            return expression
    return found[0] if found else None


# ---------------------------------------------------------------------------------------------------
# Resolution against now

_DAY = timedelta(days=1)
_Unit: TypeAlias = Literal["day", "week", "month", "year"]


@dataclass(frozen=True, slots=True)
class _Resolved:
    start: datetime | None
    end: datetime | None
    vague: bool = False
    day: date | None = None  # set when the window is one whole day, so "下午"/"afternoon" may narrow it


@dataclass(frozen=True, slots=True)
class _Now:
    moment: datetime
    today: date  # in the timezone of `moment`

    @classmethod
    def of(cls, now: datetime) -> _Now:
        if now.tzinfo is None or now.utcoffset() is None:
            raise ValueError("now must be timezone-aware: day boundaries are the caller's local midnights")
        return cls(now, now.date())

    def at(self, day: date, hour: int = 0) -> datetime:
        """Local wall-clock time on `day`; hours past 24 run into the next day."""
        return datetime.combine(day + timedelta(days=hour // 24), time(hour % 24), tzinfo=self.moment.tzinfo)

    def days(self, first: date, end: date, *, vague: bool = False) -> _Resolved:
        one_day = first if end - first == _DAY else None
        return _Resolved(self.at(first), self.at(end), vague, one_day)

    def since(self, first: date, *, vague: bool = False) -> _Resolved:
        return _Resolved(self.at(first), self.moment, vague)


def _monday(day: date) -> date:
    return day - timedelta(days=day.weekday())


def _month_start(day: date, offset: int = 0) -> date:
    index = day.year * 12 + day.month - 1 + offset
    return date(index // 12, index % 12 + 1, 1)


def _months_back(day: date, months: int) -> date:
    """The same day of the month `months` earlier, clamped to that month's length (Mar 31 -> Feb 29)."""
    first = _month_start(day, -months)
    last = (_month_start(first, 1) - _DAY).day
    return first.replace(day=min(day.day, last))


def _day(clock: _Now, offset: int) -> _Resolved:
    return clock.days(clock.today + timedelta(days=offset), clock.today + timedelta(days=offset + 1))


def _week(clock: _Now, offset: int) -> _Resolved:
    first = _monday(clock.today) + timedelta(weeks=offset)
    return clock.days(first, first + timedelta(weeks=1))


def _month(clock: _Now, offset: int) -> _Resolved:
    first = _month_start(clock.today, offset)
    return clock.days(first, _month_start(first, 1))


def _year(clock: _Now, year: int) -> _Resolved:
    return clock.days(date(year, 1, 1), date(year + 1, 1, 1))


def _unit_back(clock: _Now, count: int, unit: _Unit) -> _Resolved:
    """The whole calendar unit `count` units back: a day, an ISO week, a month, a year."""
    if unit == "day":
        return _day(clock, -count)
    if unit == "week":
        return _week(clock, -count)
    if unit == "month":
        return _month(clock, -count)
    return _year(clock, clock.today.year - count)


def _few_back(clock: _Now, unit: _Unit) -> _Resolved:
    """'A few' units ago: days 2..7 back, or 2..4 weeks, months or years back. Always vague."""
    today = clock.today
    if unit == "day":
        return clock.days(today - timedelta(days=7), today - _DAY, vague=True)
    if unit == "week":
        return clock.days(
            _monday(today) - timedelta(weeks=4), _monday(today) - timedelta(weeks=1), vague=True
        )
    if unit == "month":
        return clock.days(_month_start(today, -4), _month_start(today, -1), vague=True)
    return clock.days(date(today.year - 4, 1, 1), date(today.year - 1, 1, 1), vague=True)


def _half_year_back(clock: _Now) -> _Resolved:
    return clock.days(_month_start(clock.today, -7), _month_start(clock.today, -4))


def _past(clock: _Now, count: int | None, unit: _Unit) -> _Resolved:
    """Since midnight `count` units ago, up to now; `count` None ("the past few days") is vague."""
    vague = count is None
    count = count if count is not None else (7 if unit == "day" else 4)
    today = clock.today
    if unit == "day":
        return clock.since(today - timedelta(days=count), vague=vague)
    if unit == "week":
        return clock.since(today - timedelta(weeks=count), vague=vague)
    return clock.since(_months_back(today, count * (1 if unit == "month" else 12)), vague=vague)


def _recent(clock: _Now, days: int = 7) -> _Resolved:
    return clock.since(clock.today - timedelta(days=days), vague=True)


def _before_now(clock: _Now) -> _Resolved:
    return _Resolved(None, clock.moment, vague=True)


def _last_hour(clock: _Now) -> _Resolved:
    # In UTC: an hour of elapsed time, even across a DST change.
    start = (clock.moment.astimezone(UTC) - timedelta(hours=1)).astimezone(clock.moment.tzinfo)
    return _Resolved(start, clock.moment, vague=True)


def _weekday(clock: _Now, weekday: int, week_offset: int | None) -> _Resolved:
    """`weekday` 0 = Monday. No offset: the most recent one strictly before today."""
    if week_offset is None:
        back = (clock.today.weekday() - weekday - 1) % 7 + 1
        return _day(clock, -back)
    day = _monday(clock.today) + timedelta(weeks=week_offset, days=weekday)
    return clock.days(day, day + _DAY)


def _weekend(clock: _Now, week_offset: int | None) -> _Resolved:
    """Saturday and Sunday of an ISO week. No offset: the one under way, else the one just past."""
    if week_offset is None:
        week_offset = 0 if clock.today.weekday() >= 5 else -1
    saturday = _monday(clock.today) + timedelta(weeks=week_offset, days=5)
    return clock.days(saturday, saturday + 2 * _DAY)


# Things that come back every year (a month, a date, a holiday, a season): one year's span of dates.
_Span: TypeAlias = tuple[date, date]
_Yearly: TypeAlias = Callable[[int], "_Span | None"]


class _Pick(Enum):
    LATEST = "latest"  # bare: the most recent that has begun
    LAST = "last"  # the most recent that has ended
    THIS = "this"  # the one under way, else the one in this calendar year
    NEXT = "next"  # the first that has not begun


_YEARS_AROUND = 8  # far enough to find a Feb 29 either way


def _occurrence(yearly: _Yearly, today: date, pick: _Pick | int) -> _Span | None:
    if isinstance(pick, int):
        return yearly(pick)
    spans = [
        span for y in range(today.year - _YEARS_AROUND, today.year + _YEARS_AROUND + 1) if (span := yearly(y))
    ]
    if pick is _Pick.LATEST:
        begun = [span for span in spans if span[0] <= today]
        return begun[-1] if begun else None
    if pick is _Pick.LAST:
        ended = [span for span in spans if span[1] <= today]
        return ended[-1] if ended else None
    if pick is _Pick.NEXT:
        return next((span for span in spans if span[0] > today), None)
    under_way = [span for span in spans if span[0] <= today < span[1]]
    return under_way[0] if under_way else yearly(today.year)


def _annual(clock: _Now, yearly: _Yearly, pick: _Pick | int) -> _Resolved | None:
    span = _occurrence(yearly, clock.today, pick)
    return clock.days(*span) if span else None


def _month_of(month: int) -> _Yearly:
    def span(year: int) -> _Span:
        first = date(year, month, 1)
        return first, _month_start(first, 1)

    return span


def _date_of(month: int, day: int, length: int = 1) -> _Yearly:
    def span(year: int) -> _Span | None:
        try:
            first = date(year, month, day)
        except ValueError:  # Feb 29 of a common year, Apr 31
            return None
        return first, first + timedelta(days=length)

    return span


def _season_of(first_month: int) -> _Yearly:
    def span(year: int) -> _Span:
        first = date(year, first_month, 1)
        return first, _month_start(first, 3)

    return span


def _thanksgiving(year: int) -> _Span:
    november = date(year, 11, 1)
    day = november + timedelta(days=(3 - november.weekday()) % 7 + 21)  # the fourth Thursday
    return day, day + _DAY


def _lunar(festival: Festival, days_before: int = 0, length: int = 1) -> _Yearly:
    """A festival of the Chinese calendar, from `days_before` its day for `length` days."""

    def span(year: int) -> _Span:
        first = festival_date(festival, year) - timedelta(days=days_before)
        return first, first + timedelta(days=length)

    return span


_SPRING_FESTIVAL_WEEK = _lunar(Festival.SPRING_FESTIVAL, 1, 7)  # the holiday week: 除夕 through 初六


_HOLIDAYS: dict[str, _Yearly] = {
    "元旦": _date_of(1, 1),
    "情人节": _date_of(2, 14),
    "五一劳动节": _date_of(5, 1, 5),
    "劳动节": _date_of(5, 1, 5),
    "五一": _date_of(5, 1, 5),
    "国庆节": _date_of(10, 1, 7),
    "国庆": _date_of(10, 1, 7),
    "万圣节": _date_of(10, 31),
    "平安夜": _date_of(12, 24),
    "圣诞节": _date_of(12, 25),
    "圣诞": _date_of(12, 25),
    "春节": _SPRING_FESTIVAL_WEEK,
    "过年": _SPRING_FESTIVAL_WEEK,
    "除夕": _lunar(Festival.NEW_YEARS_EVE),
    "大年三十": _lunar(Festival.NEW_YEARS_EVE),
    "元宵节": _lunar(Festival.LANTERN),  # not a bare 元宵, which is also the dumpling
    "端午节": _lunar(Festival.DRAGON_BOAT),
    "端午": _lunar(Festival.DRAGON_BOAT),
    "七夕节": _lunar(Festival.QIXI),
    "七夕": _lunar(Festival.QIXI),
    "中秋节": _lunar(Festival.MID_AUTUMN),
    "中秋": _lunar(Festival.MID_AUTUMN),
    "重阳节": _lunar(Festival.DOUBLE_NINTH),
    "重阳": _lunar(Festival.DOUBLE_NINTH),
    "清明节": _lunar(Festival.QINGMING),
    "清明": _lunar(Festival.QINGMING),
    "new year's day": _date_of(1, 1),
    "new year's eve": _date_of(12, 31),
    "new year's": _date_of(1, 1),
    "new year": _date_of(1, 1),
    "valentine's day": _date_of(2, 14),
    "valentines day": _date_of(2, 14),
    "valentine's": _date_of(2, 14),
    "halloween": _date_of(10, 31),
    "christmas eve": _date_of(12, 24),
    "christmas day": _date_of(12, 25),
    "christmas": _date_of(12, 25),
    "xmas": _date_of(12, 25),
    "thanksgiving": _thanksgiving,
    "chinese new year": _SPRING_FESTIVAL_WEEK,
    "lunar new year": _SPRING_FESTIVAL_WEEK,
    "spring festival": _SPRING_FESTIVAL_WEEK,
    "lantern festival": _lunar(Festival.LANTERN),
    "dragon boat festival": _lunar(Festival.DRAGON_BOAT),
    "qixi festival": _lunar(Festival.QIXI),
    "qixi": _lunar(Festival.QIXI),
    "mid-autumn festival": _lunar(Festival.MID_AUTUMN),
    "mid autumn festival": _lunar(Festival.MID_AUTUMN),
    "double ninth festival": _lunar(Festival.DOUBLE_NINTH),
    "qingming festival": _lunar(Festival.QINGMING),
    "qingming": _lunar(Festival.QINGMING),
    "tomb-sweeping day": _lunar(Festival.QINGMING),
    "tomb sweeping day": _lunar(Festival.QINGMING),
}

_SEASONS: dict[str, _Yearly] = {
    "spring": _season_of(3),
    "summer": _season_of(6),
    "autumn": _season_of(9),
    "fall": _season_of(9),
    "winter": _season_of(12),
    "春": _season_of(3),
    "夏": _season_of(6),
    "秋": _season_of(9),
    "冬": _season_of(12),
}

# Parts of a day as (first hour, end hour); an end past 24 runs into the next day.
_MORNING, _AFTERNOON, _EVENING, _NIGHT = (6, 12), (12, 18), (18, 24), (18, 30)
_PARTS: dict[str, tuple[int, int]] = {
    "凌晨": (0, 6),
    "早上": _MORNING,
    "早晨": _MORNING,
    "清晨": _MORNING,
    "上午": _MORNING,
    "中午": (11, 14),
    "下午": _AFTERNOON,
    "傍晚": (17, 20),
    "晚上": _EVENING,
    "晚间": _EVENING,
    "夜里": _NIGHT,
    "夜间": _NIGHT,
    "半夜": _NIGHT,
    "深夜": _NIGHT,
    "morning": _MORNING,
    "afternoon": _AFTERNOON,
    "evening": _EVENING,
    "night": _NIGHT,
}


def _part_of_day(clock: _Now, day: date, part: tuple[int, int]) -> _Resolved:
    return _Resolved(clock.at(day, part[0]), clock.at(day, part[1]))


# ---------------------------------------------------------------------------------------------------
# Words and numbers

# Full-width ASCII and curly apostrophes to plain ones, one character for one, so spans stay valid.
_NORMALISE = str.maketrans(
    {code: code - 0xFEE0 for code in range(0xFF01, 0xFF5F)} | {0x3000: 0x20, 0x2018: 0x27, 0x2019: 0x27}
)

_ZH_DIGITS = {
    "零": 0,
    "〇": 0,
    "一": 1,
    "二": 2,
    "两": 2,
    "三": 3,
    "四": 4,
    "五": 5,
    "六": 6,
    "七": 7,
    "八": 8,
    "九": 9,
}
_EN_NUMBERS = {
    "a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
    "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "a couple of": 2, "couple of": 2,
    "a couple": 2,
}  # fmt: skip
_FEW = frozenset({"几", "数", "好几", "few", "a few", "several"})
_ZH_REL = {"上上": -2, "上": -1, "这": 0, "本": 0, "下": 1, "下下": 2}
_ZH_REL_YEAR = {"大前年": -3, "前年": -2, "去年": -1, "今年": 0, "明年": 1, "后年": 2}
_ZH_DAYS = {
    "大前天": -3,
    "前天": -2,
    "昨天": -1,
    "昨日": -1,
    "今天": 0,
    "今日": 0,
    "明天": 1,
    "明日": 1,
    "后天": 2,
    "大后天": 3,
}
_ZH_PART_DAYS = {
    "今早": (0, _MORNING), "今晨": (0, _MORNING), "今晚": (0, _EVENING), "昨晚": (-1, _NIGHT),
    "昨夜": (-1, _NIGHT), "明早": (1, _MORNING), "明晚": (1, _EVENING),
}  # fmt: skip
_ZH_WEEKDAYS = {"一": 0, "二": 1, "三": 2, "四": 3, "五": 4, "六": 5, "日": 6, "天": 6}
_EN_DAYS = {
    "the day before yesterday": -2,
    "yesterday": -1,
    "today": 0,
    "tomorrow": 1,
    "the day after tomorrow": 2,
}
_EN_PART_DAYS = {
    "this morning": (0, _MORNING), "this afternoon": (0, _AFTERNOON), "this evening": (0, _EVENING),
    "tonight": (0, _EVENING), "last night": (-1, _NIGHT), "last evening": (-1, _EVENING),
}  # fmt: skip
_EN_WEEKDAYS = {
    name: index
    for index, name in enumerate(
        ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
    )
}
_EN_MONTHS = {
    "january": 1, "jan": 1, "february": 2, "feb": 2, "march": 3, "mar": 3, "april": 4, "apr": 4,
    "may": 5, "june": 6, "jun": 6, "july": 7, "jul": 7, "august": 8, "aug": 8, "september": 9,
    "sep": 9, "sept": 9, "october": 10, "oct": 10, "november": 11, "nov": 11, "december": 12, "dec": 12,
}  # fmt: skip
# Month names that are also everyday words ("may", "march", "mar"): alone, they need "in"/"last"/..., a
# day or a year; so do abbreviations, which are too short to trust ("Jan" is a name, "Dec" and "Sep" are
# in identifiers).
_EN_MONTH_WORDS = frozenset({"may", "march", "mar"})
_EN_MONTHS_NEEDING_CONTEXT = _EN_MONTH_WORDS | {
    "jan",
    "feb",
    "apr",
    "jun",
    "jul",
    "aug",
    "sep",
    "sept",
    "oct",
    "nov",
    "dec",
}
_EN_PICK = {
    "last": _Pick.LAST,
    "past": _Pick.LAST,
    "this past": _Pick.LAST,
    "this": _Pick.THIS,
    "next": _Pick.NEXT,
    "in": _Pick.LATEST,
    "during": _Pick.LATEST,
    "over": _Pick.LATEST,
}
_EN_REL = {"last": -1, "past": -1, "this": 0, "next": 1}
_FIRST_YEAR, _LAST_YEAR = 1900, 2100


def _key(text: str) -> str:
    return " ".join(text.lower().split())


def _zh_int(text: str) -> int | None:
    """一..九十九 (十一, 二十, 三十一), 两, digits, and 四-character years (二〇二三)."""
    if text.isascii():
        return int(text)
    tens, ten, ones = text.partition("十")
    try:
        if ten:
            return (_ZH_DIGITS[tens] if tens else 1) * 10 + (_ZH_DIGITS[ones] if ones else 0)
        if len(text) in (1, 4):
            return int("".join(str(_ZH_DIGITS[char]) for char in text))
    except KeyError:  # "十十", "二十三十": not a number
        return None
    return None


def _count(word: str) -> int | None:
    """A Chinese or English count; None for "a few"/"几" (callers check _FEW first)."""
    key = _key(word)
    if key in _EN_NUMBERS:
        return _EN_NUMBERS[key]
    return _zh_int(word)


def _unit(word: str) -> _Unit:
    key = _key(word).rstrip("s")
    if key in ("天", "日", "day"):
        return "day"
    if key in ("个月", "month"):
        return "month"
    if key in ("年", "year"):
        return "year"
    return "week"  # 周, 星期, 个星期, 礼拜, 个礼拜, week


def _year_or_none(text: str | None) -> int | None:
    year = _zh_int(text) if text else None
    return year if year is not None and _FIRST_YEAR <= year <= _LAST_YEAR else None


def _group(match: re.Match[str], name: str) -> str | None:
    """A named group that some of the patterns sharing a handler do not have."""
    return match.groupdict().get(name) or None


def _pick(match: re.Match[str], clock: _Now, rel_years: dict[str, int]) -> _Pick | int | None:
    """The year a qualifier names: "2023(年)" -> 2023, "去年"/"last year" -> last year, "今年"/"this year"
    -> THIS, "last"/"in" -> their pick, none -> LATEST. None when it names an impossible year.
    """
    year, rel_year, rel = _group(match, "year"), _group(match, "rel_year"), _group(match, "rel")
    if year:
        return _year_or_none(year)
    if rel_year:
        offset = rel_years[_key(rel_year)]
        return _Pick.THIS if offset == 0 else clock.today.year + offset
    return _EN_PICK[_key(rel)] if rel else _Pick.LATEST


# ---------------------------------------------------------------------------------------------------
# Rules: a pattern and how its match resolves (None: the text matched but is not a time)

_Handler: TypeAlias = Callable[[re.Match[str], _Now], "_Resolved | None"]


@dataclass(frozen=True, slots=True)
class _Rule:
    pattern: re.Pattern[str]
    resolve: _Handler
    # What a text must hold for the pattern to match at all: a Chinese rule's CJK character, an English
    # rule's letter or digit (flagged as the rule is), and a Chinese rule one of the characters every
    # match of it holds (`needs`: 月 for a date, 前 for "三天前"). Most of a text's cost was patterns
    # that find nothing, tried at every position (a 230-character dialogue: 300 us).
    script: re.Pattern[str]
    needs: frozenset[str] = frozenset()


def _words(words: Iterable[str]) -> str:
    """An alternation of phrases, longest first, a space in a phrase matching any run of whitespace."""
    phrases = sorted(words, key=len, reverse=True)
    return "|".join(re.escape(phrase).replace(r"\ ", r"\s+") for phrase in phrases)


def _preceded_by_numeral(match: re.Match[str]) -> bool:
    """A weekday or weekend after 一/两/每(个)/这..: "一周一次", "每个星期五" are frequencies, not dates."""
    before = match.string[match.start() - 1 : match.start()]
    return bool(before) and before in _ZH_NUMERALS_BEFORE


# -- Chinese


def _zh_day(match: re.Match[str], clock: _Now) -> _Resolved:
    return _day(clock, _ZH_DAYS[match[0]])


def _part_day(table: dict[str, tuple[int, tuple[int, int]]]) -> _Handler:
    def resolve(match: re.Match[str], clock: _Now) -> _Resolved:
        offset, part = table[_key(match[0])]
        return _part_of_day(clock, clock.today + timedelta(days=offset), part)

    return resolve


def _zh_week(match: re.Match[str], clock: _Now) -> _Resolved:
    return _week(clock, _ZH_REL[match["rel"]])


def _zh_weekday(match: re.Match[str], clock: _Now) -> _Resolved | None:
    day = match["day"]
    if match["word"] == "周" and day == "天":  # "这周天气": 周天 is too rarely Sunday to risk it
        return None
    if match["rel"] is None and _preceded_by_numeral(match):
        return None
    weekday = int(day) - 1 if day.isascii() else _ZH_WEEKDAYS[day]
    return _weekday(clock, weekday, _ZH_REL[match["rel"]] if match["rel"] else None)


def _zh_weekend(match: re.Match[str], clock: _Now) -> _Resolved | None:
    if match["rel"] is None and _preceded_by_numeral(match):
        return None
    return _weekend(clock, _ZH_REL[match["rel"]] if match["rel"] else None)


def _zh_month_rel(match: re.Match[str], clock: _Now) -> _Resolved | None:
    """上个月, 本月, 下个月, and a day in one of them (上个月8号)."""
    offset = _ZH_REL[match["rel"]]
    if not match["day"]:
        return _month(clock, offset)
    first = _month_start(clock.today, offset)
    day = _zh_int(match["day"])
    return _annual(clock, _date_of(first.month, day), first.year) if day else None


def _zh_year(match: re.Match[str], clock: _Now) -> _Resolved | None:
    if match["rel_year"]:
        return _year(clock, clock.today.year + _ZH_REL_YEAR[match["rel_year"]])
    year = _year_or_none(match["year"])
    return _year(clock, year) if year else None


def _zh_month_day(match: re.Match[str], clock: _Now) -> _Resolved | None:
    """五月, 2023年5月, 去年五月, 5月8日, 2023年5月8号."""
    pick = _pick(match, clock, _ZH_REL_YEAR)
    month = _zh_int(match["month"])
    if pick is None or month is None or not 1 <= month <= 12:
        return None
    if not match["day"]:
        return _annual(clock, _month_of(month), pick)
    day = _zh_int(match["day"])
    return _annual(clock, _date_of(month, day), pick) if day else None


def _zh_ago(match: re.Match[str], clock: _Now) -> _Resolved | None:
    """三天前, 两周前, 一个月前, 半年前, 几天前."""
    unit = _unit(match["unit"])
    if match["n"] == "半":
        return _half_year_back(clock) if unit == "year" else None
    count = _count(match["n"])
    if match["n"] in _FEW or count is None:  # 几天前, and 两三天前 / 三五天前 (not one number)
        return _few_back(clock, unit)
    return _unit_back(clock, count, unit)


def _zh_few_ago(match: re.Match[str], clock: _Now) -> _Resolved:
    return _few_back(clock, _unit(match["unit"] or "天"))


def _zh_past(match: re.Match[str], clock: _Now) -> _Resolved | None:
    """最近三天, 过去两周, 近一年: a hard range up to now."""
    unit = _unit(match["unit"])
    count = _count(match["n"])
    if match["n"] in _FEW or count is None:  # 最近几天, 最近两三天
        return _past(clock, None, unit)
    return _past(clock, count, unit) if count else None


def _zh_holiday(match: re.Match[str], clock: _Now) -> _Resolved | None:
    pick = _pick(match, clock, _ZH_REL_YEAR)
    return _annual(clock, _HOLIDAYS[match["name"]], pick) if pick is not None else None


def _zh_season(match: re.Match[str], clock: _Now) -> _Resolved | None:
    pick = _pick(match, clock, _ZH_REL_YEAR)
    return _annual(clock, _SEASONS[match["season"]], pick) if pick is not None else None


# -- both languages


def _recent_handler(match: re.Match[str], clock: _Now) -> _Resolved:
    return _recent(clock, 2 if match[0] == "这两天" else 7)


def _before_now_handler(match: re.Match[str], clock: _Now) -> _Resolved:
    return _before_now(clock)


def _last_hour_handler(match: re.Match[str], clock: _Now) -> _Resolved:
    return _last_hour(clock)


# -- English


def _en_day(match: re.Match[str], clock: _Now) -> _Resolved:
    return _day(clock, _EN_DAYS[_key(match[0])])


def _en_earlier(match: re.Match[str], clock: _Now) -> _Resolved:
    """ "earlier today", "earlier this week/month/year": from the start of it up to now."""
    unit = _key(match["unit"]).split()[-1]
    if unit == "today":
        return clock.since(clock.today)
    if unit == "week":
        return clock.since(_monday(clock.today))
    if unit == "month":
        return clock.since(_month_start(clock.today))
    return clock.since(date(clock.today.year, 1, 1))


def _en_calendar_unit(match: re.Match[str], clock: _Now) -> _Resolved:
    """ "last week", "this month", "next year", "the week before last"."""
    unit = _unit(match["unit"])
    rel, direction = _group(match, "rel"), _group(match, "dir")
    offset = _EN_REL[_key(rel)] if rel else (-2 if "before" in _key(direction or "") else 2)
    if unit == "week":
        return _week(clock, offset)
    if unit == "month":
        return _month(clock, offset)
    return _year(clock, clock.today.year + offset)


def _en_weekday(match: re.Match[str], clock: _Now) -> _Resolved:
    rel = _key(match["rel"] or "")
    offset = _EN_REL[rel] if rel in ("last", "this", "next") else None  # "past"/"this past": most recent
    return _weekday(clock, _EN_WEEKDAYS[_key(match["day"])], offset)


def _en_weekend(match: re.Match[str], clock: _Now) -> _Resolved:
    rel = _key(match["rel"] or "")
    return _weekend(clock, _EN_REL[rel] if rel in ("last", "this", "next") else None)


def _en_ago(match: re.Match[str], clock: _Now) -> _Resolved | None:
    """ "three days ago", "two weeks ago", "a month ago", "a few days ago", "half a year ago"."""
    unit = _unit(match["unit"])
    n = _key(match["n"])
    if n == "half a":
        return _half_year_back(clock) if unit == "year" else None
    if n in _FEW:
        return _few_back(clock, unit)
    count = _count(n)
    return _unit_back(clock, count, unit) if count is not None else None


def _en_past(match: re.Match[str], clock: _Now) -> _Resolved | None:
    """ "the past 3 days", "last 2 weeks", "the last few months", "the past week": a range up to now."""
    unit = _unit(match["unit"])
    if match["n"] is None:
        if unit == "day" or (_key(match["kw"]) == "last" and not match["the"]):
            return None  # "last week" is the ISO week (its own rule); "the last day" is a final day
        return _past(clock, 1, unit)
    n = _key(match["n"])
    return _past(clock, None if n in _FEW else _count(n), unit)


def _en_few_days(match: re.Match[str], clock: _Now) -> _Resolved:
    return _few_back(clock, "day")


def _en_month(match: re.Match[str], clock: _Now) -> _Resolved | None:
    """ "in May", "last March", "May 2023", "January", "in May last year"."""
    name = _key(match["month"])
    if name in _EN_MONTHS_NEEDING_CONTEXT and not (match["rel"] or match["year"] or match["rel_year"]):
        return None
    pick = _pick(match, clock, _EN_REL)
    return _annual(clock, _month_of(_EN_MONTHS[name]), pick) if pick is not None else None


def _en_date(match: re.Match[str], clock: _Now) -> _Resolved | None:
    """ "May 8", "May 8th, 2023", "8 May 2023", "the 8th of May", "May 8 last year"; no year: the latest."""
    pick = _pick(match, clock, _EN_REL)
    if pick is None:
        return None
    return _annual(clock, _date_of(_EN_MONTHS[_key(match["month"])], int(match["day"])), pick)


def _en_day_first_date(match: re.Match[str], clock: _Now) -> _Resolved | None:
    plain = not (match["the"] or match["ordinal"] or match["of"] or match["year"] or match["rel_year"])
    if plain and _key(match["month"]) in _EN_MONTH_WORDS:
        return None  # "5 may be enough": "8 May" needs "8th", "of" or a year
    return _en_date(match, clock)


def _numeric_date(match: re.Match[str], clock: _Now) -> _Resolved | None:
    year = _year_or_none(match["year"])
    return _annual(clock, _date_of(int(match["month"]), int(match["day"])), year) if year else None


def _en_year(match: re.Match[str], clock: _Now) -> _Resolved | None:
    year = _year_or_none(match["year"])
    return _year(clock, year) if year else None


def _en_holiday(match: re.Match[str], clock: _Now) -> _Resolved | None:
    pick = _pick(match, clock, _EN_REL)
    return _annual(clock, _HOLIDAYS[_key(match["name"])], pick) if pick is not None else None


def _en_season(match: re.Match[str], clock: _Now) -> _Resolved | None:
    if not (match["prep"] or match["rel"] or match["year"]):
        return None  # "spring water", "the fall of Rome"
    pick = _year_or_none(match["year"]) if match["year"] else _EN_PICK[_key(match["rel"] or "in")]
    return _annual(clock, _SEASONS[_key(match["season"])], pick) if pick is not None else None


_CJK = re.compile("[\u3400-\u9fff]")
_LATIN = re.compile("[a-z0-9]", re.IGNORECASE)  # with the flag, also "K" (Kelvin) and "ſ", as the rules


def _zh(pattern: str, resolve: _Handler, needs: Iterable[str]) -> _Rule:
    return _Rule(re.compile(pattern), resolve, _CJK, frozenset(needs))


def _first_characters(words: Iterable[str]) -> set[str]:
    """What a match of one of `words` holds: its first character."""
    return {word[0] for word in words}


def _en(pattern: str, resolve: _Handler) -> _Rule:
    return _Rule(re.compile(pattern, re.IGNORECASE), resolve, _LATIN)


_ZH_NUM = "[0-9]{1,3}|[零〇一二两三四五六七八九十]{1,3}"
_ZH_MONTH_NUM = "[0-9]{1,2}|[一二三四五六七八九十]{1,3}"
_ZH_REL_RE = "上上|上|这|本|下下|下"
_ZH_NUMERALS_BEFORE = "0-9零〇一二两三四五六七八九十几每个这那"  # a character class body
_ZH_WEEK = "周|星期|礼拜"
_ZH_UNIT = "天|日|周|个?星期|个?礼拜|个月|年"
_ZH_YEAR_PREFIX = (
    rf"(?:(?P<year>[0-9]{{4}}|[零〇一二三四五六七八九]{{4}})\s*年|(?P<rel_year>{_words(_ZH_REL_YEAR)})的?)"
)
_ZH_HOLIDAYS = [name for name in _HOLIDAYS if not name.isascii() and name != "五一"]
_ZH_HOLIDAY_NAMES = _words(_ZH_HOLIDAYS)
_ZH_RECENT = (
    "最近一段时间",
    "最近",
    "近来",
    "近期",
    "近日",
    "这几天",
    "这些天",
    "这两天",
    "这阵子",
    "这段时间",
)
_EN_HOLIDAY_NAMES = _words(name for name in _HOLIDAYS if name.isascii())
_ZH_NOT_NUMERAL = "(?<![0-9零〇一二两三四五六七八九十]){}(?![0-9零〇一二两三四五六七八九十])"
_EN_NUM = _words(_EN_NUMBERS) + "|[0-9]{1,3}"
_EN_FEW = r"a\s+few|few|several"
_EN_MONTH_RE = _words(_EN_MONTHS)
_EN_YEAR_SUFFIX = (
    r"(?:,?\s+(?:of\s+)?(?P<year>[0-9]{4})\b|\s+(?:of\s+)?(?P<rel_year>last|this|next)\s+year\b)?"
)

# Order breaks ties between candidates of the same length at the same place: earlier wins.
_RULES: tuple[_Rule, ...] = (
    _zh(_words(_ZH_PART_DAYS), _part_day(_ZH_PART_DAYS), _first_characters(_ZH_PART_DAYS)),
    _zh(_words(_ZH_DAYS), _zh_day, _first_characters(_ZH_DAYS)),
    _zh(
        rf"(?:(?P<rel>{_ZH_REL_RE})一?个?)?(?P<word>{_ZH_WEEK})(?P<day>[一二三四五六日天1-7])",
        _zh_weekday,
        "周星礼",
    ),
    _zh(rf"(?:(?P<rel>{_ZH_REL_RE})一?个?)?周末", _zh_weekend, "周"),
    _zh(rf"(?P<rel>{_ZH_REL_RE})一?个?(?:{_ZH_WEEK})(?![围年岁边到期末])", _zh_week, "周星礼"),
    _zh(rf"(?P<rel>{_ZH_REL_RE})一?个?月(?:(?P<day>{_ZH_MONTH_NUM})[日号])?", _zh_month_rel, "月"),
    _zh(
        rf"{_ZH_YEAR_PREFIX}?(?<![{_ZH_NUMERALS_BEFORE}])(?P<month>{_ZH_MONTH_NUM})\s*月"
        rf"(?:(?P<day>{_ZH_MONTH_NUM})\s*[日号]|份)?(?!河)",
        _zh_month_day,
        "月",
    ),
    _zh(
        rf"(?<![0-9零〇一二三四五六七八九])(?:(?P<year>[0-9]{{4}}|[零〇一二三四五六七八九]{{4}})\s*年(?![代级前后])"
        rf"|(?P<rel_year>{_words(_ZH_REL_YEAR)}))",
        _zh_year,
        "年",
    ),
    _zh(rf"(?<![0-9])(?P<n>{_ZH_NUM}|好几|几|数|半)\s*(?P<unit>{_ZH_UNIT})\s*[之以]?前", _zh_ago, "前"),
    _zh(r"前[几些](?P<unit>天|周|个?星期|个?礼拜|个月|年)|前两天", _zh_few_ago, "前"),
    _zh(rf"(?:最近|过去|近)的?(?P<n>{_ZH_NUM}|几)\s*(?P<unit>{_ZH_UNIT})", _zh_past, "近过"),
    _zh(_words(_ZH_RECENT), _recent_handler, _first_characters(_ZH_RECENT)),
    _zh("上一?次|上一?回", _before_now_handler, "上"),
    _zh("刚才|刚刚|方才", _last_hour_handler, "刚方"),
    _zh(
        rf"{_ZH_YEAR_PREFIX}?(?P<name>{_ZH_HOLIDAY_NAMES}|{_ZH_NOT_NUMERAL.format('五一')})",
        _zh_holiday,
        _first_characters(_ZH_HOLIDAYS) | {"五"},
    ),
    _zh(rf"{_ZH_YEAR_PREFIX}(?P<season>[春夏秋冬])[天季]", _zh_season, "春夏秋冬"),
    _en(rf"\b(?:{_words(_EN_PART_DAYS)})\b", _part_day(_EN_PART_DAYS)),
    _en(rf"\b(?:{_words(_EN_DAYS)})\b", _en_day),
    _en(r"\bearlier\s+(?P<unit>today|this\s+(?:week|month|year))\b", _en_earlier),
    _en(r"\b(?P<rel>last|this|next)\s+(?P<unit>week|month|year)\b", _en_calendar_unit),
    _en(r"\bthe\s+(?P<unit>week|month|year)\s+(?P<dir>before\s+last|after\s+next)\b", _en_calendar_unit),
    _en(rf"\b(?:(?P<rel>this\s+past|last|this|next|past)\s+)?(?P<day>{_words(_EN_WEEKDAYS)})\b", _en_weekday),
    _en(r"\b(?:(?P<rel>this\s+past|last|this|next|past)\s+|the\s+)?weekend\b", _en_weekend),
    _en(rf"\b(?P<n>half\s+a|{_EN_FEW}|{_EN_NUM})\s+(?P<unit>day|week|month|year)s?\s+ago\b", _en_ago),
    _en(
        rf"\b(?:(?P<the>the|these|this)\s+)?(?P<kw>last|past)\s+(?:(?P<n>{_EN_FEW}|{_EN_NUM})\s+)?"
        r"(?P<unit>day|week|month|year)s?\b",
        _en_past,
    ),
    _en(r"\bthe\s+other\s+day\b", _en_few_days),
    _en(r"\b(?:recently|lately|these\s+days|of\s+late)\b", _recent_handler),
    _en(
        r"\b(?:(?:the\s+)?last\s+time|previously|in\s+the\s+past|a\s+while\s+(?:ago|back)|some\s+time\s+ago)\b"
        r"|\b(?:before|earlier)\b(?=\s*(?:[.!?,;:)。！？，；]|$))",
        _before_now_handler,
    ),
    _en(
        r"\b(?:just\s+now|a\s+moment\s+ago|moments\s+ago|a\s+(?:few\s+)?minutes?\s+ago)\b", _last_hour_handler
    ),
    _en(
        rf"\b(?P<month>{_EN_MONTH_RE})\.?\s+(?P<day>[0-9]{{1,2}})(?:st|nd|rd|th)?\b{_EN_YEAR_SUFFIX}",
        _en_date,
    ),
    _en(
        rf"\b(?P<the>the\s+)?(?P<day>[0-9]{{1,2}})(?P<ordinal>st|nd|rd|th)?(?P<of>\s+of)?\s+(?P<month>{_EN_MONTH_RE})\b"
        rf"\.?{_EN_YEAR_SUFFIX}",
        _en_day_first_date,
    ),
    _en(
        r"(?<![0-9])(?P<year>[0-9]{4})(?P<sep>[-/.])(?P<month>[0-9]{1,2})(?P=sep)(?P<day>[0-9]{1,2})(?![0-9])",
        _numeric_date,
    ),
    _en(
        rf"\b(?:(?P<rel>last|this|next|in|during)\s+)?(?P<month>{_EN_MONTH_RE})\b\.?{_EN_YEAR_SUFFIX}",
        _en_month,
    ),
    _en(r"\b(?:in|during)\s+(?P<year>[0-9]{4})\b", _en_year),
    _en(
        rf"\b(?:(?P<rel>last|this|next)\s+)?(?P<name>{_EN_HOLIDAY_NAMES})\b{_EN_YEAR_SUFFIX}",
        _en_holiday,
    ),
    _en(
        r"\b(?:(?P<prep>in|during|over)\s+)?(?:the\s+)?(?:(?P<rel>this\s+past|last|this|next|past)\s+)?"
        r"(?P<season>spring|summer|autumn|fall|winter)\b(?:\s+(?:of\s+)?(?P<year>[0-9]{4})\b)?",
        _en_season,
    ),
)

# Words that contain a rule's first character but mean something else: "晚上周会" is not "上周".
_BLOCKERS = re.compile("晚上|早上|马上|以上|之上|以下|之下|上午|下午|清明上河图")
_PART_AFTER = re.compile(rf"\s*(?:的|in\s+the\s+)?(?P<part>{_words(_PARTS)})(?![a-z])", re.IGNORECASE)
_PREPOSITION_BEFORE = re.compile(r"\b(?:on|in|during|over)\s+$", re.IGNORECASE)


# ---------------------------------------------------------------------------------------------------
# Choosing among candidates


@dataclass(frozen=True, slots=True)
class _Found:
    start: int
    end: int
    order: int  # the rule's place in _RULES
    resolved: _Resolved


def _straddles(span: tuple[int, int], block: tuple[int, int]) -> bool:
    """Overlaps `block` without containing it."""
    overlaps = span[0] < block[1] and block[0] < span[1]
    return overlaps and not (span[0] <= block[0] and block[1] <= span[1])


def _candidates(text: str, clock: _Now) -> Iterator[_Found]:
    blocks = [match.span() for match in _BLOCKERS.finditer(text)]
    scripts = {script for script in (_CJK, _LATIN) if script.search(text)}
    characters = set(text) if _CJK in scripts else set()
    for order, rule in enumerate(_RULES):
        if rule.script not in scripts or (rule.needs and rule.needs.isdisjoint(characters)):
            continue
        for match in rule.pattern.finditer(text):
            if any(_straddles(match.span(), block) for block in blocks):
                continue
            resolved = rule.resolve(match, clock)
            if resolved is not None:
                yield _Found(match.start(), match.end(), order, resolved)


def _choose(found: list[_Found]) -> list[_Found]:
    """Longest first, then leftmost, then rule order; keep those that overlap nothing kept before."""
    chosen: list[_Found] = []
    for candidate in sorted(found, key=lambda f: (f.start - f.end, f.start, f.order)):
        if all(candidate.end <= kept.start or kept.end <= candidate.start for kept in chosen):
            chosen.append(candidate)
    return sorted(chosen, key=lambda f: f.start)


def _with_part_of_day(found: _Found, text: str, limit: int, clock: _Now) -> _Found:
    """ "昨天" + "下午", "Friday" + " night": a part of the day right after a one-day phrase narrows it."""
    day = found.resolved.day
    match = _PART_AFTER.match(text, found.end) if day else None
    if day is None or match is None or match.end() > limit:
        return found
    return replace(found, end=match.end(), resolved=_part_of_day(clock, day, _PARTS[match["part"].lower()]))


def _with_preposition(start: int, text: str, floor: int) -> int:
    """ "on Wednesday": the preposition belongs to an English phrase (and to what a caller strips)."""
    first = text[start : start + 1]
    if not (first.isascii() and first.isalnum()):
        return start
    match = _PREPOSITION_BEFORE.search(text, floor, start)
    return match.start() if match else start
