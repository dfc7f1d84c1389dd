"""Dedupe and supersede: what a new memory does to the active memories already there.

Only memories with the same subject, kind and tier are compared (an episode never replaces a habit),
and never two that name different things (`ConflictPolicy.distinct_keys`: an order id, a session).
For each such existing memory, the first rule that holds, in this order:

1. SUPERSEDE, structured: the same non-empty `intent` and an entity key both carry with different
   values ({"date": "2026-12-02"} then {"date": "2026-12-04"}). Which keys count is
   `ConflictPolicy.value_keys` (None: every key).
2. MERGE, exact: the same normalised content (NFKC, case folded, white space and punctuation
   dropped), so duplicates merge without embeddings.
3. MERGE, near-identical: similarity above `merge_above` (0.95) and no differing value token.
4. SUPERSEDE, similar: similarity at least `supersede_from` (0.9) and the contents differ in a value
   token: a number, a date word (周五, Friday), a place (A栋), or a name (CSV, Excel, Berlin).
5. otherwise nothing: the memory is NEW with respect to this one.

Across existing memories, the strongest rule wins (lower number first), then the higher similarity,
then the earlier in the given order. Every resolution carries its reason.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from hindsight_server.domain.errors import InvalidArgument
from hindsight_server.domain.language import language
from hindsight_server.domain.model import Entities, JsonValue, Kind, Memory, MemoryDraft, Tier
from hindsight_server.domain.numerals import parse_number

__all__ = [
    "Action",
    "ConflictPolicy",
    "Existing",
    "NewMemory",
    "Resolution",
    "content_key",
    "resolve",
    "value_tokens",
]


class Action(StrEnum):
    NEW = "new"
    MERGE = "merge"  # count + 1, last seen now: no new row
    SUPERSEDE = "supersede"  # the target becomes superseded; the new memory points to it


@dataclass(frozen=True, slots=True)
class ConflictPolicy:
    merge_above: float = 0.95  # DESIGN: similarity > 0.95 merges
    supersede_from: float = 0.9  # DESIGN: > 0.9 with a different value supersedes
    value_keys: frozenset[str] | None = None  # entity keys whose change makes a new version; None: all
    # Entities that name the thing itself: differing, the memories are two things (two orders, two
    # sessions' episodes), never two versions of one.
    distinct_keys: frozenset[str] = frozenset(
        {"id", "booking_id", "order_id", "ticket_id", "reservation_id", "session_id", "pattern"}
    )

    def __post_init__(self) -> None:
        for name, value in (("merge_above", self.merge_above), ("supersede_from", self.supersede_from)):
            if not 0.0 <= value <= 1.0:
                raise InvalidArgument(name, "must be between 0 and 1")
        if self.supersede_from > self.merge_above:
            raise InvalidArgument("supersede_from", "must not be above merge_above")


@dataclass(frozen=True, slots=True)
class NewMemory:
    subject: str
    kind: Kind
    tier: Tier
    content: str
    intent: str = ""
    entities: Entities = field(default_factory=dict)

    @classmethod
    def of(cls, draft: MemoryDraft) -> NewMemory:
        return cls(draft.subject, draft.kind, draft.tier, draft.content, draft.intent, draft.entities)


@dataclass(frozen=True, slots=True)
class Existing:
    id: str
    subject: str
    kind: Kind
    tier: Tier
    content: str
    intent: str = ""
    entities: Entities = field(default_factory=dict)
    similarity: float | None = None  # cosine to the new memory; None when either has no embedding

    @classmethod
    def of(cls, memory: Memory, similarity: float | None = None) -> Existing:
        return cls(
            memory.id,
            memory.subject,
            memory.kind,
            memory.tier,
            memory.content,
            memory.intent,
            memory.entities,
            similarity,
        )


@dataclass(frozen=True, slots=True)
class Resolution:
    action: Action
    target_id: str | None  # the memory merged into or superseded; None for NEW
    reason: str
    changed: tuple[tuple[str, JsonValue, JsonValue], ...] = ()  # (entity key, old, new) when structured


_DROPPED = re.compile(r"[\W_]+")


def content_key(text: str) -> str:
    """The content as exact-duplicate detection sees it: NFKC (full-width to half-width), case folded,
    without white space or punctuation. "Uses CSV." and "ｕｓｅｓ  ｃｓｖ" have the same key."""
    return _DROPPED.sub("", unicodedata.normalize("NFKC", text).casefold())


_NUMBER = r"[0-9]+(?:[.:/-][0-9]+)*|[零〇一二两三四五六七八九十百千万]+"
_EN_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_DATE_WORD = (
    rf"(?:周|星期|礼拜)[一二三四五六日天]|[春夏秋冬][天季]|\b(?:{'|'.join(_EN_WEEKDAYS)}|"
    r"january|february|march|april|june|july|august|september|october|november|december)\b"
)
_ZH_TOKENS = re.compile(rf"{_DATE_WORD}|{_NUMBER}|[a-z][a-z0-9+#.-]*", re.IGNORECASE)
_EN_TOKENS = re.compile(rf"{_DATE_WORD}|[0-9]+(?:[.:/-][0-9]+)*", re.IGNORECASE)
_EN_PROPER = re.compile(r"(?<![.!?]\s)(?<!^)\b[A-Z][A-Za-z0-9+#-]*")


_WEEKDAYS = {name: index for index, name in enumerate(_EN_WEEKDAYS)}
_ZH_WEEKDAYS = {char: index for index, char in enumerate("一二三四五六日")} | {"天": 6}


def _canonical(token: str) -> str:
    """One spelling per value: 十 and 10 are "10"; 周五, 星期五 and Friday are "weekday:4"."""
    key = token.casefold()
    if key in _WEEKDAYS:
        return f"weekday:{_WEEKDAYS[key]}"
    if key[-1] in _ZH_WEEKDAYS and key[:-1] in ("周", "星期", "礼拜"):
        return f"weekday:{_ZH_WEEKDAYS[key[-1]]}"
    number = parse_number(key)
    return str(number) if number is not None else key


def value_tokens(text: str) -> frozenset[str]:
    """The words in a content that carry a value, one spelling each: numbers (Chinese ones too), date
    words, and names: Latin words inside Chinese text (CSV, A栋's A), capitalised words inside English."""
    clean = unicodedata.normalize("NFKC", text).strip()
    if language(clean) == "zh":
        return frozenset(_canonical(token) for token in _ZH_TOKENS.findall(clean))
    tokens = {_canonical(token) for token in _EN_TOKENS.findall(clean)}
    tokens.update(_canonical(token) for token in _EN_PROPER.findall(clean) if token != "I")
    return frozenset(tokens)


def _same(a: JsonValue, b: JsonValue) -> bool:
    if isinstance(a, str) and isinstance(b, str):
        return content_key(a) == content_key(b)
    if isinstance(a, bool) or isinstance(b, bool):
        return a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return float(a) == float(b)
    return str(a) == str(b) if not isinstance(a, list | dict) else a == b


def _distinct(new: NewMemory, old: Existing, policy: ConflictPolicy) -> bool:
    """Both name the thing they are about (an order id, a session) and the names differ."""
    return any(
        key in old.entities and not _same(new.entities[key], old.entities[key])
        for key in policy.distinct_keys
        if key in new.entities
    )


def _changed_values(
    new: NewMemory, old: Existing, policy: ConflictPolicy
) -> tuple[tuple[str, JsonValue, JsonValue], ...]:
    if not new.intent or new.intent != old.intent:
        return ()
    shared = [key for key in new.entities if key in old.entities]
    return tuple(
        (key, old.entities[key], new.entities[key])
        for key in shared
        if key not in policy.distinct_keys
        and (policy.value_keys is None or key in policy.value_keys)
        and not _same(new.entities[key], old.entities[key])
    )


def _rule(new: NewMemory, old: Existing, policy: ConflictPolicy) -> tuple[int, Resolution] | None:
    """The first rule of the module's list that holds, with its number (lower wins), or None."""
    if _distinct(new, old, policy):
        return None
    changed = _changed_values(new, old, policy)
    if changed:
        keys = ", ".join(key for key, _, _ in changed)
        reason = f"same intent {new.intent!r}, new value for {keys}"
        return 1, Resolution(Action.SUPERSEDE, old.id, reason, changed)
    if content_key(new.content) == content_key(old.content):
        return 2, Resolution(Action.MERGE, old.id, "same content")
    if old.similarity is None or old.similarity < policy.supersede_from:
        return None
    differing = sorted(value_tokens(new.content) ^ value_tokens(old.content))
    if not differing and old.similarity > policy.merge_above:
        return 3, Resolution(Action.MERGE, old.id, f"near-identical (similarity {old.similarity:.3f})")
    if differing:
        reason = f"similar (similarity {old.similarity:.3f}) but a value differs: {', '.join(differing[:6])}"
        return 4, Resolution(Action.SUPERSEDE, old.id, reason)
    return None


def resolve(new: NewMemory, existing: Sequence[Existing], policy: ConflictPolicy | None = None) -> Resolution:
    """MERGE into, SUPERSEDE, or NEW (see the module's rules); pure and explained."""
    policy = policy or ConflictPolicy()
    found: list[tuple[int, float, int, Resolution]] = []
    for position, old in enumerate(existing):
        if (old.subject, old.kind, old.tier) != (new.subject, new.kind, new.tier):
            continue
        ruled = _rule(new, old, policy)
        if ruled is not None:
            found.append((ruled[0], -(old.similarity or 0.0), position, ruled[1]))
    if not found:
        return Resolution(Action.NEW, None, "no active memory with the same subject, kind and tier matches")
    return min(found, key=lambda item: item[:3])[3]
