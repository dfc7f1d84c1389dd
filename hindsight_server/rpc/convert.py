"""Protobuf <-> domain conversion. Wire-level problems (unknown enum numbers, impossible timestamps) become
INVALID_ARGUMENT naming the field; meaning and bounds are checked by domain validation afterwards."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any, TypeVar, cast

import numpy as np
from google.protobuf import json_format, struct_pb2, timestamp_pb2
from google.protobuf.message import Message

from hindsight.consistency import decode_token, encode_token
from hindsight.v1 import memory_pb2 as pb
from hindsight_server.domain.audit import AuditPage, AuditQuery, decode_audit_token, encode_audit_token
from hindsight_server.domain.conversation import Role, Turn
from hindsight_server.domain.errors import InvalidArgument
from hindsight_server.domain.feed import (
    OLDEST,
    ChangeEvent,
    FeedQuery,
    Heartbeat,
    parse_cursor,
    parse_event_types,
)
from hindsight_server.domain.model import (
    MUTABLE_FIELDS,
    READ_AFTER_FIELD,
    Channel,
    ChannelResult,
    CommitPosition,
    EmbeddingState,
    Entities,
    ErasureKind,
    ErasureRecord,
    ErasureScope,
    JsonValue,
    Kind,
    ListQuery,
    Memory,
    MemoryDraft,
    MemoryPatch,
    Page,
    RankedMemory,
    RecallQuery,
    RecallResult,
    ScoreWeights,
    Status,
    Tier,
    TimeWindow,
    VectorSpace,
    Visibility,
    WriteOutcome,
)
from hindsight_server.domain.paging import decode_page_token, encode_page_token
from hindsight_server.domain.policy import Limits, RecallKnobs, RecallPolicy
from hindsight_server.domain.portability import (
    FORMAT_VERSION,
    EmbeddingModel,
    ExportHeader,
    ExportQuery,
    ImportOutcome,
    PortableMemory,
)
from hindsight_server.domain.validation import require_memory_id, validate_identifiers
from hindsight_server.pipelines.sessions import AppendResult, SessionView, TurnRequest

E = TypeVar("E", bound=StrEnum)

_MAX_CONSISTENCY_TOKEN = 64  # ours are 25 characters

# Domain enum <-> proto enum number, one table per enum; the proto name is PREFIX_VALUE.
_VISIBILITY = {Visibility.SHARED: pb.VISIBILITY_SHARED, Visibility.PRIVATE: pb.VISIBILITY_PRIVATE}
_TIER = {Tier.WORKING: pb.TIER_WORKING, Tier.EPISODIC: pb.TIER_EPISODIC, Tier.SEMANTIC: pb.TIER_SEMANTIC}
_KIND = {
    Kind.FACT: pb.KIND_FACT,
    Kind.PREFERENCE: pb.KIND_PREFERENCE,
    Kind.EVENT: pb.KIND_EVENT,
    Kind.TASK: pb.KIND_TASK,
    Kind.SUMMARY: pb.KIND_SUMMARY,
    Kind.INSTRUCTION: pb.KIND_INSTRUCTION,
}
_STATUS = {
    Status.ACTIVE: pb.STATUS_ACTIVE,
    Status.PENDING: pb.STATUS_PENDING,
    Status.SUPERSEDED: pb.STATUS_SUPERSEDED,
    Status.EXPIRED: pb.STATUS_EXPIRED,
    Status.DELETED: pb.STATUS_DELETED,
}
_EMBEDDING = {
    EmbeddingState.PENDING: pb.EMBEDDING_STATE_PENDING,
    EmbeddingState.READY: pb.EMBEDDING_STATE_READY,
    EmbeddingState.DISABLED: pb.EMBEDDING_STATE_DISABLED,
}
_CHANNEL = {
    Channel.STRUCTURED: pb.CHANNEL_STRUCTURED,
    Channel.VECTOR: pb.CHANNEL_VECTOR,
    Channel.LEXICAL: pb.CHANNEL_LEXICAL,
    Channel.SESSION: pb.CHANNEL_SESSION,
    Channel.CONTEXT: pb.CHANNEL_CONTEXT,
}

# Timestamp bounds PostgreSQL and Python both represent.
_MIN_SECONDS = int((datetime(1, 1, 2, tzinfo=UTC) - datetime(1970, 1, 1, tzinfo=UTC)).total_seconds())
_MAX_SECONDS = int((datetime(9999, 12, 30, tzinfo=UTC) - datetime(1970, 1, 1, tzinfo=UTC)).total_seconds())
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MAX_PAGE_TOKEN = 512


# ------------------------------------------------------------------------------------------ scalars


def _enum_in(table: Mapping[E, int], number: int, field: str) -> E | None:
    if number == 0:
        return None
    for member, value in table.items():
        if value == number:
            return member
    names = ", ".join(member.value for member in table)
    raise InvalidArgument(field, f"unknown value {number}; one of {names}")


def _required_enum(table: Mapping[E, int], number: int, field: str) -> E:
    member = _enum_in(table, number, field)
    if member is None:
        names = ", ".join(m.value for m in table)
        raise InvalidArgument(field, f"required; one of {names}")
    return member


def _enums_in(table: Mapping[E, int], numbers: Iterable[int], field: str) -> tuple[E, ...]:
    members = []
    for index, number in enumerate(numbers):
        member = _enum_in(table, number, f"{field}[{index}]")
        if member is None:
            raise InvalidArgument(f"{field}[{index}]", "must not be UNSPECIFIED")
        members.append(member)
    return tuple(dict.fromkeys(members))


def _time_in(message: Message, name: str, field: str) -> datetime | None:
    if not message.HasField(name):
        return None
    stamp: timestamp_pb2.Timestamp = getattr(message, name)
    if not (_MIN_SECONDS <= stamp.seconds <= _MAX_SECONDS) or not (0 <= stamp.nanos < 1_000_000_000):
        raise InvalidArgument(field, "timestamp out of range (years 0001-9999, nanos 0-999999999)")
    return _EPOCH + timedelta(seconds=stamp.seconds, microseconds=stamp.nanos // 1000)


def time_out(target: timestamp_pb2.Timestamp, value: datetime | None) -> None:
    """Timestamp.FromDatetime's value at a fraction of its cost (up to seven a memory, every hit of every
    recall): timedelta keeps days, seconds and microseconds normalised as Timestamp wants them. Every
    time the server holds is timezone-aware (the database's timestamptz, the UTC clock)."""
    if value is not None:
        since = value - _EPOCH
        target.seconds = since.days * 86_400 + since.seconds
        target.nanos = since.microseconds * 1000


def _plain(value: Any) -> JsonValue:
    """Struct numbers are doubles; integral ones go back to ints so entities read as written."""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_plain(item) for item in value]
    return value  # type: ignore[no-any-return]


