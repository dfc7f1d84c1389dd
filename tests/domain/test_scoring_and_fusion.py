import math
from datetime import UTC, datetime, timedelta

import pytest

from hindsight_server.domain import scoring
from hindsight_server.domain.fusion import reciprocal_rank_fusion
from hindsight_server.domain.model import Channel, ChannelHit, ChannelResult, Entities, ScoreWeights, Tier
from tests.domain.builders import memory

NOW = datetime(2025, 1, 15, 12, tzinfo=UTC)
HALF_LIFE = timedelta(days=30)


@pytest.mark.parametrize(
    ("age", "expected"),
    [(timedelta(0), 1.0), (timedelta(days=30), 0.5), (timedelta(days=60), 0.25), (timedelta(days=-3), 1.0)],
)
def test_recency_halves_every_half_life(age: timedelta, expected: float) -> None:
    assert scoring.recency(NOW - age, NOW, HALF_LIFE) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("wanted", "stored", "expected"),
    [
        ({}, {"building": "A"}, 0.0),
        ({"building": "A"}, {"building": "a "}, 1.0),
        ({"building": "A", "date": "2025-01-08"}, {"building": "A"}, 0.5),
        ({"capacity": 10}, {"capacity": 10}, 1.0),
        ({"capacity": 10}, {"capacity": "10"}, 0.0),
    ],
)
def test_entity_match_is_the_share_of_wanted_entities(
    wanted: Entities, stored: Entities, expected: float
) -> None:
    assert scoring.entity_match(wanted, stored) == pytest.approx(expected)


def test_tier_priority_orders_working_over_episodic_over_semantic() -> None:
    p = scoring.TIER_PRIORITY
    assert p[Tier.WORKING] > p[Tier.EPISODIC] > p[Tier.SEMANTIC]


def test_weighted_score_normalises_weights() -> None:
    doubled = ScoreWeights(0.8, 0.6, 0.4, 0.2)
    design = ScoreWeights(0.4, 0.3, 0.2, 0.1)
    parts = {"similarity": 0.9, "recency": 0.5, "tier_priority": 0.3, "entity_match": 1.0}
    assert scoring.weighted(doubled, **parts) == pytest.approx(scoring.weighted(design, **parts))
    assert scoring.weighted(design, **parts) == pytest.approx(0.9 * (0.4 + 0.3 * 0.5 + 0.2 * 0.3 + 0.1 * 1.0))


def test_weighted_score_never_lifts_an_unrelated_memory() -> None:
    design = ScoreWeights(0.4, 0.3, 0.2, 0.1)
    unrelated_but_fresh = scoring.weighted(
        design, similarity=0.0, recency=1.0, tier_priority=1.0, entity_match=1.0
    )
    related_but_old = scoring.weighted(
        design, similarity=0.6, recency=0.0, tier_priority=0.3, entity_match=0.0
    )
    assert unrelated_but_fresh == 0.0 < related_but_old


def _behind(deviations: float) -> float:
    return math.exp(-deviations)


Z = 1.5**0.5  # the z-score of the extremes of three evenly spread values


@pytest.mark.parametrize(
    ("lexical", "dense", "expected"),
    [
        # each signal standardised over the candidates, mixed half and half, relative to the best
        ([4.0, 2.0, None], [0.2, 0.6, 0.4], [_behind(Z / 2), 1.0, _behind(Z)]),
        # no inference tier: BM25 alone (no lexical match counts as BM25 0)
        ([4.0, 2.0, None], [None, None, None], [1.0, _behind(Z), _behind(2 * Z)]),
        # no lexical match at all: cosine alone
        ([None, None], [0.3, 0.5], [_behind(2), 1.0]),
        # one candidate: the best by definition
        ([3.0], [0.4], [1.0]),
        ([], [], []),
    ],
)
def test_similarity_from_the_hybrid_mix(
    lexical: list[float | None], dense: list[float | None], expected: list[float]
) -> None:
    similarities = scoring.relative_to_best(scoring.hybrid_mix(lexical, dense, lexical_weight=0.5))
    assert similarities == pytest.approx(expected)


