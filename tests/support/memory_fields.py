"""The keywords of `hindsight.client.memory_input` (and so of `HindsightClient.write`), as a type: a test's
shared fields (`FACT = MemoryFields(tier="semantic", kind="fact")`, `**FACT`) are checked against them."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, Required, TypedDict


class MemoryFields(TypedDict, total=False):
    tier: Required[str]
    kind: Required[str]
    subject: str
    agent_id: str
    session_id: str
    intent: str
    entities: Mapping[str, Any] | None
    confidence: float | None
    valid_from: datetime | None
    valid_to: datetime | None
    expires_at: datetime | None
    occurred_at: datetime | None
    idempotency_key: str
    visibility: str
