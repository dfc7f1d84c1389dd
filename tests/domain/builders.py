"""Builds domain records for pure tests."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import numpy as np
import numpy.typing as npt

from hindsight_server.domain.model import (
    EmbeddingState,
    Kind,
    Memory,
    RecallQuery,
    Status,
    Tier,
    VectorSpace,
)
from hindsight_server.domain.policy import RecallKnobs, RecallPolicy
from hindsight_server.domain.scope_index import ScopeIndex, Scored
from hindsight_server.domain.vectors import FloatVector

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


def numbered(n: int, **fields: Any) -> Memory:
    """Memory number `n`: its own id and content, as many as a test needs."""
    return memory(**{"id": f"00000000-0000-7000-8000-{n:012d}", "content": f"fact number {n}"} | fields)


def recall_query(text: str, now: datetime, policy: RecallPolicy | None = None, **fields: Any) -> RecallQuery:
    """A recall of tenant "acme" with the policy's defaults, keeping every hit over the relevance gate."""
    knobs = RecallKnobs(min_score=0.0).resolved(policy or RecallPolicy())
    query = RecallQuery(
        tenant_id="acme",
        text=text,
        now=now,
        top_k=knobs.top_k,
        token_budget=knobs.token_budget,
        weights=knobs.weights,
        profile=knobs.profile,
        min_score=knobs.min_score,
    )
    return replace(query, **fields)


def nearest(
    index: ScopeIndex,
    visible: npt.NDArray[np.bool_],
    space: VectorSpace,
    query: FloatVector,
    limit: int,
    *,
    without: VectorSpace | None = None,
) -> list[Scored]:
    """An index's exact vector search on the calling thread: the reference the batched searches of
    pipelines/vector_searches.py must agree with."""
    ask = index.nearest_ask(visible, space, query, limit, without=without)
    return [] if ask is None else index.searched(space, ask)
