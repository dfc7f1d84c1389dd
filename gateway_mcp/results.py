"""What the tools return as structured content (their output schemas), built from the gRPC responses,
and the text each result shows a model."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Literal

from google.protobuf import json_format, struct_pb2, timestamp_pb2
from pydantic import BaseModel, Field

from hindsight.v1 import memory_pb2 as pb

__all__ = [
    "NOTHING_RECALLED",
    "AppendTurnResult",
    "AuditEntry",
    "ChangesResult",
    "DebugResult",
    "DecisionResult",
    "EndSessionResult",
    "ForgetResult",
    "HistoryResult",
    "PendingResult",
    "RecallResult",
    "SummaryResult",
    "WriteResult",
    "append_result",
    "audit_entries",
    "audit_result",
    "changes_result",
    "debug_result",
    "decision_result",
    "end_session_result",
    "erased_result",
    "forget_candidates",
    "history_result",
    "pending_result",
    "recall_result",
    "summary_result",
    "with_audit",
    "write_result",
]

NOTHING_RECALLED = "(no relevant memories)"


def _name(enum: Any, value: int, prefix: str) -> str:
    return str(enum.Name(value)).removeprefix(prefix).lower()


def _time(message: Any, field: str) -> datetime | None:
    if not message.HasField(field):
        return None
    stamp: timestamp_pb2.Timestamp = getattr(message, field)
    return stamp.ToDatetime(tzinfo=UTC)


def _struct(value: struct_pb2.Struct) -> dict[str, Any]:
    return json_format.MessageToDict(value)


class TimeRange(BaseModel):
    start: datetime | None = None
    end: datetime | None = None


def _range(message: Any, field: str) -> TimeRange | None:
    if not message.HasField(field):
        return None
    value = getattr(message, field)
    return TimeRange(start=_time(value, "start"), end=_time(value, "end"))


# ------------------------------------------------------------------------------------------------ write


class WriteResult(BaseModel):
    id: str
    created: bool = Field(description="False when nothing new was stored (merged, or replayed).")
    resolution: Literal["created", "merged", "superseded", "replayed"] = Field(
        description=(
            "created: a new memory; merged: the same thing was already remembered (that memory is `id`, "
            "its seen_count grew); superseded: a new version replaced the memory in `supersedes`; "
            "replayed: an earlier call with the same idempotency key."
        )
    )
    resolution_reason: str = Field(description="Why it merged or superseded, e.g. a new value for a date.")
    seen_count: int = Field(description="How many times this memory has been written.")
    memory_type: str
    kind: str
    status: str = Field(description="active, or pending (low confidence: not recalled until confirmed).")
    embedding_state: str
    created_at: datetime | None
    expires_at: datetime | None
    supersedes: str = Field(description="The id of the memory this one replaced, empty if none.")
    idempotency_key: str


def write_result(response: pb.WriteResponse) -> tuple[str, WriteResult]:
    memory = response.memory
    result = WriteResult(
        id=memory.id,
        created=response.created,
        resolution=_resolution(response),
        resolution_reason=response.resolution_reason,
        seen_count=memory.seen_count,
        memory_type=_name(pb.Tier, memory.tier, "TIER_"),
        kind=_name(pb.Kind, memory.kind, "KIND_"),
        status=_name(pb.Status, memory.status, "STATUS_"),
        embedding_state=_name(pb.EmbeddingState, memory.embedding_state, "EMBEDDING_STATE_"),
        created_at=_time(memory, "created_at"),
        expires_at=_time(memory, "expires_at"),
        supersedes=memory.supersedes,
        idempotency_key=memory.idempotency_key,
    )
    because = f" ({result.resolution_reason})" if result.resolution_reason else ""
    if result.resolution == "replayed":
        return (
            f"Already stored as memory {result.id} (an earlier call with the same idempotency key); "
            "nothing new written.",
            result,
        )
    if result.resolution == "merged":
        return (
            f"Already remembered as memory {result.id}{because}: merged into it, now seen "
            f"{result.seen_count} times; nothing new stored.",
            result,
        )
    text = f"Stored {result.memory_type} {result.kind} memory {result.id}."
    if result.status == "pending":
        text += (
            " It is pending (confidence below the threshold): recall will not use it until it is confirmed."
        )
    if result.supersedes:
        text += f" It replaces memory {result.supersedes}{because}, which stays as history."
    return text, result


def _resolution(response: pb.WriteResponse) -> Literal["created", "merged", "superseded", "replayed"]:
    """The server's resolution; one that predates the field is told apart by `created` alone."""
    match response.resolution:
        case "created" | "merged" | "superseded" | "replayed" as known:
            return known
    return "created" if response.created else "replayed"


