from datetime import UTC, datetime

import pytest

from hindsight_server.domain.language import language
from hindsight_server.domain.model import Kind
from hindsight_server.domain.packing import PackItem, estimate_tokens, pack, render_line
from tests.domain.builders import memory

PREF_ZH = memory(id="zh", content="用户偏好CSV格式导出", confidence=0.92)
FACT_EN = memory(id="en", content="The user works at Acme", kind=Kind.FACT, confidence=0.8)


@pytest.mark.parametrize(
    ("text", "tokens"), [("", 0), ("靠窗", 2), ("abcd", 1), ("abcde", 2), ("靠窗 seat", 4)]
)
def test_estimate_tokens(text: str, tokens: int) -> None:
    assert estimate_tokens(text) == tokens


@pytest.mark.parametrize(
    ("text", "lang"), [("用户偏好CSV格式导出", "zh"), ("User likes CSV", "en"), ("123", "en")]
)
def test_language(text: str, lang: str) -> None:
    assert language(text) == lang


def test_lines_follow_the_seed_format_in_the_memorys_language() -> None:
    assert render_line(PREF_ZH) == "- (2024-03-15, 偏好) 用户偏好CSV格式导出，置信度0.92"
    assert render_line(FACT_EN) == "- (2024-03-15, fact) The user works at Acme (confidence 0.80)"
    updated = memory(
        content="会议改到周五",
        kind=Kind.EVENT,
        supersedes="old",
        confidence=1.0,
        valid_from=datetime(2025, 1, 10, tzinfo=UTC),
    )
    assert render_line(updated) == "- (2025-01-10, 事件) 会议改到周五，置信度1.00（已更新，取代旧记录）"


def test_pack_frames_the_lines_and_counts_tokens() -> None:
    packed = pack([PackItem(PREF_ZH, True)], budget=2000)
    assert packed.text == "[相关记忆]\n- (2024-03-15, 偏好) 用户偏好CSV格式导出，置信度0.92\n[/相关记忆]"
    assert packed.tokens == estimate_tokens("[相关记忆]") + estimate_tokens("[/相关记忆]") + estimate_tokens(
        render_line(PREF_ZH)
    )
    assert packed.packed_ids == {"zh"}


def test_pack_puts_directly_relevant_first_then_strong_preferences_and_respects_the_budget() -> None:
    weak = memory(id="weak", content="用户喜欢喝茶", kind=Kind.FACT, confidence=0.75)
    strong_pref = memory(id="pref", content="用户偏好靠窗座位", confidence=0.95)
    relevant = memory(id="rel", content="会议室在A栋", kind=Kind.FACT)
    items = [PackItem(weak, False), PackItem(strong_pref, False), PackItem(relevant, True)]
    full = pack(items, budget=2000)
    assert full.text.splitlines()[1].endswith("会议室在A栋，置信度0.92")
    assert full.text.splitlines()[2].startswith("- (2024-03-15, 偏好) 用户偏好靠窗座位")
    frame = estimate_tokens("[相关记忆]") + estimate_tokens("[/相关记忆]")
    tight = pack(items, budget=frame + estimate_tokens(render_line(relevant)))
    assert tight.packed_ids == {"rel"}
    assert pack(items, budget=frame).text == ""
    assert pack([], budget=100).packed_ids == frozenset()
