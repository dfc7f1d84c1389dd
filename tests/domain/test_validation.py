from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from hindsight_server.domain.errors import InvalidArgument
from hindsight_server.domain.model import (
    Kind,
    MemoryDraft,
    MemoryPatch,
    RecallQuery,
    ScoreWeights,
    Tier,
    TimeWindow,
)
from hindsight_server.domain.policy import Limits
from hindsight_server.domain.validation import (
    require_memory_id,
    validate_batch,
    validate_draft,
    validate_patch,
    validate_recall,
)

NOW = datetime(2025, 1, 15, 12, tzinfo=UTC)
LIMITS = Limits(max_content_bytes=64, max_entity_depth=2, max_entity_keys=3, max_batch_size=2)
DRAFT = MemoryDraft(tenant_id="acme", content="用户偏好靠窗座位", tier=Tier.SEMANTIC, kind=Kind.PREFERENCE)
QUERY = RecallQuery(
    tenant_id="acme",
    text="靠窗",
    now=NOW,
    top_k=5,
    token_budget=2000,
    weights=ScoreWeights(0.4, 0.3, 0.2, 0.1),
    profile="default",
    min_score=0.5,
)


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"tenant_id": ""}, "tenant_id"),
        ({"tenant_id": "has space"}, "tenant_id"),
        ({"content": "   "}, "memory.content"),
        ({"content": "x" * 65}, "memory.content"),
        ({"content": "靠" * 22}, "memory.content"),  # 66 bytes in UTF-8
        ({"content": "a\x00b"}, "memory.content"),
        ({"subject": "x" * 300}, "memory.subject"),
        ({"session_id": "s\n1"}, "memory.session_id"),
        ({"entities": {"": "A"}}, "memory.entities."),
        ({"entities": {"a": 1, "b": 2, "c": 3, "d": 4}}, "memory.entities"),
        ({"entities": {"a": {"b": {"c": 1}}}}, "memory.entities.a.b.c"),
        ({"entities": {"a": float("nan")}}, "memory.entities.a"),
        ({"confidence": 1.5}, "memory.confidence"),
        ({"confidence": float("nan")}, "memory.confidence"),
        ({"valid_from": NOW, "valid_to": NOW - timedelta(days=1)}, "memory.valid_to"),
        ({"expires_at": NOW - timedelta(seconds=1)}, "memory.expires_at"),
        ({"occurred_at": NOW + timedelta(days=1)}, "memory.occurred_at"),
    ],
)
def test_bad_drafts_name_the_field(changes: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidArgument) as error:
        validate_draft(replace(DRAFT, **changes), LIMITS, NOW)
    assert error.value.field == field


def test_good_draft_passes() -> None:
    validate_draft(replace(DRAFT, entities={"building": "A", "when": {"day": "Fri"}}), LIMITS, NOW)


def test_batch_bounds_and_item_prefix() -> None:
    with pytest.raises(InvalidArgument, match="memories: must not be empty"):
        validate_batch([], LIMITS, NOW)
    with pytest.raises(InvalidArgument, match="limit is 2"):
        validate_batch([DRAFT] * 3, LIMITS, NOW)
    with pytest.raises(InvalidArgument) as error:
        validate_batch([DRAFT, replace(DRAFT, content="")], LIMITS, NOW)
    assert error.value.field == "memories[1].content"


@pytest.mark.parametrize(
    ("patch", "field"),
    [
        (MemoryPatch("acme", "id", frozenset()), "update_mask"),
        (MemoryPatch("acme", "id", frozenset({"status"})), "update_mask"),
        (MemoryPatch("acme", "id", frozenset({"content"}), content=""), "memory.content"),
        (MemoryPatch("acme", "id", frozenset({"tier"})), "memory.tier"),
        (MemoryPatch("acme", "id", frozenset({"confidence"}), confidence=-0.1), "memory.confidence"),
        (
            MemoryPatch("acme", "id", frozenset({"intent"}), intent="x", expected_version=0),
            "expected_version",
        ),
    ],
)
def test_bad_patches_name_the_field(patch: MemoryPatch, field: str) -> None:
    with pytest.raises(InvalidArgument) as error:
        validate_patch(patch, LIMITS)
    assert error.value.field == field


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"text": ""}, "query"),
        ({"top_k": 0}, "top_k"),
        ({"top_k": 101}, "top_k"),
        ({"token_budget": 0}, "token_budget"),
        ({"min_score": 2.0}, "min_score"),
        ({"weights": ScoreWeights(0, 0, 0, 0)}, "weights"),
        ({"weights": ScoreWeights(-1, 1, 0, 0)}, "weights.similarity"),
        ({"window": TimeWindow(NOW, NOW - timedelta(hours=1))}, "time_range.end"),
    ],
)
def test_bad_recalls_name_the_field(changes: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidArgument) as error:
        validate_recall(replace(QUERY, **changes), Limits())
    assert error.value.field == field


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("01a22b18-e375-7426-afa1-f923854e099a", "01a22b18-e375-7426-afa1-f923854e099a"),
        ("01A22B18E3757426AFA1F923854E099A", "01a22b18-e375-7426-afa1-f923854e099a"),
    ],
)
def test_memory_ids_are_canonicalised(text: str, expected: str) -> None:
    assert require_memory_id(text) == expected


@pytest.mark.parametrize(
    ("text", "reason"), [("", "required"), ("nope", "not a memory id"), ("1" * 100, "not")]
)
def test_bad_memory_ids(text: str, reason: str) -> None:
    with pytest.raises(InvalidArgument, match=reason):
        require_memory_id(text)