# ----------------------------------------------------------------------------------------------- recall


class ChannelHit(BaseModel):
    channel: str
    rank: int
    score: float


class Hit(BaseModel):
    id: str
    content: str
    score: float
    memory_type: str
    kind: str
    subject: str
    session_id: str
    intent: str
    entities: dict[str, Any]
    confidence: float
    status: str
    created_at: datetime | None
    valid_from: datetime | None
    valid_to: datetime | None
    supersedes: str
    packed: bool = Field(description="Included in injection_text within the token budget.")
    channels: list[ChannelHit]


class RecallResult(BaseModel):
    injection_text: str = Field(description="Ready to inject; empty when nothing is relevant.")
    hits: list[Hit]
    tokens_used: int
    channels_used: list[str]
    channels_degraded: list[str] = Field(
        description="Channels that could not answer (e.g. no inference tier)."
    )
    time_range: TimeRange | None = Field(
        description="The time range applied (explicit, or parsed from the query)."
    )
    reranked: bool


def _channel(value: int) -> str:
    return _name(pb.Channel, value, "CHANNEL_")


def _channel_hits(hits: Any) -> list[ChannelHit]:
    return [ChannelHit(channel=_channel(h.channel), rank=h.rank, score=h.score) for h in hits]


def _hit(hit: pb.RecallHit) -> Hit:
    memory = hit.memory
    return Hit(
        id=memory.id,
        content=memory.content,
        score=hit.score,
        memory_type=_name(pb.Tier, memory.tier, "TIER_"),
        kind=_name(pb.Kind, memory.kind, "KIND_"),
        subject=memory.subject,
        session_id=memory.session_id,
        intent=memory.intent,
        entities=_struct(memory.entities),
        confidence=memory.confidence,
        status=_name(pb.Status, memory.status, "STATUS_"),
        created_at=_time(memory, "created_at"),
        valid_from=_time(memory, "valid_from"),
        valid_to=_time(memory, "valid_to"),
        supersedes=memory.supersedes,
        packed=hit.packed,
        channels=_channel_hits(hit.channels),
    )


def recall_result(response: pb.RecallResponse) -> tuple[str, RecallResult]:
    result = RecallResult(
        injection_text=response.injection_text,
        hits=[_hit(hit) for hit in response.hits],
        tokens_used=response.tokens_used,
        channels_used=[_channel(c) for c in response.channels_used],
        channels_degraded=[_channel(c) for c in response.channels_degraded],
        time_range=_range(response, "time_range"),
        reranked=response.reranked,
    )
    return response.injection_text or NOTHING_RECALLED, result


# -------------------------------------------------------------------------------------------- summarize


class Turn(BaseModel):
    index: int
    role: str
    text: str
    occurred_at: datetime | None


class SummaryResult(BaseModel):
    session_id: str
    subject: str
    goal: str
    confirmed: dict[str, Any] = Field(
        description="Parameters the user settled: date, time, count, place, ..."
    )
    open_items: list[str]
    recent_turns: list[Turn]
    text: str
    turn_count: int
    updated_at: datetime | None
    summarizer: str


def _turn(turn: pb.Turn) -> Turn:
    return Turn(
        index=turn.index,
        role=_name(pb.Role, turn.role, "ROLE_"),
        text=turn.text,
        occurred_at=_time(turn, "occurred_at"),
    )


