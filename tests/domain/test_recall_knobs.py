"""A recall's knobs (domain/policy.py): the caller's value where it set one, the policy's default else."""

from __future__ import annotations

import pytest

from hindsight_server.domain.errors import InvalidArgument
from hindsight_server.domain.model import ScoreWeights
from hindsight_server.domain.policy import DEFAULT_PROFILES, RecallKnobs, RecallPolicy

POLICY = RecallPolicy()
CUSTOM = ScoreWeights(similarity=1.0, recency=0.0, tier_priority=0.0, entity_match=0.0)


@pytest.mark.parametrize(
    ("knobs", "top_k", "budget", "min_score", "profile", "weights"),
    [
        (
            RecallKnobs(),
            POLICY.default_top_k,
            POLICY.default_token_budget,
            POLICY.min_score,
            "default",
            DEFAULT_PROFILES["default"],
        ),
        (
            RecallKnobs(top_k=3, token_budget=100),
            3,
            100,
            POLICY.min_score,
            "default",
            DEFAULT_PROFILES["default"],
        ),
        (
            RecallKnobs(min_score=0.0),
            POLICY.default_top_k,
            POLICY.default_token_budget,
            0.0,
            "default",
            DEFAULT_PROFILES["default"],
        ),  # 0 is a value the caller set, not "unset"
        (
            RecallKnobs(profile="support"),
            POLICY.default_top_k,
            POLICY.default_token_budget,
            POLICY.min_score,
            "support",
            DEFAULT_PROFILES["support"],
        ),
        (
            RecallKnobs(profile="support", weights=CUSTOM),
            POLICY.default_top_k,
            POLICY.default_token_budget,
            POLICY.min_score,
            "custom",
            CUSTOM,
        ),  # explicit weights win over a profile
    ],
)
def test_unset_knobs_take_the_policys_defaults(
    knobs: RecallKnobs, top_k: int, budget: int, min_score: float, profile: str, weights: ScoreWeights
) -> None:
    resolved = knobs.resolved(POLICY)
    assert (resolved.top_k, resolved.token_budget, resolved.min_score) == (top_k, budget, min_score)
    assert (resolved.profile, resolved.weights) == (profile, weights)


def test_an_unknown_profile_is_refused_naming_the_field() -> None:
    with pytest.raises(InvalidArgument, match="unknown profile 'sales'") as refused:
        RecallKnobs(profile="sales").resolved(POLICY)
    assert refused.value.field == "profile"
