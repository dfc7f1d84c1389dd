"""Pure lifecycle decisions taken when a memory is written."""

from __future__ import annotations

from datetime import datetime

from hindsight_server.domain.model import Kind, Memory, Status, Tier
from hindsight_server.domain.policy import TtlPolicy, WritePolicy


def default_expiry(tier: Tier, kind: Kind, recorded_at: datetime, ttl: TtlPolicy) -> datetime | None:
    """When a memory expires if the caller did not say.

    Working memory always has the working TTL (consolidation moves what matters out of it). Elsewhere
    a kind with its own TTL wins over the tier (events fade after 90 days, preferences stay).
    """
    kind_decides = tier is not Tier.WORKING and kind in ttl.by_kind
    lifetime = ttl.by_kind[kind] if kind_decides else ttl.for_tier(tier)
    return None if lifetime is None else recorded_at + lifetime


def initial_status(confidence: float, policy: WritePolicy) -> Status:
    """Uncertain memories wait in the pending area until confirmed; recall ignores them."""
    return Status.PENDING if confidence < policy.pending_below_confidence else Status.ACTIVE


def resolves_conflicts(memory: Memory) -> bool:
    """Whether a new memory is checked against its peers (merge / supersede). Working memory is the raw
    conversation (two "好的" are two turns), and a pending memory is not believed yet, so it replaces
    nothing."""
    return memory.tier is not Tier.WORKING and memory.status is Status.ACTIVE


def is_mutable(status: Status) -> bool:
    return status in (Status.ACTIVE, Status.PENDING)


__all__ = ["default_expiry", "initial_status", "is_mutable", "resolves_conflicts"]