def _summary(summary: pb.SessionSummary) -> SummaryResult:
    return SummaryResult(
        session_id=summary.session_id,
        subject=summary.subject,
        goal=summary.goal,
        confirmed=_struct(summary.confirmed),
        open_items=list(summary.open_items),
        recent_turns=[_turn(turn) for turn in summary.recent_turns],
        text=summary.text,
        turn_count=summary.turn_count,
        updated_at=_time(summary, "updated_at"),
        summarizer=summary.summarizer,
    )


_NO_WORKING_MEMORY = "(the session has no working memory yet)"


def summary_result(summary: pb.SessionSummary) -> tuple[str, SummaryResult]:
    """The summary's text; before the session has one (its first turns), the turns it holds, so an agent
    reading the text alone does not take a session with turns for an empty one."""
    if summary.text:
        text = summary.text
    elif summary.recent_turns:
        turns = "\n".join(
            f"{turn.index}. {_name(pb.Role, turn.role, 'ROLE_')}: {_shown(turn.text)}"
            for turn in summary.recent_turns
        )
        text = f"(no summary yet) {_counted(summary.turn_count, 'turn', 'turns')}; the latest:\n{turns}"
    else:
        text = _NO_WORKING_MEMORY
    return text, _summary(summary)


# ------------------------------------------------------------------------------------- memories, briefly


_SHOWN_CHARS = 300  # of a memory's content in a text result (the structured content has all of it)


def _shown(content: str) -> str:
    return content if len(content) <= _SHOWN_CHARS else content[: _SHOWN_CHARS - 1] + "…"


def _counted(count: int, one: str, many: str) -> str:
    return f"{count} {one if count == 1 else many}"


def _memories(count: int) -> str:
    return _counted(count, "memory", "memories")


class MemoryBrief(BaseModel):
    """A memory as a result names it: enough to tell the user what it says and to act on its id."""

    id: str
    content: str
    memory_type: str
    kind: str
    status: str = Field(description="active, or pending (not recalled until the user confirms it).")
    confidence: float
    subject: str
    session_id: str
    entities: dict[str, Any]
    created_at: datetime | None


def _brief(memory: pb.Memory) -> MemoryBrief:
    return MemoryBrief(
        id=memory.id,
        content=memory.content,
        memory_type=_name(pb.Tier, memory.tier, "TIER_"),
        kind=_name(pb.Kind, memory.kind, "KIND_"),
        status=_name(pb.Status, memory.status, "STATUS_"),
        confidence=memory.confidence,
        subject=memory.subject,
        session_id=memory.session_id,
        entities=_struct(memory.entities),
        created_at=_time(memory, "created_at"),
    )


def _brief_line(place: int, memory: MemoryBrief) -> str:
    day = f"{memory.created_at:%Y-%m-%d}, " if memory.created_at is not None else ""
    return (
        f"{place}. {memory.id} ({day}{memory.memory_type} {memory.kind}, confidence "
        f"{memory.confidence:.2f}) {_shown(memory.content)}"
    )


_DECIDE = "ask the user whether it is right, then memory_confirm_pending or memory_reject_pending"


# ------------------------------------------------------------------------------------------ append turn


class AppendTurnResult(BaseModel):
    session_id: str
    turn: Turn = Field(description="The turn as stored; `index` is its 1-based place in the session.")
    summary_refreshed: bool = Field(description="The turn changed the session's summary.")
    summary: SummaryResult = Field(description="The session's working memory after the turn.")
    remembered: list[MemoryBrief] = Field(
        description="Memories the server kept from this turn: active, or pending (ask the user)."
    )
    episode: MemoryBrief | None = Field(
        description="Set when this turn consolidated the session into an episodic memory."
    )


