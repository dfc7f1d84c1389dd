"""Request validation: every rule names the field it checks, so a caller can fix the request.

The transport has already produced typed values (enums, datetimes); these checks are about meaning and
bounds. Each function raises InvalidArgument on the first problem it finds.
"""

from __future__ import annotations

import json
import math
import re
from datetime import UTC, datetime

from hindsight_server.domain.errors import InvalidArgument
from hindsight_server.domain.ids import canonical_memory_id
from hindsight_server.domain.model import (
    MUTABLE_FIELDS,
    Entities,
    JsonValue,
    ListQuery,
    Memory,
    MemoryDraft,
    MemoryPatch,
    RecallQuery,
    ScoreWeights,
    TimeWindow,
    Visibility,
)
from hindsight_server.domain.policy import Limits

_TENANT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@/-]*")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# Times that time expressions are read relative to (a recall's `now`, a turn's `occurred_at`): the
# expressions reach up to 999 years from them, which must stay inside the years 1-9999 datetime has.
_CLOCK_RANGE = (datetime(1000, 1, 1, tzinfo=UTC), datetime(9000, 1, 1, tzinfo=UTC))


def _identifier(field: str, value: str, limits: Limits, *, required: bool = False) -> None:
    if not value:
        if required:
            raise InvalidArgument(field, "required")
        return
    if len(value) > limits.max_identifier_chars:
        raise InvalidArgument(field, f"longer than {limits.max_identifier_chars} characters")
    if _CONTROL.search(value):
        raise InvalidArgument(field, "contains control characters")


def validate_identifiers(limits: Limits, **values: str) -> None:
    """Optional identifiers sent beside a memory id or a session (agent_id, session_id, reason):
    bounded and printable, like every other identifier."""
    for field, value in values.items():
        _identifier(field, value, limits)


def _clock_time(field: str, value: datetime | None) -> None:
    low, high = _CLOCK_RANGE
    if value is not None and not low <= value < high:
        raise InvalidArgument(field, f"must be between the years {low.year} and {high.year - 1}")


def validate_tenant(tenant_id: str, limits: Limits) -> None:
    _identifier("tenant_id", tenant_id, limits, required=True)
    if not _TENANT.fullmatch(tenant_id):
        raise InvalidArgument(
            "tenant_id", "use letters, digits and . _ : @ / - (starting with a letter or digit)"
        )


def require_memory_id(text: str, field: str = "id") -> str:
    """The canonical id, or INVALID_ARGUMENT naming the field."""
    memory_id = canonical_memory_id(text)
    if memory_id is None:
        raise InvalidArgument(field, "is not a memory id (a UUID)" if text else "required")
    return memory_id


def _text(field: str, value: str, max_bytes: int) -> None:
    if not value.strip():
        raise InvalidArgument(field, "must not be empty")
    size = len(value.encode("utf-8", "surrogatepass"))
    if size > max_bytes:
        raise InvalidArgument(field, f"is {size} bytes; the limit is {max_bytes}")
    if "\x00" in value:
        raise InvalidArgument(field, "contains a NUL character")


def _json_depth_and_check(field: str, value: JsonValue, depth: int, limits: Limits) -> None:
    if depth > limits.max_entity_depth:
        raise InvalidArgument(field, f"nested deeper than {limits.max_entity_depth} levels")
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidArgument(field, "numbers must be finite")
    if isinstance(value, str) and "\x00" in value:
        raise InvalidArgument(field, "contains a NUL character")
    if isinstance(value, dict):
        for key, item in value.items():
            _entity_key(f"{field}.{key}" if key else field, key)
            _json_depth_and_check(f"{field}.{key}", item, depth + 1, limits)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _json_depth_and_check(f"{field}[{index}]", item, depth + 1, limits)


def _entity_key(field: str, key: str) -> None:
    if not key.strip():
        raise InvalidArgument(field, "entity names must not be empty")
    if len(key) > 128 or _CONTROL.search(key):
        raise InvalidArgument(field, "entity names are at most 128 printable characters")


def validate_entities(entities: Entities, limits: Limits, field: str = "entities") -> None:
    if len(entities) > limits.max_entity_keys:
        raise InvalidArgument(field, f"more than {limits.max_entity_keys} entities")
    for key, value in entities.items():
        _entity_key(f"{field}.{key}", key)
        _json_depth_and_check(f"{field}.{key}", value, 1, limits)
    size = len(json.dumps(entities, ensure_ascii=False).encode())
    if size > limits.max_entities_bytes:
        raise InvalidArgument(field, f"is {size} bytes as JSON; the limit is {limits.max_entities_bytes}")


def _confidence(field: str, value: float) -> None:
    if not (math.isfinite(value) and 0.0 <= value <= 1.0):
        raise InvalidArgument(field, "must be between 0 and 1")


def _validity(prefix: str, valid_from: datetime | None, valid_to: datetime | None) -> None:
    if valid_from is not None and valid_to is not None and valid_to <= valid_from:
        raise InvalidArgument(f"{prefix}valid_to", "must be after valid_from")


def _record_bounds(record: MemoryDraft | Memory, limits: Limits, prefix: str, content_field: str) -> None:
    """What a written memory and an imported one must both keep to."""
    _text(content_field, record.content, limits.max_content_bytes)
    for name in ("subject", "agent_id", "session_id", "intent", "idempotency_key"):
        _identifier(f"{prefix}{name}", getattr(record, name), limits)
    validate_entities(record.entities, limits, f"{prefix}entities")
    _confidence(f"{prefix}confidence", record.confidence)
    _validity(prefix, record.valid_from, record.valid_to)


