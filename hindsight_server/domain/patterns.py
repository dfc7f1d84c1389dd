"""Episodic -> semantic: habits that repeat across a user's episodes ("usually books building A").

A pattern is a (subject, intent, entity key, value) that at least `min_episodes` (3) episodes share,
in at least `min_share` (half) of that subject's episodes with that intent, so "usually" holds. Values
compare case- and width-insensitively; a list entity (participants) counts each of its items once.
Only `keys` are looked at (default: the habitual ones: part of day, time, people, building, floor,
room, participants; a calendar date is not a habit).

Deterministic and idempotent: the same episodes give the same patterns in the same order, each with a
stable `key` (a hash of subject, intent, entity and value) to use as the semantic memory's idempotency
key, and its sources sorted. Confidence = share x support / (support + 1): 3 of 3 episodes give 0.75,
5 of 5 give 0.83, 3 of 6 give 0.38 (pending).
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter, defaultdict
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from hindsight_server.domain.conflicts import content_key
from hindsight_server.domain.errors import InvalidArgument
from hindsight_server.domain.intents import intent_by_key
from hindsight_server.domain.language import language
from hindsight_server.domain.model import Entities, JsonValue, Kind, Memory, MemoryDraft, Tier
from hindsight_server.domain.slots import describe

__all__ = ["HABIT_KEYS", "EpisodeFacts", "Pattern", "find_patterns"]

HABIT_KEYS = ("part_of_day", "time", "people", "building", "floor", "room", "participants")


@dataclass(frozen=True, slots=True)
class EpisodeFacts:
    id: str
    subject: str
    intent: str
    entities: Entities
    occurred_at: datetime
    language: str = "en"

    @classmethod
    def of(cls, memory: Memory) -> EpisodeFacts:
        """An episodic memory as pattern finding reads it: it happened at valid_from, else when recorded."""
        when = memory.valid_from or memory.created_at
        return cls(memory.id, memory.subject, memory.intent, memory.entities, when, language(memory.content))


@dataclass(frozen=True, slots=True)
class Pattern:
    key: str  # stable: the semantic memory's idempotency key
    subject: str
    intent: str
    entity: str
    value: JsonValue  # as most sources wrote it
    source_ids: tuple[str, ...]  # sorted
    share: float  # of the subject's episodes with this intent
    confidence: float
    content: str  # "通常预订A栋" / "usually books building A"
    language: str
    first_seen: datetime
    last_seen: datetime
    entities: dict[str, JsonValue] = field(default_factory=dict)  # {entity: value}

    def draft(self, tenant_id: str) -> MemoryDraft:
        """The semantic memory to write: a preference whose entities link back to its sources and name
        the pattern (a `distinct_keys` entity, so two habits never supersede each other). The idempotency
        key is the pattern's and its support, so more sources make a new version, a rerun nothing."""
        links: dict[str, JsonValue] = {"pattern": self.key, "source_ids": list(self.source_ids)}
        return MemoryDraft(
            tenant_id=tenant_id,
            content=self.content,
            tier=Tier.SEMANTIC,
            kind=Kind.PREFERENCE,
            subject=self.subject,
            intent=self.intent,
            entities=self.entities | links,
            confidence=self.confidence,
            valid_from=self.first_seen,
            idempotency_key=f"{self.key}:{len(self.source_ids)}",
        )


def _values(value: JsonValue) -> list[JsonValue]:
    items = value if isinstance(value, list) else [value]
    return [item for item in items if isinstance(item, str | int | float) and not isinstance(item, bool)]


def _norm(value: JsonValue) -> str:
    return content_key(str(value))


def _stable_key(subject: str, intent: str, entity: str, value: str) -> str:
    digest = hashlib.sha256(json.dumps([subject, intent, entity, value], ensure_ascii=False).encode())
    return "pattern-" + digest.hexdigest()[:32]


def _content(intent: str, entity: str, value: JsonValue, lang: str) -> str:
    known = intent_by_key(intent)
    zh = lang == "zh"
    verb = (known.verb_zh if zh else known.verb_en) if known else ("选择" if zh else "chooses")
    shown = describe(entity, [value] if entity == "participants" else value, lang)
    if zh:
        if entity in ("part_of_day", "time"):
            return f"通常在{shown}{verb}"
        if entity == "people":
            return f"通常为{shown}{verb}"
        return f"通常{shown}{verb}" if entity == "participants" else f"通常{verb}{shown}"
    if entity == "part_of_day":
        return f"usually {verb} in the {shown}"
    if entity == "time":
        return f"usually {verb} at {shown}"
    if entity == "people":
        return f"usually {verb} for {shown}"
    return f"usually {verb} {shown}"


def find_patterns(
    episodes: Sequence[EpisodeFacts],
    *,
    min_episodes: int = 3,
    min_share: float = 0.5,
    keys: Collection[str] = HABIT_KEYS,
) -> list[Pattern]:
    """The habits in `episodes` (see the module), ordered by subject, intent, entity, then value."""
    if min_episodes < 1:
        raise InvalidArgument("min_episodes", "must be at least 1")
    if not 0.0 < min_share <= 1.0:
        raise InvalidArgument("min_share", "must be in (0, 1]")
    totals: Counter[tuple[str, str]] = Counter()
    groups: defaultdict[tuple[str, str, str, str], dict[str, EpisodeFacts]] = defaultdict(dict)
    spellings: defaultdict[tuple[str, str, str, str], Counter[str]] = defaultdict(Counter)
    originals: dict[tuple[tuple[str, str, str, str], str], JsonValue] = {}
    for episode in episodes:
        if not episode.intent:
            continue
        totals[(episode.subject, episode.intent)] += 1
        for entity in sorted(keys):
            if entity not in episode.entities:
                continue
            for value in _values(episode.entities[entity]):
                group = (episode.subject, episode.intent, entity, _norm(value))
                groups[group][episode.id] = episode
                spellings[group][json.dumps(value, ensure_ascii=False)] += 1
                originals[(group, json.dumps(value, ensure_ascii=False))] = value
    patterns = []
    for group in sorted(groups):
        sources = groups[group]
        subject, intent, entity, normalised = group
        support = len(sources)
        share = support / totals[(subject, intent)]
        if support < min_episodes or share < min_share:
            continue
        spelled = min(spellings[group].items(), key=lambda item: (-item[1], item[0]))[0]
        value = originals[(group, spelled)]
        languages = Counter(source.language for source in sources.values())
        lang = min(languages.items(), key=lambda item: (-item[1], item[0]))[0]
        times = [source.occurred_at for source in sources.values()]
        patterns.append(
            Pattern(
                key=_stable_key(subject, intent, entity, normalised),
                subject=subject,
                intent=intent,
                entity=entity,
                value=value,
                source_ids=tuple(sorted(sources)),
                share=share,
                confidence=round(share * support / (support + 1), 4),
                content=_content(intent, entity, value, lang),
                language=lang,
                first_seen=min(times),
                last_seen=max(times),
                entities={entity: value},
            )
        )
    return patterns