def append_result(response: pb.AppendTurnResponse) -> tuple[str, AppendTurnResult]:
    result = AppendTurnResult(
        session_id=response.summary.session_id,
        turn=_turn(response.turn),
        summary_refreshed=response.summary_refreshed,
        summary=_summary(response.summary),
        remembered=[_brief(memory) for memory in response.remembered],
        episode=_brief(response.episode) if response.HasField("episode") else None,
    )
    lines = [f"Added turn {result.turn.index} ({result.turn.role}) to session {result.session_id}."]
    active = [m for m in result.remembered if m.status != "pending"]
    pending = [m for m in result.remembered if m.status == "pending"]
    if active:
        lines.append(f"Remembered {_memories(len(active))} for later sessions:")
        lines += [_brief_line(place, m) for place, m in enumerate(active, 1)]
    if pending:
        lines.append(f"{_memories(len(pending)).capitalize()} pending (unsure, not recalled yet): {_DECIDE}:")
        lines += [_brief_line(place, m) for place, m in enumerate(pending, 1)]
    if result.episode is not None:
        lines.append(f"The session was consolidated into episodic memory {result.episode.id}.")
    if result.summary_refreshed and result.summary.text:
        lines.append(f"Session summary now: {result.summary.text}")
    return "\n".join(lines), result


# ------------------------------------------------------------------------------------------ end session


class EndSessionResult(BaseModel):
    session_id: str
    consolidated: bool = Field(
        description="false: nothing new since the session's last episode, nothing was written."
    )
    episode: MemoryBrief | None = Field(description="The episodic memory written, when one was.")


def end_session_result(session_id: str, response: pb.EndSessionResponse) -> tuple[str, EndSessionResult]:
    if not response.HasField("episode"):
        result = EndSessionResult(session_id=session_id, consolidated=False, episode=None)
        return (
            f"Nothing new in session {session_id} since its last episode: no episode was written.",
            result,
        )
    episode = _brief(response.episode)
    result = EndSessionResult(session_id=session_id, consolidated=True, episode=episode)
    return (
        f"Session {session_id} consolidated into episodic memory {episode.id}: {_shown(episode.content)}",
        result,
    )


# --------------------------------------------------------------------------------------------- pending


class PendingResult(BaseModel):
    memories: list[MemoryBrief] = Field(description="Pending memories, newest first.")
    next_page_token: str = Field(description="Pass it as page_token for the next ones; empty: no more.")


def pending_result(response: pb.ListResponse) -> tuple[str, PendingResult]:
    result = PendingResult(
        memories=[_brief(memory) for memory in response.memories], next_page_token=response.next_page_token
    )
    if not result.memories:
        return "No memory waits for confirmation.", result
    count = len(result.memories)
    lines = [
        f"{_memories(count).capitalize()} {'waits' if count == 1 else 'wait'} for the user's "
        f"confirmation (recall does not use them): for each, {_DECIDE} with its memory_id."
    ]
    lines += [_brief_line(place, m) for place, m in enumerate(result.memories, 1)]
    if result.next_page_token:
        lines.append(f"More are pending: call again with page_token {json.dumps(result.next_page_token)}.")
    return "\n".join(lines), result


class DecisionResult(BaseModel):
    decision: Literal["confirmed", "rejected"]
    memory: MemoryBrief = Field(description="The memory after the decision: active, or deleted.")
    updated_at: datetime | None


def decision_result(memory: pb.Memory, *, confirmed: bool) -> tuple[str, DecisionResult]:
    result = DecisionResult(
        decision="confirmed" if confirmed else "rejected",
        memory=_brief(memory),
        updated_at=_time(memory, "updated_at"),
    )
    if confirmed:
        said = f"Confirmed memory {memory.id}: recall uses it from now on."
    else:
        said = f"Rejected memory {memory.id}: it was deleted and will not be recalled."
    return f"{said} {_shown(memory.content)}", result


# --------------------------------------------------------------------------------------------- history


class Version(BaseModel):
    id: str
    content: str
    status: str = Field(description="active (believed now), superseded (replaced), expired, deleted, ...")
    memory_type: str
    kind: str
    subject: str
    entities: dict[str, Any]
    confidence: float
    version: int = Field(description="Grows with every change of this version itself.")
    supersedes: str = Field(description="The id of the version it replaced, empty for the first.")
    superseded_by: str = Field(description="The id of the version that replaced it, empty for the last.")
    created_at: datetime | None = Field(description="When it was recorded.")
    updated_at: datetime | None
    valid_from: datetime | None = Field(description="True in the world from (unset: since recorded).")
    valid_to: datetime | None = Field(description="True in the world until (unset: still true).")