def _entities_in(message: Message, name: str, field: str) -> Entities:
    if not message.HasField(name):
        return {}
    struct: struct_pb2.Struct = getattr(message, name)
    try:
        return cast(dict[str, JsonValue], _plain(json_format.MessageToDict(struct)))
    except ValueError:  # a NaN or an infinity: JSON has neither
        raise InvalidArgument(field, "numbers must be finite") from None


def _entities_out(target: struct_pb2.Struct, entities: Entities) -> None:
    if entities:
        target.update(dict(entities))


# ------------------------------------------------------------------------------------------ requests


def draft_from_proto(tenant_id: str, memory: pb.MemoryInput, prefix: str = "memory.") -> MemoryDraft:
    return MemoryDraft(
        tenant_id=tenant_id,
        content=memory.content,
        tier=_required_enum(_TIER, memory.tier, f"{prefix}tier"),
        kind=_required_enum(_KIND, memory.kind, f"{prefix}kind"),
        subject=memory.subject,
        agent_id=memory.agent_id,
        session_id=memory.session_id,
        intent=memory.intent,
        entities=_entities_in(memory, "entities", f"{prefix}entities"),
        confidence=memory.confidence if memory.HasField("confidence") else 1.0,
        valid_from=_time_in(memory, "valid_from", f"{prefix}valid_from"),
        valid_to=_time_in(memory, "valid_to", f"{prefix}valid_to"),
        expires_at=_time_in(memory, "expires_at", f"{prefix}expires_at"),
        idempotency_key=memory.idempotency_key,
        occurred_at=_time_in(memory, "occurred_at", f"{prefix}occurred_at"),
        visibility=_enum_in(_VISIBILITY, memory.visibility, f"{prefix}visibility") or Visibility.SHARED,
    )


