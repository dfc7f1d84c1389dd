"""Synthetic but realistic memories: mixed Chinese and English, several subjects, tiers and kinds."""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass

_ZH = [
    "用户偏好{seat}座位",
    "用户要求报表用{fmt}格式导出",
    "用户预订了{day}下午{building}栋的会议室，{n}个人",
    "用户说以后都用{lang}回复",
    "客服工单{n}：{product}无法登录，已重置密码",
    "用户住在{city}，常去{city}的分公司",
]
_EN = [
    "User prefers {seat_en} seats on long flights",
    "Exports should be in {fmt} format",
    "Booked the {building} building meeting room for {n} people on {day_en}",
    "Ticket {n}: {product} login fails after password reset",
    "User works from {city_en} on Mondays",
    "Always reply in {lang_en}",
]
_FILL = {
    "seat": ["靠窗", "靠过道", "前排"],
    "seat_en": ["window", "aisle", "front-row"],
    "fmt": ["CSV", "Excel", "PDF", "JSON"],
    "day": ["周一", "周三", "周五"],
    "day_en": ["Monday", "Wednesday", "Friday"],
    "building": ["A", "B", "C"],
    "lang": ["中文", "英文"],
    "lang_en": ["Chinese", "English"],
    "product": ["CRM", "ERP", "BI 看板"],
    "city": ["上海", "北京", "深圳"],
    "city_en": ["Berlin", "Shanghai", "Austin"],
}
_TIERS = ["working", "episodic", "semantic"]
_KINDS = {"working": ["task", "fact"], "episodic": ["event", "task"], "semantic": ["preference", "fact"]}


@dataclass(frozen=True, slots=True)
class SyntheticMemory:
    subject: str
    session_id: str
    tier: str
    kind: str
    content: str


def synthetic_memories(seed: int, subjects: int = 50) -> Iterator[SyntheticMemory]:
    rng = random.Random(seed)
    while True:
        template = rng.choice(_ZH + _EN)
        values = {key: rng.choice(options) for key, options in _FILL.items()}
        values["n"] = str(rng.randint(2, 9999))
        tier = rng.choice(_TIERS)
        subject = f"user-{rng.randrange(subjects)}"
        yield SyntheticMemory(
            subject=subject,
            session_id=f"{subject}-s{rng.randrange(20)}",
            tier=tier,
            kind=rng.choice(_KINDS[tier]),
            content=template.format(**values),
        )