class HistoryResult(BaseModel):
    versions: list[Version] = Field(description="Oldest first.")
    current_id: str = Field(description="The version believed now (the last active one); empty if none.")


def history_result(response: pb.HistoryResponse) -> tuple[str, HistoryResult]:
    versions = [
        Version(
            id=memory.id,
            content=memory.content,
            status=_name(pb.Status, memory.status, "STATUS_"),
            memory_type=_name(pb.Tier, memory.tier, "TIER_"),
            kind=_name(pb.Kind, memory.kind, "KIND_"),
            subject=memory.subject,
            entities=_struct(memory.entities),
            confidence=memory.confidence,
            version=memory.version,
            supersedes=memory.supersedes,
            superseded_by=memory.superseded_by,
            created_at=_time(memory, "created_at"),
            updated_at=_time(memory, "updated_at"),
            valid_from=_time(memory, "valid_from"),
            valid_to=_time(memory, "valid_to"),
        )
        for memory in response.versions
    ]
    current = next((v.id for v in reversed(versions) if v.status == "active"), "")
    result = HistoryResult(versions=versions, current_id=current)
    count = len(versions)
    lines = [f"{_counted(count, 'version', 'versions')}, oldest first:"]
    for place, v in enumerate(versions, 1):
        day = f"{v.created_at:%Y-%m-%d %H:%M}, " if v.created_at is not None else ""
        now = " (believed now)" if v.id == current else ""
        lines.append(f"{place}. {v.id} ({day}{v.status}{now}) {_shown(v.content)}")
    if not current:
        lines.append("No version is active: none of them is believed now.")
    return "\n".join(lines), result


# ------------------------------------------------------------------------------------------------ debug


class Candidate(BaseModel):
    id: str
    rank: int
    score: float


class ChannelCandidates(BaseModel):
    channel: str
    elapsed_ms: float
    error: str = Field(description="Why the channel did not answer; empty when it did.")
    candidates: list[Candidate]


class Components(BaseModel):
    similarity: float
    recency: float
    tier_priority: float
    entity_match: float
    exact_evidence: float = Field(description="The share of the query's rare terms the memory holds.")
    context_lift: float = Field(description="What the turns around it lent its similarity (deviations).")
    query_lift: float = Field(description="What the time and subject the query names added (deviations).")
    fusion: float
    rerank: float
    final: float


class Ranked(BaseModel):
    id: str
    content: str
    memory_type: str
    kind: str
    score: float
    packed: bool
    components: Components
    channels: list[ChannelHit]


class AuditEntry(BaseModel):
    id: str
    at: datetime | None
    request_id: str = Field(description="The recall's x-request-id.")
    subject: str
    agent_id: str
    query_hash: str = Field(description="Keyed hash of the query: equal queries of the tenant hash alike.")
    query_text: str | None = Field(description="The query, only where the server keeps the tenant's texts.")
    returned_ids: list[str] = Field(description="The memories the recall returned, in rank order.")
    packed_ids: list[str] = Field(description="Those packed into its injection text.")


class DebugResult(BaseModel):
    """With `query`: the recall's explanation. With `memory_id`: `audit`, the recalls that memory fed."""

    profile: str = ""
    weights: dict[str, float] = Field(default_factory=dict)
    parsed_time_range: TimeRange | None = None
    channels: list[ChannelCandidates] = Field(
        default_factory=list, description="Every channel's raw candidates, best first."
    )
    ranking: list[Ranked] = Field(
        default_factory=list, description="The final ranking with each score component."
    )
    channels_degraded: list[str] = Field(default_factory=list)
    reranked: bool = False
    injection_text: str = ""
    audit: list[AuditEntry] | None = Field(
        None,
        description="With memory_id: the audited recalls that returned it, newest first (empty where the "
        "tenant's recalls are not audited, or none returned it).",
    )