def drafts_from_batch(request: pb.WriteBatchRequest) -> list[MemoryDraft]:
    return [
        draft_from_proto(request.tenant_id, memory, prefix=f"memories[{index}].")
        for index, memory in enumerate(request.memories)
    ]


def update_mask_from_proto(request: pb.UpdateRequest) -> frozenset[str]:
    """The paths an Update changes: its update_mask (a FieldMask) or, from a client built before that,
    deprecated_update_mask (field 4, the mask's first form: a list of strings), or both naming the same
    paths (a client that also talks to servers older than the FieldMask). Paths the two disagree on are
    refused naming update_mask; an unknown path of the deprecated form is refused naming that field (the
    FieldMask's are refused by validate_patch, naming update_mask)."""
    legacy = frozenset(request.deprecated_update_mask)
    if not request.HasField("update_mask"):
        unknown = sorted(legacy - MUTABLE_FIELDS)
        if unknown:
            raise InvalidArgument("deprecated_update_mask", f"cannot change {', '.join(unknown)}")
        return legacy
    paths = frozenset(request.update_mask.paths)
    if legacy and legacy != paths:
        raise InvalidArgument(
            "update_mask",
            "names other paths than deprecated_update_mask (field 4); set one of the two, or both alike",
        )
    return paths


def patch_from_proto(request: pb.UpdateRequest) -> MemoryPatch:
    memory = request.memory
    mask = update_mask_from_proto(request)
    return MemoryPatch(
        tenant_id=request.tenant_id,
        memory_id=require_memory_id(request.id),
        mask=mask,
        content=memory.content,
        entities=_entities_in(memory, "entities", "memory.entities"),
        intent=memory.intent,
        confidence=memory.confidence if memory.HasField("confidence") else 1.0,
        subject=memory.subject,
        tier=_enum_in(_TIER, memory.tier, "memory.tier"),
        kind=_enum_in(_KIND, memory.kind, "memory.kind"),
        valid_from=_time_in(memory, "valid_from", "memory.valid_from"),
        valid_to=_time_in(memory, "valid_to", "memory.valid_to"),
        expires_at=_time_in(memory, "expires_at", "memory.expires_at"),
        expected_version=request.expected_version if request.HasField("expected_version") else None,
        agent_id=request.agent_id,
    )


def read_after_from_proto(token: str) -> CommitPosition | None:
    """A read's min_consistency_token (empty: none)."""
    if not token:
        return None
    if len(token) > _MAX_CONSISTENCY_TOKEN:
        raise InvalidArgument(READ_AFTER_FIELD, "is not a consistency token (too long)")
    try:
        database, lsn = decode_token(token)
    except ValueError as exc:
        raise InvalidArgument(READ_AFTER_FIELD, str(exc)) from None
    return CommitPosition(database, lsn)


def consistency_token(position: CommitPosition) -> str:
    return encode_token(position.database, position.lsn)