def _private_has_its_agent(record: MemoryDraft | Memory, prefix: str) -> None:
    if record.visibility is Visibility.PRIVATE and not record.agent_id:
        raise InvalidArgument(f"{prefix}visibility", "PRIVATE needs the agent_id of the agent it belongs to")


def validate_draft(
    draft: MemoryDraft, limits: Limits, now: datetime, prefix: str = "memory.", content_field: str = ""
) -> None:
    """`content_field`: what the request calls the content (default `<prefix>content`)."""
    validate_tenant(draft.tenant_id, limits)
    _record_bounds(draft, limits, prefix, content_field or f"{prefix}content")
    recorded_at = draft.occurred_at or now
    if draft.occurred_at is not None and draft.occurred_at > now:
        raise InvalidArgument(f"{prefix}occurred_at", "must not be in the future")
    _clock_time(f"{prefix}occurred_at", draft.occurred_at)
    if draft.expires_at is not None and draft.expires_at <= recorded_at:
        raise InvalidArgument(f"{prefix}expires_at", "must be after the time the memory is recorded")
    _private_has_its_agent(draft, prefix)


def validate_imported(memory: Memory, limits: Limits, prefix: str) -> None:
    """An exported memory coming back: the bounds of a write (its times and state are kept as they
    were, so a past expiry is fine), and the provenance bounded like entities."""
    _record_bounds(memory, limits, prefix, f"{prefix}content")
    validate_entities(memory.provenance, limits, f"{prefix}provenance")
    _private_has_its_agent(memory, prefix)
    if len(memory.derived_from) > limits.max_batch_size:
        raise InvalidArgument(f"{prefix}derived_from", f"more than {limits.max_batch_size} sources")
    for link in ("supersedes", "superseded_by"):
        if getattr(memory, link) == memory.id:
            raise InvalidArgument(f"{prefix}{link}", "a memory cannot be its own version")
    if memory.supersedes is not None and memory.supersedes == memory.superseded_by:
        raise InvalidArgument(f"{prefix}superseded_by", "must differ from supersedes")
    if memory.id in memory.derived_from:
        raise InvalidArgument(f"{prefix}derived_from", "a memory cannot be derived from itself")


def validate_batch(drafts: list[MemoryDraft], limits: Limits, now: datetime) -> None:
    if not drafts:
        raise InvalidArgument("memories", "must not be empty")
    if len(drafts) > limits.max_batch_size:
        raise InvalidArgument("memories", f"{len(drafts)} items; the limit is {limits.max_batch_size}")
    for index, draft in enumerate(drafts):
        validate_draft(draft, limits, now, prefix=f"memories[{index}].")


def validate_patch(patch: MemoryPatch, limits: Limits) -> None:
    validate_tenant(patch.tenant_id, limits)
    if not patch.mask:
        raise InvalidArgument("update_mask", "name at least one field to change")
    unknown = sorted(patch.mask - MUTABLE_FIELDS)
    if unknown:
        raise InvalidArgument("update_mask", f"cannot change {', '.join(unknown)}")
    if "content" in patch.mask:
        _text("memory.content", patch.content, limits.max_content_bytes)
    for name in ("subject", "intent"):
        if name in patch.mask:
            _identifier(f"memory.{name}", getattr(patch, name), limits)
    if "entities" in patch.mask:
        validate_entities(patch.entities, limits, "memory.entities")
    if "confidence" in patch.mask:
        _confidence("memory.confidence", patch.confidence)
    for name in ("tier", "kind"):
        if name in patch.mask and getattr(patch, name) is None:
            raise InvalidArgument(f"memory.{name}", "required when named in update_mask")
    if patch.expected_version is not None and patch.expected_version < 1:
        raise InvalidArgument("expected_version", "must be at least 1")


def validate_list(query: ListQuery, limits: Limits) -> None:
    validate_tenant(query.tenant_id, limits)
    _identifier("subject", query.subject, limits)
    _identifier("session_id", query.session_id, limits)
    _identifier("agent_id", query.agent_id, limits)
    if not 1 <= query.page_size <= limits.max_page_size:
        raise InvalidArgument("page_size", f"must be between 1 and {limits.max_page_size}")


def validate_window(window: TimeWindow, field: str = "time_range") -> None:
    if window.start is not None and window.end is not None and window.end <= window.start:
        raise InvalidArgument(f"{field}.end", "must be after start")


def validate_weights(weights: ScoreWeights, field: str = "weights") -> None:
    values = {
        "similarity": weights.similarity,
        "recency": weights.recency,
        "tier_priority": weights.tier_priority,
        "entity_match": weights.entity_match,
    }
    for name, value in values.items():
        if not math.isfinite(value) or value < 0:
            raise InvalidArgument(f"{field}.{name}", "must be a finite number >= 0")
    if sum(values.values()) <= 0:
        raise InvalidArgument(field, "must sum to a positive number")


def validate_recall(query: RecallQuery, limits: Limits) -> None:
    validate_tenant(query.tenant_id, limits)
    _text("query", query.text, limits.max_query_bytes)
    _clock_time("now", query.now)
    _identifier("subject", query.subject, limits)
    _identifier("session_id", query.session_id, limits)
    _identifier("agent_id", query.agent_id, limits)
    if not 1 <= query.top_k <= limits.max_top_k:
        raise InvalidArgument("top_k", f"must be between 1 and {limits.max_top_k}")
    if not 1 <= query.token_budget <= limits.max_token_budget:
        raise InvalidArgument("token_budget", f"must be between 1 and {limits.max_token_budget}")
    if not (math.isfinite(query.min_score) and 0.0 <= query.min_score <= 1.0):
        raise InvalidArgument("min_score", "must be between 0 and 1")
    validate_entities(query.entities, limits)
    validate_window(query.window)
    validate_weights(query.weights)
