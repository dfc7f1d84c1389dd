"""The components of a recalled memory's final score, each in [0, 1], and their weighted sum."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta

from hindsight_server.domain.model import Entities, JsonValue, ScoreWeights, Tier, TimeWindow

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


def entity_match(
    wanted: Entities, stored: Entities, window: TimeWindow | None = None, when: datetime | None = None
) -> float:
    """Share of the query's structure the memory matches: each wanted entity (same value), and the time
    window the query named, if any (`when` inside it). 0 when the query wants nothing structured."""
    checks = [key in stored and _same(value, stored[key]) for key, value in wanted.items()]
    if window is not None and when is not None:
        checks.append(
            (window.start is None or when >= window.start) and (window.end is None or when < window.end)
        )
    return sum(checks) / len(checks) if checks else 0.0


def matches_query(lexical: float | None, dense: float | None, min_similarity: float) -> bool:
    """Absolute relevance, unlike the relative similarity: a BM25 match on a term that is not common in
    the tenant, or a cosine at least min_similarity (calibrated for the embedding model)."""
    return (lexical is not None and lexical > 0) or (dense is not None and dense >= min_similarity)


def _min_max(values: Sequence[float | None]) -> list[float]:
    """Cosines have an offset (unrelated texts are rarely at 0): spread them over [0, 1]."""
    present = [v for v in values if v is not None]
    if not present:
        return [0.0] * len(values)
    low, high = min(present), max(present)
    span = high - low
    return [0.0 if v is None else (1.0 if span == 0 else (v - low) / span) for v in values]


def _to_best(values: Sequence[float | None]) -> list[float]:
    """BM25 is 0 without a match: relative to the best, so a weak match stays above none."""
    best = max((v for v in values if v is not None), default=0.0)
    return [0.0 if v is None or best <= 0 else v / best for v in values]


def hybrid_similarity(
    lexical: Sequence[float | None], dense: Sequence[float | None], lexical_weight: float
) -> list[float]:
    """How well each candidate matches the query, in [0, 1]: its BM25 score relative to the best and its
    cosine min-max normalised over the candidates (the two scales are not comparable), then mixed.
    None: the signal is missing for that candidate (no lexical match, no embedding yet)."""
    lexical_norm = _to_best(lexical)
    dense_norm = _min_max(dense)
    if all(d is None for d in dense):
        return lexical_norm
    if all(lex is None for lex in lexical):
        return dense_norm
    return [
        lexical_weight * lx + (1 - lexical_weight) * dn
        for lx, dn in zip(lexical_norm, dense_norm, strict=True)
    ]


def weighted(
    weights: ScoreWeights, *, similarity: float, recency: float, tier_priority: float, entity_match: float
) -> float:
    """The final score: DESIGN's weighted components, gated by similarity.

    similarity x (w_sim + w_rec*recency + w_tier*tier + w_ent*entity), weights normalised to sum 1. Recency,
    tier and entity matches reorder memories that match the query; they never lift one that does not.
    Measured on LoCoMo dev (BENCHMARKS.md): the plain weighted sum let recent but unrelated turns
    outrank the evidence (R@5 35.3), the gated form keeps relevance first (R@5 53.7).
    """
    w = weights.normalised()
    return similarity * (
        w.similarity + w.recency * recency + w.tier_priority * tier_priority + w.entity_match * entity_match
    )
