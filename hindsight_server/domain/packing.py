"""Token-budget packing and the ready-to-inject text (the `[相关记忆]` ... `[/相关记忆]` frame).

Stored content cannot forge the frame: each memory is one line ("- (date, kind) content ..."), its
line breaks and other control characters turned into spaces, invisible format characters (zero-width,
bidirectional overrides) dropped, and its square brackets written as full-width ones, so no memory can
close the frame, open a new one, or start a line of its own that looks like an instruction or another
memory. What a memory says inside its line is still the words someone stored: the frame tells the model
where remembered text begins and ends, not that the text is true or safe to follow."""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

from hindsight_server.domain.language import language
from hindsight_server.domain.model import Kind, Memory

_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3040-\u30ff\uac00-\ud7af]")

_KIND_ZH = {
    Kind.FACT: "事实",
    Kind.PREFERENCE: "偏好",
    Kind.EVENT: "事件",
    Kind.TASK: "任务",
    Kind.SUMMARY: "摘要",
    Kind.INSTRUCTION: "指令",
}
_FRAME = {"zh": ("[相关记忆]", "[/相关记忆]"), "en": ("[Relevant memories]", "[/Relevant memories]")}
# What counts as a strong preference for packing priority (docs/design.md: preferences above 0.8).
STRONG_PREFERENCE = 0.8


def estimate_tokens(text: str) -> int:
    """A tokenizer-free estimate that errs high: one token per CJK character, one per ~4 other chars."""
    cjk = len(_CJK.findall(text))
    return cjk + math.ceil((len(text) - cjk) / 4)


_BRACKETS = str.maketrans({"[": "［", "]": "］"})


def inline(content: str) -> str:
    """A memory's content as one line of the frame (see the module's docstring)."""
    if content.isprintable():  # no control, format or separator character (most memories): C speed
        return content.translate(_BRACKETS)
    kept = []
    for char in content:
        category = unicodedata.category(char)
        if category == "Cf":
            continue
        kept.append(" " if category in ("Cc", "Zl", "Zp") else char)
    return "".join(kept).translate(_BRACKETS)


def render_line(memory: Memory) -> str:
    day = (memory.valid_from or memory.created_at).date().isoformat()
    content = inline(memory.content)
    if language(memory.content) == "zh":
        note = "（已更新，取代旧记录）" if memory.supersedes else ""
        return f"- ({day}, {_KIND_ZH[memory.kind]}) {content}，置信度{memory.confidence:.2f}{note}"
    note = " (updated; replaces an earlier memory)" if memory.supersedes else ""
    return f"- ({day}, {memory.kind.value}) {content} (confidence {memory.confidence:.2f}){note}"


@dataclass(frozen=True, slots=True)
class PackItem:
    memory: Memory
    directly_relevant: bool


@dataclass(frozen=True, slots=True)
class Packed:
    text: str
    tokens: int
    packed_ids: frozenset[str]


def _priority(item: PackItem) -> int:
    if item.directly_relevant:
        return 0
    is_strong_preference = item.memory.kind is Kind.PREFERENCE and item.memory.confidence > STRONG_PREFERENCE
    return 1 if is_strong_preference else 2


def pack(items: Sequence[PackItem], budget: int) -> Packed:
    """Fills the budget in priority order: directly relevant, then strong preferences, then the rest,
    each group in the given (ranked) order. An item that does not fit is skipped, a smaller one may."""
    if not items:
        return Packed("", 0, frozenset())
    ordered = sorted(items, key=_priority)  # stable: keeps the ranking inside each group
    lines = [(item.memory, render_line(item.memory)) for item in ordered]
    lang = language(" ".join(line for _, line in lines))
    opening, closing = _FRAME[lang]
    used = estimate_tokens(opening) + estimate_tokens(closing)
    chosen: list[tuple[Memory, str]] = []
    for memory, line in lines:
        cost = estimate_tokens(line)
        if used + cost <= budget:
            chosen.append((memory, line))
            used += cost
    if not chosen:
        return Packed("", 0, frozenset())
    text = "\n".join([opening, *(line for _, line in chosen), closing])
    return Packed(text, used, frozenset(memory.id for memory, _ in chosen))
