"""The task intents the session rules recognise ("订会议室", "book a meeting room"), and what each needs.

A table, not a model: an intent is recognised by the words of its object (会议室, flight, 退款), in the
order below (the first that matches wins, so "meeting room" is tried before "meeting"). `required`
lists the parameters a booking-like intent still lacks until the user gives them; the summary reports
the missing ones as open items.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["INTENTS", "Intent", "find_intent", "intent_by_key"]


@dataclass(frozen=True, slots=True)
class Intent:
    key: str  # stable, language-neutral: stored as a memory's `intent`
    goal_zh: str
    goal_en: str
    verb_zh: str  # for habits: "通常{verb_zh}A栋"
    verb_en: str  # for habits: "usually {verb_en} building A"
    required: tuple[str, ...]  # parameter keys (see slots.py); "place" is any of building, floor, room
    pattern: re.Pattern[str]

    def goal(self, lang: str) -> str:
        return self.goal_zh if lang == "zh" else self.goal_en


def _intent(
    key: str, goals: tuple[str, str], verbs: tuple[str, str], required: tuple[str, ...], pattern: str
) -> Intent:
    return Intent(key, *goals, *verbs, required, re.compile(pattern, re.IGNORECASE))


INTENTS: tuple[Intent, ...] = (
    _intent(
        "book_meeting_room",
        ("订会议室", "book a meeting room"),
        ("预订", "books"),
        ("date", "time", "people", "place"),
        r"会议室|会议厅|\b(?:meeting|conference)\s+rooms?\b|\bboardroom\b",
    ),
    _intent(
        "book_table",
        ("订餐位", "book a table"),
        ("预订", "books"),
        ("date", "time", "people"),
        r"餐厅|餐位|订座|订桌|包间|\brestaurant\b|\ba\s+table\b|\btable\s+for\b",
    ),
    _intent(
        "book_flight",
        ("订机票", "book a flight"),
        ("预订", "books"),
        ("date",),
        r"机票|航班|飞机|\bflights?\b|\bplane\s+tickets?\b",
    ),
    _intent(
        "book_train",
        ("订火车票", "book a train ticket"),
        ("预订", "books"),
        ("date",),
        r"火车票|高铁|动车|\btrain\s+tickets?\b|\btrains?\b",
    ),
    _intent(
        "book_hotel",
        ("订酒店", "book a hotel"),
        ("预订", "books"),
        ("date",),
        r"酒店|宾馆|民宿|\bhotels?\b",
    ),
    _intent(
        "schedule_meeting",
        ("安排会议", "schedule a meeting"),
        ("约", "meets"),
        ("date", "time"),
        r"开会|会议|见面|\bmeetings?\b|\bmeet\b|\bcall\s+with\b",
    ),
    _intent(
        "set_reminder",
        ("设置提醒", "set a reminder"),
        ("设置提醒", "sets reminders"),
        ("date",),
        r"提醒|\bremind\b|\breminders?\b",
    ),
    _intent(
        "refund",
        ("申请退款", "get a refund"),
        ("申请退款", "asks for refunds"),
        (),
        r"退款|退钱|退货|\brefunds?\b|\bmoney\s+back\b|\breturn\s+(?:an?\s+|the\s+|my\s+)?(?:order|item)\b",
    ),
    _intent(
        "report_issue",
        ("处理故障", "fix a problem"),
        ("报告", "reports"),
        (),
        r"故障|坏了|报修|打不开|登录不了|登不上|无法|报错|出错|投诉|"
        r"\bnot\s+working\b|\bbroken\b|\bdoesn'?t\s+work\b|\bcan'?t\s+log\s*in\b|\berrors?\b|\bcomplain",
    ),
    _intent(
        "export_report",
        ("导出报表", "export a report"),
        ("导出", "exports"),
        (),
        r"导出|\bexport",
    ),
)

_BY_KEY = {intent.key: intent for intent in INTENTS}


def find_intent(text: str) -> Intent | None:
    """The first intent in INTENTS whose words appear in `text`, or None."""
    return next((intent for intent in INTENTS if intent.pattern.search(text)), None)


def intent_by_key(key: str) -> Intent | None:
    return _BY_KEY.get(key)
