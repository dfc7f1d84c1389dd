"""The components of a recalled memory's final score, each in [0, 1], and their weighted sum."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta

from hindsight_server.domain.model import Entities, JsonValue, ScoreWeights, Tier, TimeWindow

# docs/design.md: working > episodic > semantic. The current conversation outranks older memory at equal
# relevance.
TIER_PRIORITY: Mapping[Tier, float] = {Tier.WORKING: 1.0, Tier.EPISODIC: 0.6, Tier.SEMANTIC: 0.3}


def recency(recorded_at: datetime, now: datetime, half_life: timedelta) -> float:
    """Exponential decay: 1 now, 0.5 one half-life ago. Future timestamps count as now."""
    age = max((now - recorded_at).total_seconds(), 0.0)
    return float(0.5 ** (age / half_life.total_seconds()))


def _same(a: JsonValue, b: JsonValue) -> bool:
    if isinstance(a, str) and isinstance(b, str):
        return a.strip().casefold() == b.strip().casefold()
    return a == b


def shares_an_entity(wanted: Entities, stored: Entities) -> bool:
    """The memory carries at least one of the wanted entities with the same value."""
    return any(key in stored and _same(value, stored[key]) for key, value in wanted.items())


def entity_match(
    wanted: Entities, stored: Entities, window: TimeWindow | None = None, when: datetime | None = None
) -> float:
    """Share of the query's structure the memory matches: each wanted entity (same value), and the time
    window the query named, if any (`when` inside it). 0 when the query wants nothing structured."""
    if not wanted and (window is None or when is None):
        return 0.0  # most recalls: nothing structured asked
    checks = [key in stored and _same(value, stored[key]) for key, value in wanted.items()]
    if window is not None and when is not None:
        checks.append(window.holds(when))
    return sum(checks) / len(checks) if checks else 0.0


def matches_query(lexical: float | None, dense: float | None, min_similarity: float) -> bool:
    """Absolute relevance, unlike the relative similarity: a BM25 match on a term that is not common in
    the tenant, or a cosine at least min_similarity (calibrated for the embedding model)."""
    return (lexical is not None and lexical > 0) or (dense is not None and dense >= min_similarity)


def _standardised(values: Sequence[float], *, missing: bool = False) -> list[float]:
    """z-scores; with `missing`, NaN values are left out of the mean and spread and stay NaN."""
    known = [v for v in values if not math.isnan(v)] if missing else values
    mean = sum(known) / len(known)
    spread = (sum((v - mean) ** 2 for v in known) / len(known)) ** 0.5
    # Equal values up to rounding (a mean of deviations that cancel) have no spread to divide by.
    return [0.0 if spread < 1e-12 else (v - mean) / spread for v in values]


def with_context(
    mix: Sequence[float], neighbours: Sequence[Sequence[tuple[int, float]]], weight: float
) -> list[float]:
    """Adds to each candidate the best of its adjacent turns' scores, each times its edge's share
    (neighbours: (index into mix, share) pairs). In a conversation the answer often sits next to the
    turn that matches the question (LoCoMo dev: R@5 +4 with weight 0.5). A share above `weight` lifts a
    score above the mean only: a neighbour that matched badly costs no more than at `weight`. A
    candidate that borrows from no neighbour borrows `weight` x the lowest score."""
    if not mix:
        return []
    floor = min(mix)
    return [
        score + max((_borrowed(mix[n], share, weight) for n, share in around), default=weight * floor)
        for score, around in zip(mix, neighbours, strict=True)
    ]


def _borrowed(score: float, share: float, weight: float) -> float:
    """A neighbour's score times the share lent; below the mean, never more than `weight` of it."""
    return share * score if score >= 0 else min(share, weight) * score


def relative_to_best(mix: Sequence[float]) -> list[float]:
    """exp(mix - best): 1 for the best candidate, e^-1 one standard deviation below it. Recency and tier
    can reorder near-ties but not a candidate several deviations behind; a min-max would pin the
    weakest to 0 (gating it out), a logistic squash let recency reorder distant ones (LoCoMo R@5 52.5
    against 56.8 with this)."""
    if not mix:
        return []
    best = max(mix)
    return [math.exp(v - best) for v in mix]


def hybrid_mix(
    lexical: Sequence[float | None],
    dense: Sequence[float | None],
    lexical_weight: float,
    companion: Sequence[float | None] = (),
) -> list[float]:
    """lexical_weight x z(BM25) + (1 - lexical_weight) x z(cosine) over the candidates (see
    hybrid_similarity). With `companion` cosines (a second model's, parallel to `dense`), a candidate's
    cosine deviation is the mean of its two models' deviations where it has both, standardised again:
    two models that see a language differently rank better together than either (MADial dev, dense
    R@5 58.5 and 60.9 alone, 66.2 together)."""
    if not lexical:
        return []
    bm25 = _standardised([0.0 if v is None else v for v in lexical])
    present = [v for v in dense if v is not None]
    if not present:
        return bm25
    cosine = _standardised([min(present) if v is None else v for v in dense])
    if any(v is not None for v in companion):
        second = _standardised([math.nan if v is None else v for v in companion], missing=True)
        cosine = _standardised(
            [c if math.isnan(s) else (c + s) / 2 for c, s in zip(cosine, second, strict=True)]
        )
    if all(v is None for v in lexical):
        return cosine
    return [lexical_weight * b + (1 - lexical_weight) * c for b, c in zip(bm25, cosine, strict=True)]


def reranked(similarity: float, logit: float, weight: float) -> float:
    """Blends a cross-encoder's logit (squashed to a probability) into the similarity."""
    return (1 - weight) * similarity + weight / (1 + math.exp(-logit))


def weighted(
    weights: ScoreWeights, *, similarity: float, recency: float, tier_priority: float, entity_match: float
) -> float:
    """The final score: the weighted components of docs/design.md, gated by similarity.

    similarity x (w_sim + w_rec*recency + w_tier*tier + w_ent*entity), weights normalised to sum 1. Recency,
    tier and entity matches reorder memories that match the query; they never lift one that does not.
    Measured on LoCoMo dev (BENCHMARKS.md): the plain weighted sum let recent but unrelated turns
    outrank the evidence (R@5 35.3), the gated form keeps relevance first (R@5 53.7).
    """
    return gated(
        weights.normalised(),
        similarity=similarity,
        recency=recency,
        tier_priority=tier_priority,
        entity_match=entity_match,
    )


def gated(
    w: ScoreWeights, *, similarity: float, recency: float, tier_priority: float, entity_match: float
) -> float:
    """`weighted` with the weights `w` normalised already (a ranking normalises them once for every
    candidate)."""
    return similarity * (
        w.similarity + w.recency * recency + w.tier_priority * tier_priority + w.entity_match * entity_match
    )
