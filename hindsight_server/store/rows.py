"""Row <-> domain mapping for the memories table."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from hindsight_server.domain.model import EmbeddingState, Kind, Memory, Status, Tier, Visibility

# Every column a Memory is built from; selected by every read so the mapping has one shape.
MEMORY_COLUMNS = (
    "id, tenant_id, subject, agent_id, session_id, tier, kind, intent, entities, content, confidence, "
    "status, supersedes, superseded_by, valid_from, valid_to, created_at, updated_at, expires_at, "
    "access_count, last_accessed_at, idempotency_key, embedding_state, version, seen_count, last_seen_at, "
    "derived_from, provenance, visibility"
)


# A recall turns ~100 rows into memories: a dict look-up is a fraction of an Enum call, and most rows'
# entities and provenance are empty.
_TIERS = {tier.value: tier for tier in Tier}
_KINDS = {kind.value: kind for kind in Kind}
_STATUSES = {status.value: status for status in Status}
_EMBEDDING_STATES = {state.value: state for state in EmbeddingState}
_VISIBILITIES = {visibility.value: visibility for visibility in Visibility}
_EMPTY_JSON = "{}"


def memory_from_row(row: Mapping[str, Any]) -> Memory:
    return Memory(
        id=str(row["id"]),
        tenant_id=row["tenant_id"],
        subject=row["subject"],
        agent_id=row["agent_id"],
        session_id=row["session_id"],
        tier=_TIERS[row["tier"]],
        kind=_KINDS[row["kind"]],
        intent=row["intent"],
        entities=_json(row["entities"]),
        content=row["content"],
        confidence=row["confidence"],
        status=_STATUSES[row["status"]],
        supersedes=str(row["supersedes"]) if row["supersedes"] else None,
        superseded_by=str(row["superseded_by"]) if row["superseded_by"] else None,
        valid_from=row["valid_from"],
        valid_to=row["valid_to"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        expires_at=row["expires_at"],
        access_count=row["access_count"],
        last_accessed_at=row["last_accessed_at"],
        idempotency_key=row["idempotency_key"] or "",
        embedding_state=_EMBEDDING_STATES[row["embedding_state"]],
        version=row["version"],
        seen_count=row["seen_count"],
        last_seen_at=row["last_seen_at"],
        derived_from=tuple(str(source) for source in row["derived_from"]),
        provenance=_json(row["provenance"]),
        visibility=_VISIBILITIES[row["visibility"]],
    )


def _json(value: Any) -> Any:
    if value == _EMPTY_JSON:
        return {}
    return json.loads(value) if isinstance(value, str) else value
