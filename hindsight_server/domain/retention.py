"""Active forgetting: a retention score, the order memories leave in when a tenant is over its quota,
and the demotion of semantic memories nobody uses.

Retention (in [0, 1], monotone: more use, more recent use, more confidence never lower it):

    retention = w_recency * 0.5 ** (age / half_life)            age = now - (last access, else creation)
              + w_frequency * access_count / (access_count + frequency_scale)
              + w_confidence * confidence

with the weights 0.4 / 0.3 / 0.3 (normalised to sum to 1), a 30-day half-life (recall's recency) and
a frequency scale of 5 (5 accesses count half). A future timestamp counts as now.

Eviction over a quota: pinned memories never leave (they are not candidates at all). The rest leave in
groups, each group by lowest retention first (ties: older first, then id): history first (superseded,
expired), then pending, then active memories, and instructions last of all, since forgetting a rule the
user set is the costliest mistake. Deleted memories are not counted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from hindsight_server.domain.errors import InvalidArgument
from hindsight_server.domain.model import Kind, Memory, Status, Tier
from hindsight_server.domain.scoring import recency

__all__ = [
    "DEMOTE_UNUSED_AFTER",
    "RetentionItem",
    "RetentionPolicy",
    "demotion_cutoff",
    "eviction_order",
    "over_quota",
    "retention_score",
    "should_demote",
]

DEMOTE_UNUSED_AFTER = timedelta(days=90)  # docs/design.md: semantic unused 90 days -> episodic


@dataclass(frozen=True, slots=True)
class RetentionPolicy:
    recency_weight: float = 0.4
    frequency_weight: float = 0.3
    confidence_weight: float = 0.3
    half_life: timedelta = timedelta(days=30)
    frequency_scale: float = 5.0

    def __post_init__(self) -> None:
        weights = (self.recency_weight, self.frequency_weight, self.confidence_weight)
        if min(weights) < 0 or sum(weights) <= 0:
            raise InvalidArgument("retention weights", "must be non-negative and not all zero")
        if self.half_life <= timedelta(0):
            raise InvalidArgument("half_life", "must be positive")
        if self.frequency_scale <= 0:
            raise InvalidArgument("frequency_scale", "must be positive")


def retention_score(
    *,
    access_count: int,
    last_accessed_at: datetime | None,
    created_at: datetime,
    confidence: float,
    now: datetime,
    policy: RetentionPolicy | None = None,
) -> float:
    """How much a memory is worth keeping, in [0, 1] (formula in the module docstring)."""
    policy = policy or RetentionPolicy()
    if access_count < 0:
        raise InvalidArgument("access_count", "must not be negative")
    if not 0.0 <= confidence <= 1.0:
        raise InvalidArgument("confidence", "must be between 0 and 1")
    last_used = max(created_at, last_accessed_at) if last_accessed_at else created_at
    fresh = recency(last_used, now, policy.half_life)
    frequency = access_count / (access_count + policy.frequency_scale)
    total = policy.recency_weight + policy.frequency_weight + policy.confidence_weight
    weighted = policy.recency_weight * fresh + policy.frequency_weight * frequency
    return min(1.0, (weighted + policy.confidence_weight * confidence) / total)


@dataclass(frozen=True, slots=True)
class RetentionItem:
    id: str
    kind: Kind
    status: Status
    confidence: float
    access_count: int
    last_accessed_at: datetime | None
    created_at: datetime
    pinned: bool = False

    @classmethod
    def of(cls, memory: Memory, *, pinned: bool = False) -> RetentionItem:
        return cls(
            memory.id,
            memory.kind,
            memory.status,
            memory.confidence,
            memory.access_count,
            memory.last_accessed_at,
            memory.created_at,
            pinned,
        )


_GROUP = {Status.SUPERSEDED: 0, Status.EXPIRED: 0, Status.PENDING: 1, Status.ACTIVE: 2}
_INSTRUCTIONS = 3


def eviction_order(
    items: Sequence[RetentionItem], now: datetime, policy: RetentionPolicy | None = None
) -> list[str]:
    """Ids of the memories that may leave, first to go first; pinned and deleted ones are not listed."""
    ranked = []
    for item in items:
        if item.pinned or item.status is Status.DELETED:
            continue
        score = retention_score(
            access_count=item.access_count,
            last_accessed_at=item.last_accessed_at,
            created_at=item.created_at,
            confidence=item.confidence,
            now=now,
            policy=policy,
        )
        group = _INSTRUCTIONS if item.kind is Kind.INSTRUCTION else _GROUP[item.status]
        ranked.append((group, score, item.created_at, item.id))
    return [item_id for *_, item_id in sorted(ranked)]


def over_quota(
    items: Sequence[RetentionItem], quota: int, now: datetime, policy: RetentionPolicy | None = None
) -> list[str]:
    """The ids to evict so that at most `quota` countable memories remain (pinned ones count but never
    leave, so fewer may be returned when pinned ones alone exceed the quota)."""
    if quota < 0:
        raise InvalidArgument("quota", "must not be negative")
    counted = sum(1 for item in items if item.status is not Status.DELETED)
    excess = counted - quota
    return eviction_order(items, now, policy)[:excess] if excess > 0 else []


def demotion_cutoff(now: datetime, unused_for: timedelta = DEMOTE_UNUSED_AFTER) -> datetime:
    """Semantic memories last used (accessed, else created) before this are demoted (for a SQL filter)."""
    if unused_for <= timedelta(0):
        raise InvalidArgument("unused_for", "must be positive")
    return now - unused_for


def should_demote(memory: Memory, now: datetime, unused_for: timedelta = DEMOTE_UNUSED_AFTER) -> bool:
    """An active semantic memory unused (not recalled, else not written) for `unused_for` goes episodic."""
    if memory.tier is not Tier.SEMANTIC or memory.status is not Status.ACTIVE:
        return False
    last_used = memory.last_accessed_at or memory.created_at
    return last_used <= demotion_cutoff(now, unused_for)
