"""The parameters one utterance states (Chinese or English): date, part of day, clock time, people count,
place (building, floor, room) and the people named; and how to say them back.

Keys and values (JSON, language-neutral, so a change of language does not look like a change of value):

* ``date``: ISO date. Dates come from timeparse, resolved against the turn's time, then turned towards
  the future, since a request plans ahead: a bare weekday ("周五", "Friday") is the one in the week of
  the date already agreed (`anchor`), else the next one (today included); a month or day without a year
  that has passed this year is next year's. Explicitly past phrases (上周三, last Friday, 昨天) are kept.
* ``part_of_day``: early_morning | morning | noon | afternoon | evening | night.
* ``time``: "15:00" or a range "14:00-16:00". Without 上午/下午/am/pm, hours 1-6 are afternoon hours
  ("3点开会" is 15:00; nobody books a room for 3 a.m.). "一点" alone is "a little", not one o'clock.
* ``people``: a count of people: 10个人, 十个人, 两位, 10 people, for four, party of 6.
* ``building`` ("A", "3"), ``floor`` (3), ``room`` ("301"): A栋, 3号楼, 3楼, 301会议室, building A,
  floor 3, 3rd floor, room 301.
* ``participants``: names after 和/跟/与/同 (a common surname, then one or two characters, then a
  boundary such as 一起/开会/punctuation) or after with/for (capitalised words, not weekdays, months or
  pronouns). Conservative on purpose: a missed name costs less than a wrong one.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from itertools import pairwise, takewhile

from hindsight_server.domain.model import JsonValue
from hindsight_server.domain.numerals import EN_NUMBER, ZH_NUMBER, parse_number
from hindsight_server.domain.timeparse import find_times

__all__ = ["KEYS", "PLACE_KEYS", "describe", "describe_all", "extract", "normalise", "part_of_hour"]

PLACE_KEYS = ("building", "floor", "room")
# The order values are listed in (a summary's confirmed parameters, an episode's entities).
KEYS = ("date", "part_of_day", "time", "people", *PLACE_KEYS, "participants")


def normalise(text: str) -> str:
    """Full-width to half-width (NFKC) and runs of white space to one space."""
    return " ".join(unicodedata.normalize("NFKC", text).split())


# -- dates


_WEEKDAY_ZH = "一二三四五六日"
_WEEKDAY_EN = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_BARE_WEEKDAY = re.compile(
    r"^(?:on\s+)?(?:(?:周|星期|礼拜)[一二三四五六日天1-7]|monday|tuesday|wednesday|thursday|friday|saturday|sunday)",
    re.IGNORECASE,
)
_PAST = re.compile(
    r"(?<![晚早])上(?!午)|昨|前|去年|\blast\b|\bago\b|\byesterday\b|\bpast\b|\bprevious\b", re.IGNORECASE
)
_HAS_YEAR = re.compile(r"[0-9]{4}|年|\byear\b", re.IGNORECASE)


def _monday(day: date) -> date:
    return day - timedelta(days=day.weekday())


def _towards_future(day: date, phrase: str, today: date, anchor: date | None) -> date:
    if _PAST.search(phrase):
        return day
    if _BARE_WEEKDAY.match(phrase):
        if anchor is not None:
            in_anchor_week = _monday(anchor) + timedelta(days=day.weekday())
            if in_anchor_week >= today:
                return in_anchor_week
        return today + timedelta(days=(day.weekday() - today.weekday()) % 7)
    if day < today and not _HAS_YEAR.search(phrase):
        try:
            return day.replace(year=day.year + 1)
        except ValueError:  # Feb 29
            return day
    return day


def _date(text: str, at: datetime, anchor: date | None) -> date | None:
    """The last one-day expression in the text (a correction comes after what it corrects)."""
    days = [
        (expression.window.start, expression.phrase)
        for expression in find_times(text, at)
        if not expression.vague
        and expression.window.start is not None
        and expression.window.end is not None
        and expression.window.end - expression.window.start <= timedelta(hours=25)
    ]
    if not days:
        return None
    start, phrase = days[-1]
    return _towards_future(start.date(), phrase, at.date(), anchor)


# -- parts of the day and clock times

_PARTS = {
    "凌晨": "early_morning",
    "早上": "morning",
    "早晨": "morning",
    "清晨": "morning",
    "上午": "morning",
    "今早": "morning",
    "明早": "morning",
    "中午": "noon",
    "下午": "afternoon",
    "傍晚": "evening",
    "晚上": "evening",
    "今晚": "evening",
    "明晚": "evening",
    "夜里": "night",
    "深夜": "night",
    "early morning": "early_morning",
    "morning": "morning",
    "noon": "noon",
    "lunchtime": "noon",
    "afternoon": "afternoon",
    "evening": "evening",
    "tonight": "evening",
    "night": "night",
}
_PART_RE = "|".join(sorted(_PARTS, key=len, reverse=True))
# Greetings name a part of the day without meaning it: 早上好, good morning, 晚安.
_PART = re.compile(rf"(?<![a-z])(?<!good )(?P<part>{_PART_RE})(?![a-z好])", re.IGNORECASE)
_ZH_HOUR = "[0-9]{1,2}|[零一二两三四五六七八九十]{1,3}"
_CONNECTOR = r"\s*(?:到|至|-|~|–|—|\bto\b|\buntil\b|\btill\b)\s*"
_ZH_CLOCK = re.compile(
    rf"(?P<part>{_PART_RE})?\s*(?<![0-9])(?P<h>{_ZH_HOUR})\s*(?:点|时(?![间候]))(?P<zhong>钟)?"
    rf"(?:(?P<half>半)|(?P<quarter>一刻|三刻)|(?P<m>[0-9]{{1,2}}|[零一二三四五六七八九十]{{1,3}})分?|(?P<sharp>整))?"
)
_ZH_RANGE = re.compile(
    rf"(?P<part>{_PART_RE})?\s*(?<![0-9])(?P<h1>{_ZH_HOUR})\s*(?:点|时)?(?P<half1>半)?{_CONNECTOR}"
    rf"(?P<part2>{_PART_RE})?\s*(?P<h2>{_ZH_HOUR})\s*(?:点|时)(?P<half2>半)?"
)
_HM = re.compile(
    rf"(?P<part>{_PART_RE})?\s*(?<![0-9:])(?P<h>[01]?[0-9]|2[0-3]):(?P<m>[0-5][0-9])(?![0-9:])"
    r"(?:\s*(?P<ampm>[ap])\.?m\.?(?![a-z]))?",
    re.IGNORECASE,
)
_EN_CLOCK = re.compile(
    r"\b(?P<h>[0-9]{1,2})(?::(?P<m>[0-5][0-9]))?\s*(?P<ampm>[ap])\.?m\.?(?![a-z])"
    rf"|\b(?P<hw>{EN_NUMBER}|[0-9]{{1,2}})\s+o'?clock\b",
    re.IGNORECASE,
)
_EN_RANGE = re.compile(
    r"\b(?P<h1>[0-9]{1,2})(?::(?P<m1>[0-5][0-9]))?\s*(?:(?P<ampm1>[ap])\.?m\.?)?"
    rf"{_CONNECTOR}(?P<h2>[0-9]{{1,2}})(?::(?P<m2>[0-5][0-9]))?\s*(?P<ampm2>[ap])\.?m\.?(?![a-z])",
    re.IGNORECASE,
)


@dataclass(frozen=True, slots=True)
class _Clock:
    hour: int
    minute: int
    start: int
    end: int


def _hour(raw: int, part: str | None, ampm: str | None) -> int | None:
    """The 24-hour hour of "3" read with its 下午 / pm (or, with neither, office hours)."""
    if not 0 <= raw <= 24:
        return None
    if ampm:
        if raw > 12:
            return None
        return (raw % 12) + (12 if ampm.lower() == "p" else 0)
    later = part in ("afternoon", "evening") or (part == "noon" and raw < 6) or (part == "night" and raw >= 6)
    if (later and raw < 12) or (part is None and 1 <= raw <= 6):
        raw += 12
    return raw if raw < 24 else None


def _part_of(match: re.Match[str], group: str = "part") -> str | None:
    word = match[group]
    return _PARTS[word.lower()] if word else None


def _zh_clocks(text: str) -> Iterator[_Clock]:
    for match in _ZH_CLOCK.finditer(text):
        raw = parse_number(match["h"])
        precise = match["part"] or match["zhong"] or match["half"] or match["quarter"] or match["m"]
        if raw is None or (match["h"] == "一" and not (precise or match["sharp"])):
            continue  # "快一点", "便宜一点": "a little"
        hour = _hour(raw, _part_of(match), None)
        minute = 30 if match["half"] else 0
        if match["quarter"]:
            minute = 15 if match["quarter"] == "一刻" else 45
        if match["m"]:
            minute = parse_number(match["m"]) or 0
        if hour is not None and minute < 60:
            yield _Clock(hour, minute, match.start(), match.end())


def _en_clocks(text: str) -> Iterator[_Clock]:
    for match in _HM.finditer(text):
        hour = _hour(int(match["h"]), _part_of(match), match["ampm"])
        if hour is not None:
            yield _Clock(hour, int(match["m"]), match.start(), match.end())
    for match in _EN_CLOCK.finditer(text):
        raw = parse_number(match["h"] or match["hw"])
        hour = _hour(raw, None, match["ampm"]) if raw is not None else None
        if hour is not None:
            yield _Clock(hour, int(match["m"] or 0), match.start(), match.end())


def _format(hour: int, minute: int) -> str:
    return f"{hour:02d}:{minute:02d}"


def _range(text: str) -> str | None:
    for match in _ZH_RANGE.finditer(text):
        first, second = parse_number(match["h1"]), parse_number(match["h2"])
        part = _part_of(match)
        part2 = _part_of(match, "part2") or part
        if first is None or second is None:
            continue
        start, end = _hour(first, part, None), _hour(second, part2, None)
        if start is not None and end is not None and end > start:
            return (
                f"{_format(start, 30 if match['half1'] else 0)}-{_format(end, 30 if match['half2'] else 0)}"
            )
    for match in _EN_RANGE.finditer(text):
        ampm2 = match["ampm2"]
        start = _hour(int(match["h1"]), None, match["ampm1"] or ampm2)
        end = _hour(int(match["h2"]), None, ampm2)
        if start is not None and end is not None and end > start:
            return f"{_format(start, int(match['m1'] or 0))}-{_format(end, int(match['m2'] or 0))}"
    clocks = sorted({*_zh_clocks(text), *_en_clocks(text)}, key=lambda clock: clock.start)
    for before, after in pairwise(clocks):
        between = text[before.end : after.start]
        if (
            re.fullmatch(_CONNECTOR, between)
            and after.hour * 60 + after.minute > before.hour * 60 + before.minute
        ):
            return f"{_format(before.hour, before.minute)}-{_format(after.hour, after.minute)}"
    return None


def _time(text: str) -> str | None:
    ranged = _range(text)
    if ranged:
        return ranged
    clocks = sorted({*_zh_clocks(text), *_en_clocks(text)}, key=lambda clock: (clock.start, -clock.end))
    return _format(clocks[-1].hour, clocks[-1].minute) if clocks else None


def _part_of_day(text: str) -> str | None:
    found = [_PARTS[match["part"].lower()] for match in _PART.finditer(text)]
    return found[-1] if found else None


def part_of_hour(hour: int) -> str:
    if hour < 6:
        return "early_morning"
    if hour < 12:
        return "morning"
    if hour < 13:
        return "noon"
    return "afternoon" if hour < 18 else "evening"


# -- people, places, names

_ZH_PEOPLE = re.compile(
    rf"(?<!第)(?P<n>{ZH_NUMBER})\s*(?:个人|位|名|人)(?![民员家工生事物才口性们数次])|人数\s*[:为是]?\s*(?P<n2>{ZH_NUMBER})"
)
_NOT_PEOPLE = (
    r"(?!\s*(?:[ap]\.?m\b|:|o'?clock|hours?|hrs?|minutes?|mins?|days?|nights?|weeks?|months?|years?|%|"
    r"percent|dollars?|euros?|yuan|rmb|usd|st\b|nd\b|rd\b|th\b))"
)
_EN_PEOPLE = re.compile(
    rf"\b(?P<n>{EN_NUMBER})\s+(?:people|persons?|guests?|attendees|participants|pax|adults|of\s+us)\b"
    rf"|\b(?:for|party\s+of|group\s+of)\s+(?P<n2>{EN_NUMBER})\b{_NOT_PEOPLE}",
    re.IGNORECASE,
)
_ZH_SMALL = "[0-9]{1,3}|[一二三四五六七八九十]{1,3}"
_BUILDING = re.compile(
    rf"(?<![A-Za-z0-9])(?P<zh>[A-Za-z]|{_ZH_SMALL})\s*(?:号楼|栋|幢|座(?!位)|号馆)"
    r"|\b(?i:building|bldg\.?)\s+(?P<en>[A-Z]|[0-9]{1,3})\b"
)
_ORDINALS = {
    "first": 1,
    "second": 2,
    "third": 3,
    "fourth": 4,
    "fifth": 5,
    "sixth": 6,
    "seventh": 7,
    "eighth": 8,
    "ninth": 9,
    "tenth": 10,
}
_FLOOR = re.compile(
    rf"(?P<zh>{_ZH_SMALL})\s*(?:楼|层)(?![下上梯道房])"
    rf"|\bfloor\s+(?P<en>[0-9]{{1,3}})\b|\b(?P<en2>[0-9]{{1,3}})(?:st|nd|rd|th)\s+floor\b"
    rf"|\b(?P<word>{'|'.join(_ORDINALS)})\s+floor\b",
    re.IGNORECASE,
)
_ROOM_ID = "[A-Za-z]?[0-9]{1,4}[A-Za-z]?"
_ROOM = re.compile(
    rf"(?<![0-9A-Za-z])(?P<a>{_ROOM_ID})\s*号(?:会议室|房间|房|室)"
    r"|(?<![0-9A-Za-z])(?P<b>[A-Za-z]?[0-9]{2,4}[A-Za-z]?)\s*(?:会议室|房间|室)"
    rf"|(?:会议室|房间)\s*(?P<c>{_ROOM_ID})(?![0-9A-Za-z个人位名点号楼层栋日月天])"
    rf"|\b(?i:room)\s+(?P<d>[A-Za-z]?[0-9]{{1,4}}[A-Za-z]?|[A-Z])\b"
)

_SURNAMES = (
    "王李张刘陈杨黄赵吴周徐孙马朱胡郭何高林罗郑梁谢宋唐许韩冯邓曹彭曾肖田董袁潘于蒋蔡余杜叶程苏魏吕丁任沈"
    "姚卢姜崔钟谭陆汪范金石廖贾夏韦付方白邹孟熊秦邱江尹薛闫段雷侯龙史陶黎贺顾毛郝龚邵万钱严覃武戴莫孔向汤"
)
_ZH_ONE_NAME = rf"[{_SURNAMES}][\u4e00-\u9fff]{{1,2}}?"
_ZH_NAMES = re.compile(
    rf"(?:和|跟|与|同)(?P<names>{_ZH_ONE_NAME}(?:[、和及]{_ZH_ONE_NAME})*)"
    r"(?=一起|开会|见面|碰面|碰头|讨论|聊|吃饭|通话|会面|对接|沟通|约|的|和|跟|及|还有|[,.、。!?;:\s]|$)"
)
_ZH_NAME_SPLIT = re.compile("[、和及]")
# Second characters that make a common word, not a name: 周五, 方案, 高层, 金额, 万一 ...
_ZH_NOT_NAME = re.compile(
    r"^周[一二三四五六日天末]|^.(?:们|层|案|额|边|式|法|向|度|些|家|位|一|时|面|样|子|天|色)$"
)
_EN_NAME_WORD = r"[A-Z][a-z]+"
_EN_NAMES = re.compile(
    rf"\b(?:with|for)\s+(?P<names>{_EN_NAME_WORD}(?:\s+{_EN_NAME_WORD})?"
    rf"(?:(?:\s*,\s*|\s+and\s+|\s*,\s*and\s+){_EN_NAME_WORD}(?:\s+{_EN_NAME_WORD})?)*)"
)
_EN_NAME_SPLIT = re.compile(r"\s*,\s*and\s+|\s*,\s*|\s+and\s+")
_EN_NOT_NAMES = frozenset(
    (
        "monday tuesday wednesday thursday friday saturday sunday january february march april may june july "
        "august september october november december i me my mine you your we us our they them their he him "
        "his she her it its the a an this that these those everyone everybody someone team building room "
        "floor today tomorrow tonight next last please thanks thank hi hello all both some"
    ).split()
)


def _people(text: str) -> int | None:
    found = [match["n"] or match["n2"] for match in (*_ZH_PEOPLE.finditer(text), *_EN_PEOPLE.finditer(text))]
    counts = [count for word in found if (count := parse_number(word)) is not None and 0 < count <= 1000]
    return counts[-1] if counts else None


def _building(text: str) -> str | None:
    found = [match["zh"] or match["en"] for match in _BUILDING.finditer(text)]
    if not found:
        return None
    word = found[-1]
    number = parse_number(word)
    return str(number) if number is not None else word.upper()


def _floor(text: str) -> int | None:
    for match in reversed(list(_FLOOR.finditer(text))):
        word = match["zh"] or match["en"] or match["en2"]
        number = parse_number(word) if word else _ORDINALS[match["word"].lower()]
        if number is not None:
            return number
    return None


def _room(text: str) -> str | None:
    found = [match["a"] or match["b"] or match["c"] or match["d"] for match in _ROOM.finditer(text)]
    return found[-1].upper() if found else None


def _participants(text: str) -> list[str]:
    names: list[str] = []
    for match in _ZH_NAMES.finditer(text):
        names.extend(name for name in _ZH_NAME_SPLIT.split(match["names"]) if not _ZH_NOT_NAME.search(name))
    for match in _EN_NAMES.finditer(text):
        for name in _EN_NAME_SPLIT.split(match["names"]):
            words = list(takewhile(lambda word: word.lower() not in _EN_NOT_NAMES, name.split()))
            if words:
                names.append(" ".join(words))
    return list(dict.fromkeys(names))


def extract(text: str, at: datetime, anchor: date | None = None) -> dict[str, JsonValue]:
    """The parameters `text` states, by KEYS order; `at` is when it was said (timezone-aware), `anchor`
    the date already agreed (a bare weekday lands in its week)."""
    clean = normalise(text)
    values: dict[str, JsonValue] = {}
    day = _date(clean, at, anchor)
    if day is not None:
        values["date"] = day.isoformat()
    clock = _time(clean)
    part = part_of_hour(int(clock[:2])) if clock is not None else _part_of_day(clean)
    if part is not None:
        values["part_of_day"] = part
    if clock is not None:
        values["time"] = clock
    found: dict[str, JsonValue | None] = {
        "people": _people(clean),
        "building": _building(clean),
        "floor": _floor(clean),
        "room": _room(clean),
    }
    values.update({key: value for key, value in found.items() if value is not None})
    names = _participants(clean)
    if names:
        values["participants"] = list(names)
    return values


# -- saying them back

_PART_LABELS = {
    "early_morning": ("凌晨", "early morning"),
    "morning": ("上午", "morning"),
    "noon": ("中午", "noon"),
    "afternoon": ("下午", "afternoon"),
    "evening": ("晚上", "evening"),
    "night": ("夜里", "night"),
}


def _day(value: str, lang: str) -> str:
    try:
        day = date.fromisoformat(value)
    except ValueError:
        return value
    if lang == "zh":
        return f"{value}（周{_WEEKDAY_ZH[day.weekday()]}）"
    return f"{value} ({_WEEKDAY_EN[day.weekday()]})"


def _text(value: JsonValue) -> str:
    if isinstance(value, list):
        return ", ".join(_text(item) for item in value)
    if isinstance(value, dict):
        return ", ".join(f"{key}={_text(item)}" for key, item in value.items())
    return "" if value is None else str(value)


def describe(key: str, value: JsonValue, lang: str) -> str:
    """One parameter as a person would say it: ("building", "A") is "A栋" / "building A"."""
    zh = lang == "zh"
    if key == "date" and isinstance(value, str):
        return _day(value, lang)
    if key == "part_of_day" and isinstance(value, str) and value in _PART_LABELS:
        return _PART_LABELS[value][0 if zh else 1]
    if key == "people" and isinstance(value, int):
        return f"{value}人" if zh else f"{value} {'person' if value == 1 else 'people'}"
    if key == "participants" and isinstance(value, list):
        names = [_text(name) for name in value]
        return "与" + "、".join(names) if zh else "with " + ", ".join(names)
    if key == "building" and isinstance(value, str) and value.isdigit():
        return f"{value}号楼" if zh else f"building {value}"
    labels = {"building": ("{}栋", "building {}"), "floor": ("{}楼", "floor {}"), "room": ("{}室", "room {}")}
    if key in labels:
        return labels[key][0 if zh else 1].format(_text(value))
    if key == "time":
        return _text(value)
    return f"{key}：{_text(value)}" if zh else f"{key}: {_text(value)}"


def describe_all(values: Mapping[str, JsonValue], lang: str) -> list[str]:
    """The parameters as phrases: the day with its part or time, the place in one piece, then the rest."""
    zh = lang == "zh"
    phrases: list[str] = []
    when = [describe("date", values["date"], lang)] if "date" in values else []
    if "time" in values:
        when.append(describe("time", values["time"], lang))
    elif "part_of_day" in values:
        when.append(describe("part_of_day", values["part_of_day"], lang))
    if when:
        phrases.append(("" if zh else " ").join(when))
    if "people" in values:
        phrases.append(describe("people", values["people"], lang))
    place = [describe(key, values[key], lang) for key in PLACE_KEYS if key in values]
    if place:
        phrases.append(("" if zh else ", ").join(place))
    shown = {"date", "time", "part_of_day", "people", *PLACE_KEYS}
    phrases.extend(describe(key, value, lang) for key, value in values.items() if key not in shown)
    return phrases