def _ranked(hit: pb.RecallHit) -> Ranked:
    c = hit.components
    return Ranked(
        id=hit.memory.id,
        content=hit.memory.content,
        memory_type=_name(pb.Tier, hit.memory.tier, "TIER_"),
        kind=_name(pb.Kind, hit.memory.kind, "KIND_"),
        score=hit.score,
        packed=hit.packed,
        components=Components(
            similarity=c.similarity,
            recency=c.recency,
            tier_priority=c.tier_priority,
            entity_match=c.entity_match,
            exact_evidence=c.exact_evidence,
            context_lift=c.context_lift,
            query_lift=c.query_lift,
            fusion=c.fusion,
            rerank=c.rerank,
            final=c.final,
        ),
        channels=_channel_hits(hit.channels),
    )


def audit_entries(response: pb.AuditRecallsResponse) -> list[AuditEntry]:
    return [
        AuditEntry(
            id=entry.id,
            at=_time(entry, "at"),
            request_id=entry.request_id,
            subject=entry.subject,
            agent_id=entry.agent_id,
            query_hash=entry.query_hash,
            query_text=entry.query_text if entry.HasField("query_text") else None,
            returned_ids=list(entry.returned_ids),
            packed_ids=list(entry.packed_ids),
        )
        for entry in response.entries
    ]


def _audit_text(memory_id: str, entries: list[AuditEntry]) -> str:
    if not entries:
        return f"audit of {memory_id}: no audited recall returned it"
    lines = [f"audit of {memory_id}: {len(entries)} recalls returned it, newest first:"]
    for entry in entries:
        packed = "packed" if memory_id in entry.packed_ids else "not packed"
        query = f" query {entry.query_text!r}" if entry.query_text is not None else ""
        lines.append(
            f"  {entry.at.isoformat() if entry.at else ''} request {entry.request_id} agent "
            f"{entry.agent_id or '-'} subject {entry.subject or '-'}: rank "
            f"{entry.returned_ids.index(memory_id) + 1 if memory_id in entry.returned_ids else '?'} of "
            f"{len(entry.returned_ids)}, {packed}, hash {entry.query_hash[:16]}{query}"
        )
    return "\n".join(lines)


def audit_result(memory_id: str, response: pb.AuditRecallsResponse) -> tuple[str, DebugResult]:
    entries = audit_entries(response)
    return _audit_text(memory_id, entries), DebugResult(audit=entries)


def with_audit(
    explained: tuple[str, DebugResult], memory_id: str, response: pb.AuditRecallsResponse
) -> tuple[str, DebugResult]:
    """A recall's explanation with the audit of one memory after it."""
    text, result = explained
    entries = audit_entries(response)
    return f"{text}\n{_audit_text(memory_id, entries)}", result.model_copy(update={"audit": entries})


def _lifts(c: Components) -> str:
    """What lifted a hit's similarity, where anything did."""
    parts = [
        f"{label} {value:+.2f}"
        for label, value in (
            ("evidence", c.exact_evidence),
            ("context", c.context_lift),
            ("named", c.query_lift),
        )
        if value
    ]
    return f" ({', '.join(parts)})" if parts else ""


def _debug_text(result: DebugResult) -> str:
    w = result.weights
    lines = [
        f"profile {result.profile}: similarity {w.get('similarity', 0):.2f}, "
        f"recency {w.get('recency', 0):.2f}, tier {w.get('tier_priority', 0):.2f}, "
        f"entities {w.get('entity_match', 0):.2f}" + (" (reranked)" if result.reranked else "")
    ]
    if result.parsed_time_range is not None:
        lines.append(f"time range: {result.parsed_time_range.start} .. {result.parsed_time_range.end}")
    for channel in result.channels:
        state = f"FAILED: {channel.error}" if channel.error else f"{len(channel.candidates)} candidates"
        lines.append(f"channel {channel.channel}: {state} in {channel.elapsed_ms:.1f} ms")
        lines += [f"  {c.rank}. {c.id} raw {c.score:.4f}" for c in channel.candidates]
    lines.append("final ranking (score = weighted components):")
    for place, hit in enumerate(result.ranking, 1):
        c = hit.components
        lines.append(
            f"  {place}. {hit.score:.3f} sim {c.similarity:.3f} rec {c.recency:.3f} "
            f"tier {c.tier_priority:.3f} ent {c.entity_match:.3f} rerank {c.rerank:.3f}"
            f"{_lifts(c)}"
            f"{' packed' if hit.packed else ''} "
            f"[{', '.join(h.channel for h in hit.channels)}] {hit.id}: {hit.content[:80]}"
        )
    if not result.ranking:
        lines.append(f"  {NOTHING_RECALLED}")
    return "\n".join(lines)


