from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from hindsight_server.domain.errors import InvalidArgument
from hindsight_server.domain.model import Kind, Status, Tier
from hindsight_server.domain.policy import TtlPolicy
from hindsight_server.domain.retention import (
    DEMOTE_UNUSED_AFTER,
    RetentionItem,
    RetentionPolicy,
    demotion_cutoff,
    eviction_order,
    over_quota,
    retention_score,
    should_demote,
)
from tests.domain.builders import memory

NOW = datetime(2025, 6, 1, tzinfo=UTC)
DAY = timedelta(days=1)
BASE = {
    "access_count": 2,
    "last_accessed_at": NOW - 10 * DAY,
    "created_at": NOW - 100 * DAY,
    "confidence": 0.8,
}


def score(**changes: object) -> float:
    return retention_score(**{**BASE, **changes}, now=NOW)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        # 0.4 x recency + 0.3 x count / (count + 5) + 0.3 x confidence
        ({"access_count": 0, "last_accessed_at": None, "created_at": NOW, "confidence": 1.0}, 0.7),
        ({"access_count": 5, "last_accessed_at": None, "created_at": NOW, "confidence": 1.0}, 0.85),
        ({"access_count": 0, "last_accessed_at": None, "created_at": NOW - 30 * DAY, "confidence": 0.0}, 0.2),
        (
            {
                "access_count": 0,
                "last_accessed_at": NOW - 30 * DAY,
                "created_at": NOW - 900 * DAY,
                "confidence": 0.0,
            },
            0.2,
        ),
        (
            {"access_count": 0, "last_accessed_at": None, "created_at": NOW + DAY, "confidence": 0.0},
            0.4,
        ),  # future: now
    ],
)
def test_the_documented_formula(kwargs: dict[str, object], expected: float) -> None:
    assert retention_score(**kwargs, now=NOW) == pytest.approx(expected)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("lower", "higher"),
    [
        ({"access_count": 1}, {"access_count": 2}),
        ({"access_count": 2}, {"access_count": 50}),
        ({"last_accessed_at": NOW - 60 * DAY}, {"last_accessed_at": NOW - 10 * DAY}),
        ({"last_accessed_at": None}, {"last_accessed_at": NOW - 10 * DAY}),  # access renews a memory
        (
            {"last_accessed_at": None, "created_at": NOW - 50 * DAY},
            {"last_accessed_at": None, "created_at": NOW},
        ),
        ({"confidence": 0.5}, {"confidence": 0.9}),
    ],
)
def test_retention_is_monotone_in_each_input(lower: dict[str, object], higher: dict[str, object]) -> None:
    assert score(**lower) < score(**higher)


def test_retention_stays_in_the_unit_interval() -> None:
    best = retention_score(access_count=10**9, last_accessed_at=NOW, created_at=NOW, confidence=1.0, now=NOW)
    worst = retention_score(
        access_count=0, last_accessed_at=None, created_at=NOW - 10**5 * DAY, confidence=0.0, now=NOW
    )
    assert 0.0 <= worst < 0.001 and 0.999 < best <= 1.0


@pytest.mark.parametrize(
    ("changes", "field"),
    [({"access_count": -1}, "access_count"), ({"confidence": 1.2}, "confidence")],
)
def test_bad_retention_input(changes: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidArgument) as error:
        score(**changes)
    assert error.value.field == field


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"recency_weight": -0.1}, "retention weights"),
        ({"recency_weight": 0.0, "frequency_weight": 0.0, "confidence_weight": 0.0}, "retention weights"),
        ({"half_life": timedelta(0)}, "half_life"),
        ({"frequency_scale": 0.0}, "frequency_scale"),
    ],
)
def test_bad_policy(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidArgument) as error:
        RetentionPolicy(**kwargs)  # type: ignore[arg-type]
    assert error.value.field == field


def item(memory_id: str, **changes: object) -> RetentionItem:
    base = RetentionItem(memory_id, Kind.FACT, Status.ACTIVE, 0.8, 3, NOW - 5 * DAY, NOW - 50 * DAY)
    return replace(base, **changes)  # type: ignore[arg-type]