def list_query_from_proto(request: pb.ListRequest, limits: Limits) -> ListQuery:
    query = ListQuery(
        tenant_id=request.tenant_id,
        subject=request.subject,
        session_id=request.session_id,
        tiers=_enums_in(_TIER, request.tiers, "tiers"),
        kinds=_enums_in(_KIND, request.kinds, "kinds"),
        statuses=_enums_in(_STATUS, request.statuses, "statuses") or (Status.ACTIVE,),
        page_size=request.page_size or limits.default_page_size,
        agent_id=request.agent_id,
        read_after=read_after_from_proto(request.min_consistency_token),
    )
    if not request.page_token:
        return query
    if len(request.page_token) > _MAX_PAGE_TOKEN:  # ours are ~150; json would recurse into a deep one
        raise InvalidArgument("page_token", "malformed; pass next_page_token from a previous response")
    return replace(query, after=decode_page_token(request.page_token, query))


def _window_in(message: Message, name: str, field: str) -> TimeWindow:
    if not message.HasField(name):
        return TimeWindow()
    time_range: pb.TimeRange = getattr(message, name)
    return TimeWindow(
        start=_time_in(time_range, "start", f"{field}.start"),
        end=_time_in(time_range, "end", f"{field}.end"),
    )


def recall_query_from_proto(request: pb.RecallRequest, policy: RecallPolicy, now: datetime) -> RecallQuery:
    override = None
    if request.HasField("weights"):
        w = request.weights
        override = ScoreWeights(w.similarity, w.recency, w.tier_priority, w.entity_match)
    knobs = RecallKnobs(
        top_k=request.top_k,
        token_budget=request.token_budget,
        min_score=request.min_score if request.HasField("min_score") else None,
        profile=request.profile,
        weights=override,
    ).resolved(policy)
    return RecallQuery(
        tenant_id=request.tenant_id,
        text=request.query,
        now=_time_in(request, "now", "now") or now,
        top_k=knobs.top_k,
        token_budget=knobs.token_budget,
        weights=knobs.weights,
        profile=knobs.profile,
        min_score=knobs.min_score,
        subject=request.subject,
        session_id=request.session_id,
        tiers=_enums_in(_TIER, request.tiers, "tiers"),
        kinds=_enums_in(_KIND, request.kinds, "kinds"),
        entities=_entities_in(request, "entities", "entities"),
        window=_window_in(request, "time_range", "time_range"),
        include_superseded=request.include_superseded,
        as_of=_time_in(request, "as_of", "as_of"),
        explain=request.explain,
        agent_id=request.agent_id,
        read_after=read_after_from_proto(request.min_consistency_token),
    )


# ----------------------------------------------------------------------------------------- responses


def memory_to_proto(memory: Memory) -> pb.Memory:
    message = pb.Memory(
        id=memory.id,
        tenant_id=memory.tenant_id,
        subject=memory.subject,
        agent_id=memory.agent_id,
        session_id=memory.session_id,
        tier=_TIER[memory.tier],
        kind=_KIND[memory.kind],
        intent=memory.intent,
        content=memory.content,
        confidence=memory.confidence,
        status=_STATUS[memory.status],
        supersedes=memory.supersedes or "",
        superseded_by=memory.superseded_by or "",
        access_count=memory.access_count,
        idempotency_key=memory.idempotency_key,
        embedding_state=_EMBEDDING[memory.embedding_state],
        version=memory.version,
        seen_count=memory.seen_count,
        derived_from=list(memory.derived_from),
        visibility=_VISIBILITY[memory.visibility],
    )
    _entities_out(message.entities, memory.entities)
    _entities_out(message.provenance, memory.provenance)
    time_out(message.last_seen_at, memory.last_seen_at)
    time_out(message.valid_from, memory.valid_from)
    time_out(message.valid_to, memory.valid_to)
    time_out(message.created_at, memory.created_at)
    time_out(message.updated_at, memory.updated_at)
    time_out(message.expires_at, memory.expires_at)
    time_out(message.last_accessed_at, memory.last_accessed_at)
    return message