def debug_result(response: pb.RecallResponse) -> tuple[str, DebugResult]:
    explanation = response.explanation
    weights = explanation.weights
    result = DebugResult(
        profile=explanation.profile,
        weights={
            "similarity": weights.similarity,
            "recency": weights.recency,
            "tier_priority": weights.tier_priority,
            "entity_match": weights.entity_match,
        },
        parsed_time_range=_range(explanation, "parsed_time_range"),
        channels=[
            ChannelCandidates(
                channel=_channel(channel.channel),
                elapsed_ms=channel.elapsed_ms,
                error=channel.error,
                candidates=[
                    Candidate(id=memory_id, rank=hit.rank, score=hit.score)
                    for hit, memory_id in zip(channel.hits, channel.memory_ids, strict=False)
                ],
            )
            for channel in explanation.channels
        ],
        ranking=[_ranked(hit) for hit in response.hits],
        channels_degraded=[_channel(c) for c in response.channels_degraded],
        reranked=response.reranked,
        injection_text=response.injection_text,
    )
    return _debug_text(result), result


# ----------------------------------------------------------------------------------------------- forget


class ForgetCandidate(BaseModel):
    id: str
    content: str
    memory_type: str
    kind: str
    subject: str
    created_at: datetime | None
    score: float = Field(description="How well it matches the query, relative to the best match (1).")


class ForgetResult(BaseModel):
    confirmed: bool = Field(
        description="false: nothing was deleted, `candidates` are what a confirmed call would erase; "
        "true: the erasure of `memory_ids` ran, `memories_erased` says what it removed."
    )
    note: str = Field(description="What happened and what to do next, for the model.")
    candidates: list[ForgetCandidate] = Field(
        description="Without confirm: the memories that match the query, best first."
    )
    memory_ids: list[str] = Field(
        description="Without confirm: the candidates' ids (pass those the user agreed to back with "
        "confirm: true); with confirm: the ids whose erasure was asked for."
    )
    erasure_id: str = Field(description="The erasure's audit record; empty without confirm.")
    memories_erased: int = Field(
        description="Memories removed, their versions and derived ones included: 0 when no id was a "
        "memory of this tenant (unknown, already erased, or another tenant's)."
    )
    sessions_erased: int
    turns_erased: int
    replies_erased: int = Field(description="Answers kept for retries that held the erased content.")
    erased_at: datetime | None


def forget_candidates(query: str, response: pb.RecallResponse, limit: int) -> tuple[str, ForgetResult]:
    """What a confirmed memory_forget would erase: the recall's hits that match the query by themselves
    (not the turns next to a match, not a similar-sounding memory below the similarity floor), the best
    `limit` of them. Nothing was deleted."""
    matching = [hit for hit in response.hits if hit.matches_query]
    candidates = [
        ForgetCandidate(
            id=hit.memory.id,
            content=hit.memory.content,
            memory_type=_name(pb.Tier, hit.memory.tier, "TIER_"),
            kind=_name(pb.Kind, hit.memory.kind, "KIND_"),
            subject=hit.memory.subject,
            created_at=_time(hit.memory, "created_at"),
            score=hit.score,
        )
        for hit in matching[:limit]
    ]
    ids = [c.id for c in candidates]
    if candidates:
        note = (
            f"nothing was deleted; call again with confirm: true and memory_ids: {json.dumps(ids)} to "
            "erase these (only the ids the user agreed to, after showing them to the user)"
        )
        if len(matching) > limit:
            note += "; more memories match: once these are settled, call again without confirm to see them"
        lines = [f"Would erase {_memories(len(ids))} matching {query!r}: {note}."]
        for place, c in enumerate(candidates, 1):
            day = f"{c.created_at:%Y-%m-%d}, " if c.created_at is not None else ""
            lines.append(f"{place}. {c.id} ({day}{c.memory_type} {c.kind}) {_shown(c.content)}")
        text = "\n".join(lines)
    else:
        note = "nothing was deleted: no stored memory matches the query, so there is nothing to erase"
        text = f"No memory matches {query!r}: {note}."
    return text, ForgetResult(
        confirmed=False,
        note=note,
        candidates=candidates,
        memory_ids=ids,
        erasure_id="",
        memories_erased=0,
        sessions_erased=0,
        turns_erased=0,
        replies_erased=0,
        erased_at=None,
    )