@pytest.mark.parametrize(
    ("dense", "companion", "expected"),
    [
        # no companion cosine at all: the first model's alone (as without the argument)
        ([0.2, 0.6, 0.4], [None, None, None], [-Z, Z, 0.0]),
        ([0.2, 0.6, 0.4], [], [-Z, Z, 0.0]),
        # two models that agree: the same order and deviations
        ([0.2, 0.6, 0.4], [0.7, 0.9, 0.8], [-Z, Z, 0.0]),
        # they disagree completely: no candidate is ahead of another
        ([0.2, 0.6, 0.4], [0.6, 0.2, 0.4], [0.0, 0.0, 0.0]),
        # each puts a different one first: the one second by both comes first on their mean
        ([0.2, 0.6, 0.5], [0.6, 0.2, 0.5], [-(0.5**0.5), -(0.5**0.5), 2**0.5]),
        # a candidate without a companion vector keeps its first model's deviation, then all are
        # standardised again
        ([0.2, 0.6, 0.4], [0.7, 0.9, None], [-Z, Z, 0.0]),
    ],
)
def test_a_companion_models_cosines_join_the_first_models_deviation_for_deviation(
    dense: list[float | None], companion: list[float | None], expected: list[float]
) -> None:
    mix = scoring.hybrid_mix([None] * len(dense), dense, lexical_weight=0.5, companion=companion)
    assert mix == pytest.approx(expected, abs=1e-6)


def test_hybrid_similarity_keeps_the_order_of_the_mix() -> None:
    mix = scoring.hybrid_mix([5.0, 1.0, None, 3.0], [0.5, 0.6, 0.1, None], lexical_weight=0.3)
    similarities = scoring.relative_to_best(mix)
    assert all(0 < s <= 1 for s in similarities)
    assert similarities[0] > similarities[1] > similarities[3] > similarities[2]


def test_rrf_rewards_agreement_between_channels_and_dedupes() -> None:
    a, b, c = memory(id="a"), memory(id="b"), memory(id="c")
    results = [
        ChannelResult(Channel.LEXICAL, [ChannelHit(a, 1, 0.9), ChannelHit(b, 2, 0.5)], 1.0),
        ChannelResult(Channel.SESSION, [ChannelHit(b, 1, 1.0), ChannelHit(c, 2, 1.0)], 1.0),
    ]
    fused = reciprocal_rank_fusion(results, k=60, limit=10)
    assert [f.memory.id for f in fused] == ["b", "a", "c"]
    assert fused[0].fusion == pytest.approx(1 / 62 + 1 / 61)
    assert set(fused[0].channels) == {Channel.LEXICAL, Channel.SESSION}


def test_rrf_limits_the_candidates() -> None:
    hits = [ChannelHit(memory(id=str(i)), i + 1, 1.0) for i in range(10)]
    fused = reciprocal_rank_fusion([ChannelResult(Channel.LEXICAL, hits, 1.0)], k=60, limit=3)
    assert [f.memory.id for f in fused] == ["0", "1", "2"]


@pytest.mark.parametrize(
    ("mix", "neighbours", "expected"),
    [
        (
            [2.0, 0.0, -1.0],
            [[(1, 0.5)], [(0, 0.5), (2, 0.5)], [(1, 0.5)]],
            [2.0 + 0.5 * 0.0, 0.0 + 0.5 * 2.0, -1.0 + 0.5 * 0.0],
        ),
        # Each edge its own share: the answer after a question borrows all of it.
        ([2.0, 0.0, -1.0], [[(1, 0.5)], [(0, 1.0)], [(1, 0.5)]], [2.0, 0.0 + 2.0, -1.0]),
        # Below the mean a neighbour costs at most `weight` of its score: a question that matched badly
        # costs its answer no more than any neighbour, a smaller share less.
        ([-1.0, 0.0], [[], [(0, 1.0)]], [-1.0 - 0.5, 0.0 - 0.5]),
        ([-1.0, 0.0], [[], [(0, 0.2)]], [-1.0 - 0.5, 0.0 - 0.2]),
        # The best of the borrowed scores, not the best neighbour's: 1.0 x 2.0 beats 0.5 x 3.0.
        ([2.0, 0.0, 3.0], [[], [(0, 1.0), (2, 0.5)], []], [2.0 - 0.5 * 0.0, 2.0, 3.0 - 0.5 * 0.0]),
        ([1.0, -1.0], [[], []], [1.0 - 0.5, -1.0 - 0.5]),  # no known neighbour: borrows the lowest score
        ([], [], []),
    ],
)
def test_with_context_adds_the_best_neighbour(
    mix: list[float], neighbours: list[list[tuple[int, float]]], expected: list[float]
) -> None:
    assert scoring.with_context(mix, neighbours, weight=0.5) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("wanted", "stored", "shares"),
    [
        ({}, {"building": "A"}, False),
        ({"building": "A"}, {"building": "a"}, True),
        ({"b": 1}, {"b": 2}, False),
    ],
)
def test_shares_an_entity(wanted: Entities, stored: Entities, shares: bool) -> None:
    assert scoring.shares_an_entity(wanted, stored) is shares