def write_outcome_to_proto(outcome: WriteOutcome) -> pb.WriteResponse:
    return pb.WriteResponse(
        memory=memory_to_proto(outcome.memory),
        created=outcome.created,
        embedding_truncated=outcome.embedding_truncated,
        resolution=outcome.resolution.value,
        resolution_reason=outcome.reason,
    )


def page_to_proto(page: Page, query: ListQuery) -> pb.ListResponse:
    token = encode_page_token(page.next_cursor, query) if page.next_cursor else ""
    return pb.ListResponse(memories=[memory_to_proto(m) for m in page.memories], next_page_token=token)


def _window_out(target: pb.TimeRange, window: TimeWindow) -> None:
    time_out(target.start, window.start)
    time_out(target.end, window.end)


def _hit_to_proto(hit: RankedMemory) -> pb.RecallHit:
    s = hit.score
    return pb.RecallHit(
        memory=memory_to_proto(hit.memory),
        score=s.final,
        channels=[
            pb.ChannelHit(channel=_CHANNEL[channel], rank=ch.rank, score=ch.score)
            for channel, ch in sorted(hit.channels.items())
        ],
        components=pb.ScoreComponents(
            similarity=s.similarity,
            recency=s.recency,
            tier_priority=s.tier_priority,
            entity_match=s.entity_match,
            fusion=s.fusion,
            rerank=s.rerank,
            final=s.final,
            exact_evidence=s.exact_evidence,
            context_lift=s.context_lift,
            query_lift=s.query_lift,
        ),
        packed=hit.packed,
        matches_query=hit.directly_relevant,
    )


def _channel_candidates(result: ChannelResult) -> pb.ChannelCandidates:
    return pb.ChannelCandidates(
        channel=_CHANNEL[result.channel],
        hits=[
            pb.ChannelHit(channel=_CHANNEL[result.channel], rank=h.rank, score=h.score) for h in result.hits
        ],
        memory_ids=[h.memory.id for h in result.hits],
        elapsed_ms=result.elapsed_ms,
        error=result.error,
    )


def _channels_out(channels: Sequence[Channel]) -> list[pb.Channel.ValueType]:
    return [_CHANNEL[c] for c in channels]


def recall_result_to_proto(result: RecallResult, explain: bool) -> pb.RecallResponse:
    response = pb.RecallResponse(
        hits=[_hit_to_proto(hit) for hit in result.hits],
        injection_text=result.injection_text,
        tokens_used=result.tokens_used,
        channels_used=_channels_out(result.channels_used),
        channels_degraded=_channels_out(result.channels_degraded),
        query_truncated=result.query_truncated,
        reranked=result.reranked,
    )
    _window_out(response.time_range, result.window)
    if explain:
        w = result.weights
        explanation = response.explanation
        explanation.channels.extend(_channel_candidates(r) for r in result.channel_results)
        _window_out(explanation.parsed_time_range, result.window)
        explanation.profile = result.profile
        explanation.weights.CopyFrom(
            pb.ScoreWeights(
                similarity=w.similarity,
                recency=w.recency,
                tier_priority=w.tier_priority,
                entity_match=w.entity_match,
            )
        )
    return response


# ------------------------------------------------------------------------------------------ sessions

_ROLE = {
    Role.USER: pb.ROLE_USER,
    Role.ASSISTANT: pb.ROLE_ASSISTANT,
    Role.SYSTEM: pb.ROLE_SYSTEM,
    Role.TOOL: pb.ROLE_TOOL,
}


def turn_request_from_proto(request: pb.AppendTurnRequest) -> TurnRequest:
    return TurnRequest(
        tenant_id=request.tenant_id,
        session_id=request.session_id,
        text=request.text,
        role=_enum_in(_ROLE, request.role, "role") or Role.USER,
        subject=request.subject,
        agent_id=request.agent_id,
        entities=_entities_in(request, "entities", "entities"),
        occurred_at=_time_in(request, "occurred_at", "occurred_at"),
        idempotency_key=request.idempotency_key,
        expected_subject=request.expected_subject,
    )