def erased_result(memory_ids: Sequence[str], response: pb.EraseResponse) -> tuple[str, ForgetResult]:
    """The server's counts as it sent them: 0 when it holds no memory of this tenant under the ids."""
    asked = "the id given" if len(memory_ids) == 1 else f"the {len(memory_ids)} ids given"
    if response.memories:
        note = (
            f"erased {_memories(response.memories)} for {asked}, their versions and what was derived "
            "from them included; they can no longer be recalled"
        )
    else:
        note = f"erased nothing: no memory of this user has {asked} (unknown, already erased, or not theirs)"
    text = f"{note[0].upper()}{note[1:]} (erasure {response.erasure_id})."
    return text, ForgetResult(
        confirmed=True,
        note=note,
        candidates=[],
        memory_ids=list(memory_ids),
        erasure_id=response.erasure_id,
        memories_erased=response.memories,
        sessions_erased=response.sessions,
        turns_erased=response.turns,
        replies_erased=response.replies,
        erased_at=_time(response, "erased_at"),
    )


# ---------------------------------------------------------------------------------------------- changes


class Change(BaseModel):
    id: str = Field(description="Stable: the same event has the same id on every read.")
    cursor: str = Field(description="Resume after this event: pass it as `cursor`.")
    at: datetime | None
    type: str = Field(description="What happened (memory_changes' event_types).")
    memory_id: str = Field(description="The memory changed (empty for recall.served).")
    subject: str
    kind: str
    resolution: str
    version: int
    fields: list[str] = Field(description="The fields the change set.")
    content: str | None = Field(description="Only where the tenant's feed carries content.")
    memory_ids: list[str] = Field(description="recall.served: the memories the recall returned.")
    packed_ids: list[str] = Field(description="recall.served: those packed into its injection text.")
    session_id: str = Field(description="consolidated: the session whose turns became memory_id.")
    erasure_id: str = Field(description="erasure_finished: the erasure that ended.")


class ChangesResult(BaseModel):
    changes: list[Change] = Field(description="The events after `cursor`, oldest first.")
    next_cursor: str = Field(
        description="Pass it as `cursor` in the next call: the events after the last one returned (or, "
        "when none came, after everything up to now)."
    )


def _change(event: pb.ChangeEvent) -> Change:
    return Change(
        id=event.id,
        cursor=event.cursor,
        at=_time(event, "at"),
        type=event.type,
        memory_id=event.memory_id,
        subject=event.subject,
        kind="" if event.kind == pb.KIND_UNSPECIFIED else _name(pb.Kind, event.kind, "KIND_"),
        resolution=event.resolution,
        version=event.version,
        fields=list(event.fields),
        content=event.content if event.HasField("content") else None,
        memory_ids=list(event.memory_ids),
        packed_ids=list(event.packed_ids),
        session_id=event.session_id,
        erasure_id=event.erasure_id,
    )


def changes_result(events: Sequence[pb.ChangeEvent], next_cursor: str) -> tuple[str, ChangesResult]:
    result = ChangesResult(changes=[_change(event) for event in events], next_cursor=next_cursor)
    lines = [f"{len(result.changes)} changes; next cursor {next_cursor}"]
    for change in result.changes:
        target = change.memory_id or f"{len(change.memory_ids)} memories"
        subject = f" subject {change.subject}" if change.subject else ""
        lines.append(f"  {change.cursor} {change.type} {target}{subject} v{change.version}")
    return "\n".join(lines), result