ITEMS = [
    item("fresh-fact"),
    item("stale-fact", access_count=0, last_accessed_at=None, confidence=0.5),
    item("rule", kind=Kind.INSTRUCTION, access_count=0, last_accessed_at=None, confidence=0.5),
    item("pinned", pinned=True, access_count=0, last_accessed_at=None, confidence=0.1),
    item("old-version", status=Status.SUPERSEDED),
    item("pending", status=Status.PENDING),
    item("deleted", status=Status.DELETED),
]


def test_eviction_order() -> None:
    # history first, then pending, then active by lowest retention, instructions last; pinned and
    # deleted never listed
    assert eviction_order(ITEMS, NOW) == ["old-version", "pending", "stale-fact", "fresh-fact", "rule"]


def test_ties_go_oldest_first_then_by_id() -> None:
    twins = [
        item("b", created_at=NOW - DAY),
        item("a", created_at=NOW - DAY),
        item("c", created_at=NOW - 9 * DAY),
    ]
    same = RetentionPolicy(recency_weight=0.0)  # creation time no longer matters to the score
    assert eviction_order(twins, NOW, same) == ["c", "a", "b"]


@pytest.mark.parametrize(
    ("quota", "evicted"),
    [
        (6, []),  # six countable memories (the deleted one does not count)
        (5, ["old-version"]),
        (3, ["old-version", "pending", "stale-fact"]),
        (0, ["old-version", "pending", "stale-fact", "fresh-fact", "rule"]),  # the pinned one stays
    ],
)
def test_over_quota(quota: int, evicted: list[str]) -> None:
    assert over_quota(ITEMS, quota, NOW) == evicted


def test_a_negative_quota_is_rejected() -> None:
    with pytest.raises(InvalidArgument, match="quota"):
        over_quota(ITEMS, -1, NOW)


def test_retention_item_of_a_memory() -> None:
    stored = memory(id="m-1", access_count=4, last_accessed_at=NOW)
    assert RetentionItem.of(stored, pinned=True) == RetentionItem(
        "m-1", Kind.PREFERENCE, Status.ACTIVE, 0.92, 4, NOW, stored.created_at, True
    )


@pytest.mark.parametrize(
    ("changes", "demote"),
    [
        ({"created_at": NOW - 91 * DAY}, True),
        ({"created_at": NOW - 90 * DAY}, True),  # exactly 90 days unused
        ({"created_at": NOW - 89 * DAY}, False),
        ({"created_at": NOW - 400 * DAY, "last_accessed_at": NOW - 10 * DAY}, False),  # recalled lately
        ({"created_at": NOW - 400 * DAY, "last_accessed_at": NOW - 100 * DAY}, True),
        ({"created_at": NOW - 400 * DAY, "tier": Tier.EPISODIC}, False),  # only semantic memories
        ({"created_at": NOW - 400 * DAY, "status": Status.SUPERSEDED}, False),
    ],
)
def test_unused_semantic_memories_are_demoted(changes: dict[str, object], demote: bool) -> None:
    assert should_demote(memory(**changes), NOW) is demote


def test_the_demotion_window_is_a_parameter() -> None:
    stale = memory(created_at=NOW - 40 * DAY)
    assert not should_demote(stale, NOW)
    assert should_demote(stale, NOW, unused_for=30 * DAY)
    assert demotion_cutoff(NOW) == NOW - DEMOTE_UNUSED_AFTER
    with pytest.raises(InvalidArgument, match="unused_for"):
        demotion_cutoff(NOW, timedelta(0))


def test_ttl_cutoffs_for_superseded_versions_and_session_turns() -> None:
    now = datetime(2026, 12, 1, tzinfo=UTC)
    default = TtlPolicy()
    assert default.superseded_cutoff(now) == now - timedelta(days=90)
    assert default.turns_cutoff(now, timedelta(days=7)) == now - timedelta(days=8)
    assert TtlPolicy(superseded=None).superseded_cutoff(now) is None
    assert TtlPolicy(superseded=timedelta(0)).superseded_cutoff(now) is None  # zero keeps every version
    assert TtlPolicy(working=None).turns_cutoff(now, timedelta(days=7)) is None
    with pytest.raises(ValueError, match=r"ttl\.superseded"):
        TtlPolicy(superseded=timedelta(days=-1))