def turn_to_proto(turn: Turn) -> pb.Turn:
    message = pb.Turn(index=turn.index, role=_ROLE[turn.role], text=turn.text)
    _entities_out(message.entities, turn.entities)
    time_out(message.occurred_at, turn.occurred_at)
    return message


def session_view_to_proto(view: SessionView) -> pb.SessionSummary:
    summary = view.summary
    message = pb.SessionSummary(
        session_id=view.session_id,
        subject=view.subject,
        goal=summary.goal,
        open_items=list(summary.open_items),
        recent_turns=[turn_to_proto(turn) for turn in view.recent_turns],
        text=summary.text,
        turn_count=view.turn_count,
        summarizer=view.summarizer,
    )
    _entities_out(message.confirmed, summary.confirmed)
    time_out(message.updated_at, summary.updated_at)
    return message


def append_result_to_proto(result: AppendResult) -> pb.AppendTurnResponse:
    response = pb.AppendTurnResponse(
        turn=turn_to_proto(result.turn),
        summary=session_view_to_proto(result.view),
        summary_refreshed=result.summary_refreshed,
        remembered=[memory_to_proto(memory) for memory in result.remembered],
    )
    if result.episode is not None:
        response.episode.CopyFrom(memory_to_proto(result.episode))
    return response


# --------------------------------------------------------------------------- export, import, erasure

_SPACES = {space.value: space for space in VectorSpace}


def _space_in(name: str, field: str) -> VectorSpace:
    space = _SPACES.get(name)
    if space is None:
        raise InvalidArgument(field, f"one of {', '.join(_SPACES)}")
    return space


def export_query_from_proto(request: pb.ExportRequest, viewer: str | None) -> ExportQuery:
    return ExportQuery(
        tenant_id=request.tenant_id,
        subject=request.subject if request.HasField("subject") else None,
        tiers=_enums_in(_TIER, request.tiers, "tiers"),
        kinds=_enums_in(_KIND, request.kinds, "kinds"),
        window=_window_in(request, "time_range", "time_range"),
        include_history=request.include_history,
        include_embeddings=request.include_embeddings,
        after_id=request.after_id or None,
        read_after=read_after_from_proto(request.min_consistency_token),
        viewer=viewer,
    )


def _model_out(model: EmbeddingModel) -> pb.EmbeddingModel:
    return pb.EmbeddingModel(space=model.space.value, name=model.name, dimension=model.dimension)


def export_header_to_proto(header: ExportHeader) -> pb.ExportItem:
    message = pb.ExportHeader(
        format_version=FORMAT_VERSION,
        tenant_id=header.tenant_id,
        count=header.count,
        models=[_model_out(model) for model in header.models],
    )
    if header.subject is not None:
        message.subject = header.subject
    time_out(message.exported_at, header.exported_at)
    return pb.ExportItem(header=message)


def model_names(models: Sequence[EmbeddingModel]) -> dict[VectorSpace, str]:
    """Each space's model name, as every exported embedding carries it (built once an export)."""
    return {model.space: model.name for model in models}


def exported_to_proto(item: PortableMemory, names: Mapping[VectorSpace, str]) -> pb.ExportItem:
    exported = pb.ExportedMemory(
        memory=memory_to_proto(item.memory),
        embeddings=[
            pb.Embedding(space=space.value, model=names.get(space, ""), values=vector.tolist())
            for space, vector in item.vectors.items()
        ],
    )
    return pb.ExportItem(memory=exported)


def models_from_proto(models: Iterable[pb.EmbeddingModel], field: str = "models") -> list[EmbeddingModel]:
    found = []
    for index, model in enumerate(models):
        found.append(
            EmbeddingModel(_space_in(model.space, f"{field}[{index}].space"), model.name, model.dimension)
        )
    return found


