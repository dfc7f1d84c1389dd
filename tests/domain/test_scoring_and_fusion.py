from datetime import UTC, datetime, timedelta

import pytest

from hindsight_server.domain import scoring
from hindsight_server.domain.fusion import reciprocal_rank_fusion
from hindsight_server.domain.model import Channel, ChannelHit, ChannelResult, ScoreWeights, Tier
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
def test_entity_match_is_the_share_of_wanted_entities(wanted: dict, stored: dict, expected: float) -> None:
    assert scoring.entity_match(wanted, stored) == pytest.approx(expected)


def test_tier_priority_orders_working_over_episodic_over_semantic() -> None:
    p = scoring.TIER_PRIORITY
    assert p[Tier.WORKING] > p[Tier.EPISODIC] > p[Tier.SEMANTIC]


def test_weighted_score_normalises_weights() -> None:
    doubled = ScoreWeights(0.8, 0.6, 0.4, 0.2)
    design = ScoreWeights(0.4, 0.3, 0.2, 0.1)
    parts = {"similarity": 0.9, "recency": 0.5, "tier_priority": 0.3, "entity_match": 1.0}
    assert scoring.weighted(doubled, **parts) == pytest.approx(scoring.weighted(design, **parts))
    assert scoring.weighted(design, **parts) == pytest.approx(0.4 * 0.9 + 0.3 * 0.5 + 0.2 * 0.3 + 0.1 * 1.0)


def test_similarity_prefers_the_vector_channel_and_falls_back_to_relative_lexical_rank() -> None:
    m = memory()
    vector = {Channel.VECTOR: ChannelHit(m, 1, 0.82), Channel.LEXICAL: ChannelHit(m, 1, 0.05)}
    lexical = {Channel.LEXICAL: ChannelHit(m, 2, 0.05)}
    assert scoring.similarity(vector, lexical_top=0.1) == pytest.approx(0.82)
    assert scoring.similarity(lexical, lexical_top=0.1) == pytest.approx(0.5)
    assert scoring.similarity({Channel.SESSION: ChannelHit(m, 1, 9.0)}, lexical_top=0.1) == 0.0


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
