"""The components of a recalled memory's final score, each in [0, 1], and their weighted sum."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta

from hindsight_server.domain.model import Channel, ChannelHit, Entities, JsonValue, ScoreWeights, Tier

# DESIGN: working > episodic > semantic. The current conversation outranks older memory at equal relevance.
TIER_PRIORITY: Mapping[Tier, float] = {Tier.WORKING: 1.0, Tier.EPISODIC: 0.6, Tier.SEMANTIC: 0.3}


def recency(recorded_at: datetime, now: datetime, half_life: timedelta) -> float:
    """Exponential decay: 1 now, 0.5 one half-life ago. Future timestamps count as now."""
    age = max((now - recorded_at).total_seconds(), 0.0)
    return float(0.5 ** (age / half_life.total_seconds()))


def _same(a: JsonValue, b: JsonValue) -> bool:
    if isinstance(a, str) and isinstance(b, str):
        return a.strip().casefold() == b.strip().casefold()
    return a == b


def entity_match(wanted: Entities, stored: Entities) -> float:
    """Share of the wanted entities the memory carries with the same value (0 when none are wanted)."""
    if not wanted:
        return 0.0
    matched = sum(1 for key, value in wanted.items() if key in stored and _same(value, stored[key]))
    return matched / len(wanted)


def similarity(channels: Mapping[Channel, ChannelHit], lexical_top: float) -> float:
    """How well the memory matches the query's meaning: the vector channel's cosine when it saw the
    memory, else its lexical rank relative to the best lexical hit."""
    if Channel.VECTOR in channels:
        return max(0.0, min(1.0, channels[Channel.VECTOR].score))
    if Channel.LEXICAL in channels and lexical_top > 0:
        return min(1.0, channels[Channel.LEXICAL].score / lexical_top)
    return 0.0


def weighted(
    weights: ScoreWeights, *, similarity: float, recency: float, tier_priority: float, entity_match: float
) -> float:
    w = weights.normalised()
    return (
        w.similarity * similarity
        + w.recency * recency
        + w.tier_priority * tier_priority
        + w.entity_match * entity_match
    )