def portable_from_proto(item: pb.ExportedMemory, field: str) -> PortableMemory:
    """An exported memory as it was: every field checked as a write's would be (ids, enums, times)."""
    message = item.memory
    prefix = f"{field}.memory."

    def link(name: str) -> str | None:
        value: str = getattr(message, name)
        return require_memory_id(value, prefix + name) if value else None

    memory = Memory(
        id=require_memory_id(message.id, prefix + "id"),
        tenant_id=message.tenant_id,
        subject=message.subject,
        agent_id=message.agent_id,
        session_id=message.session_id,
        tier=_required_enum(_TIER, message.tier, prefix + "tier"),
        kind=_required_enum(_KIND, message.kind, prefix + "kind"),
        intent=message.intent,
        entities=_entities_in(message, "entities", prefix + "entities"),
        content=message.content,
        confidence=message.confidence,
        status=_required_enum(_STATUS, message.status, prefix + "status"),
        supersedes=link("supersedes"),
        superseded_by=link("superseded_by"),
        valid_from=_time_in(message, "valid_from", prefix + "valid_from"),
        valid_to=_time_in(message, "valid_to", prefix + "valid_to"),
        created_at=_required_time(message, "created_at", prefix),
        updated_at=_required_time(message, "updated_at", prefix),
        expires_at=_time_in(message, "expires_at", prefix + "expires_at"),
        access_count=message.access_count,
        last_accessed_at=_time_in(message, "last_accessed_at", prefix + "last_accessed_at"),
        idempotency_key=message.idempotency_key,
        embedding_state=EmbeddingState.PENDING,  # decided by the import
        version=max(1, message.version),
        seen_count=max(1, message.seen_count),
        last_seen_at=_time_in(message, "last_seen_at", prefix + "last_seen_at"),
        derived_from=tuple(
            require_memory_id(source, f"{prefix}derived_from[{index}]")
            for index, source in enumerate(message.derived_from)
        ),
        provenance=_entities_in(message, "provenance", prefix + "provenance"),
        visibility=_enum_in(_VISIBILITY, message.visibility, prefix + "visibility") or Visibility.SHARED,
    )
    vectors = {}
    for index, embedding in enumerate(item.embeddings):
        space = _space_in(embedding.space, f"{field}.embeddings[{index}].space")
        vectors[space] = np.asarray(embedding.values, dtype=np.float32)
    return PortableMemory(memory, vectors)


def _required_time(message: Message, name: str, prefix: str) -> datetime:
    value = _time_in(message, name, prefix + name)
    if value is None:
        raise InvalidArgument(prefix + name, "required")
    return value


def import_outcome_to_proto(outcome: ImportOutcome) -> pb.ImportResponse:
    return pb.ImportResponse(
        imported=outcome.imported,
        already_present=outcome.already_present,
        embeddings_reused=outcome.embeddings_reused,
        embeddings_pending=outcome.embeddings_pending,
        ids=outcome.ids,
    )


def erasure_scope_from_proto(request: pb.EraseRequest) -> ErasureScope:
    scope = request.WhichOneof("scope")
    if scope == "subject":
        return ErasureScope(request.tenant_id, ErasureKind.SUBJECT, subject=request.subject)
    if scope == "whole_tenant" and request.whole_tenant:
        return ErasureScope(request.tenant_id, ErasureKind.TENANT)
    if scope == "memories":
        return ErasureScope(request.tenant_id, ErasureKind.MEMORIES, memory_ids=tuple(request.memories.ids))
    raise InvalidArgument("whole_tenant", "set one scope: subject, whole_tenant (true) or memories.ids")


