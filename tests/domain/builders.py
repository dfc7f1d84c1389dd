"""Builds domain records for pure tests."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from hindsight_server.domain.model import EmbeddingState, Kind, Memory, Status, Tier

_BASE = Memory(
    id="00000000-0000-7000-8000-000000000001",
    tenant_id="acme",
    subject="user-7",
    agent_id="",
    session_id="s1",
    tier=Tier.SEMANTIC,
    kind=Kind.PREFERENCE,
    intent="",
    entities={},
    content="用户偏好靠窗座位",
    confidence=0.92,
    status=Status.ACTIVE,
    supersedes=None,
    superseded_by=None,
    valid_from=None,
    valid_to=None,
    created_at=datetime(2024, 3, 15, 9, tzinfo=UTC),
    updated_at=datetime(2024, 3, 15, 9, tzinfo=UTC),
    expires_at=None,
    access_count=0,
    last_accessed_at=None,
    idempotency_key="",
    embedding_state=EmbeddingState.DISABLED,
    version=1,
)


def memory(**changes: Any) -> Memory:
    return replace(_BASE, **changes)