def erasure_to_proto(record: ErasureRecord) -> pb.EraseResponse:
    response = pb.EraseResponse(
        erasure_id=record.id,
        memories=record.memories,
        sessions=record.sessions,
        turns=record.turns,
        replies=record.replies,
    )
    time_out(response.erased_at, record.finished_at)
    return response


# ------------------------------------------------------------------------------------------ change feed


def watch_query_from_proto(request: pb.WatchRequest, viewer: str | None, limits: Limits) -> FeedQuery:
    for index, subject in enumerate(request.subjects):
        if len(subject) > limits.max_identifier_chars:
            limit = limits.max_identifier_chars
            raise InvalidArgument(f"subjects[{index}]", f"longer than {limit} characters")
    oldest = request.cursor == OLDEST
    return FeedQuery(
        tenant_id=request.tenant_id,
        after=None if oldest else parse_cursor(request.cursor, "cursor"),
        oldest=oldest,
        subjects=frozenset(request.subjects),
        kinds=frozenset(k.value for k in _enums_in(_KIND, request.kinds, "kinds")),
        types=parse_event_types(list(request.event_types), "event_types"),
        viewer=viewer,
    )


def feed_item_to_proto(item: ChangeEvent | Heartbeat, now: datetime) -> pb.WatchItem:
    if isinstance(item, Heartbeat):
        beat = pb.FeedHeartbeat(cursor=str(item.cursor))
        time_out(beat.at, now)
        return pb.WatchItem(heartbeat=beat)
    event = pb.ChangeEvent(
        id=item.id,
        cursor=str(item.cursor),
        type=item.type.value,
        memory_id=item.memory_id,
        subject=item.subject,
        kind=_KIND.get(Kind(item.kind), pb.KIND_UNSPECIFIED) if item.kind else pb.KIND_UNSPECIFIED,
        resolution=item.resolution,
        version=item.version,
        fields=item.fields,
        session_id=item.session_id,
        erasure_id=item.erasure_id,
        memory_ids=item.memory_ids,
        packed_ids=item.packed_ids,
    )
    if item.content is not None:
        event.content = item.content
    time_out(event.at, item.at)
    return pb.WatchItem(event=event)


# ------------------------------------------------------------------------------------------ recall audit


def audit_query_from_proto(request: pb.AuditRecallsRequest, viewer: str | None, limits: Limits) -> AuditQuery:
    """Bounded: an id, a subject of limits.max_identifier_chars, a page of 1..limits.max_page_size, a
    token of ours (decode_audit_token); each refusal names its field."""
    validate_identifiers(limits, subject=request.subject)
    if not 0 <= request.page_size <= limits.max_page_size:
        raise InvalidArgument("page_size", f"must be between 1 and {limits.max_page_size} (0: the default)")
    window = _window_in(request, "time_range", "time_range")
    if window.start is not None and window.end is not None and window.start >= window.end:
        raise InvalidArgument("time_range", "start must be before end")
    query = AuditQuery(
        tenant_id=request.tenant_id,
        memory_id=require_memory_id(request.memory_id, "memory_id") if request.memory_id else "",
        subject=request.subject or None,
        since=window.start,
        until=window.end,
        viewer=viewer,
        page_size=request.page_size or limits.default_page_size,
    )
    if not request.page_token:
        return query
    return replace(query, after=decode_audit_token(request.page_token, query))


def audit_page_to_proto(page: AuditPage, query: AuditQuery) -> pb.AuditRecallsResponse:
    response = pb.AuditRecallsResponse(
        next_page_token=encode_audit_token(page.next_cursor, query) if page.next_cursor else ""
    )
    for entry in page.entries:
        out = response.entries.add(
            id=entry.id,
            request_id=entry.request_id,
            subject=entry.subject,
            agent_id=entry.agent_id,
            query_hash=entry.query_hash,
            returned_ids=entry.returned_ids,
            packed_ids=entry.packed_ids,
        )
        if entry.query_text is not None:
            out.query_text = entry.query_text
        time_out(out.at, entry.at)
    return response
