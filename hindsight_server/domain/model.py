"""The memory record and the value types that travel between the layers.

Standard library only: the transport converts protobuf into these, the store maps rows into them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import TypeAlias

JsonScalar: TypeAlias = str | int | float | bool | None
JsonValue: TypeAlias = JsonScalar | list["JsonValue"] | dict[str, "JsonValue"]
Entities: TypeAlias = Mapping[str, JsonValue]


class Tier(StrEnum):
    WORKING = "working"
    EPISODIC = "episodic"
    SEMANTIC = "semantic"


class Kind(StrEnum):
    FACT = "fact"
    PREFERENCE = "preference"
    EVENT = "event"
    TASK = "task"
    SUMMARY = "summary"
    INSTRUCTION = "instruction"


class Status(StrEnum):
    ACTIVE = "active"
    PENDING = "pending"
    SUPERSEDED = "superseded"
    EXPIRED = "expired"
    DELETED = "deleted"


class EmbeddingState(StrEnum):
    PENDING = "pending"
    READY = "ready"
    DISABLED = "disabled"


class Visibility(StrEnum):
    """Who may see a memory inside its tenant."""

    SHARED = "shared"  # every agent of the tenant
    PRIVATE = "private"  # only the agent that wrote it


class VectorSpace(StrEnum):
    """Which model a vector comes from. Every memory has a multilingual vector (zh + en, cross-lingual);
    a memory also gets its own language's model's (domain/language.OWN_SPACE): English memories an
    English model's, which ranks English far better (LoCoMo dev dense R@5 50.1 against 22.8), Chinese
    memories a second multilingual model's, which sees Chinese differently from the first (MADial dev,
    the two cosines together: R@5 +8 over either alone; BENCHMARKS.md). An English memory of a session
    also gets the English model's vector of it read after the turn before it (ENGLISH_CONTEXT): a turn
    that answers seldom repeats what it answers, the question before it does (LoCoMo dev R@5 +2 beside
    the rest of the ranking). Vectors of different spaces are never compared, but for ENGLISH_CONTEXT
    and ENGLISH: one model, so one query vector serves both."""

    MULTILINGUAL = "multilingual"
    ENGLISH = "english"
    CHINESE = "chinese"
    ENGLISH_CONTEXT = "english_context"


class Channel(StrEnum):
    STRUCTURED = "structured"
    VECTOR = "vector"
    LEXICAL = "lexical"
    SESSION = "session"
    CONTEXT = "context"


@dataclass(frozen=True, slots=True)
class MemoryDraft:
    """What a caller asks to store; validated before it reaches a pipeline."""

    tenant_id: str
    content: str
    tier: Tier
    kind: Kind
    subject: str = ""
    agent_id: str = ""
    session_id: str = ""
    intent: str = ""
    entities: Entities = field(default_factory=dict)
    confidence: float = 1.0
    valid_from: datetime | None = None
    valid_to: datetime | None = None
    expires_at: datetime | None = None
    idempotency_key: str = ""
    occurred_at: datetime | None = None
    visibility: Visibility = Visibility.SHARED


@dataclass(frozen=True, slots=True)
class Memory:
    id: str
    tenant_id: str
    subject: str
    agent_id: str
    session_id: str
    tier: Tier
    kind: Kind
    intent: str
    entities: Entities
    content: str
    confidence: float
    status: Status
    supersedes: str | None
    superseded_by: str | None
    valid_from: datetime | None
    valid_to: datetime | None
    created_at: datetime
    updated_at: datetime
    expires_at: datetime | None
    access_count: int
    last_accessed_at: datetime | None
    idempotency_key: str
    embedding_state: EmbeddingState
    version: int
    seen_count: int = 1
    last_seen_at: datetime | None = None
    derived_from: tuple[str, ...] = ()
    provenance: Entities = field(default_factory=dict)
    visibility: Visibility = Visibility.SHARED


class Resolution(StrEnum):
    CREATED = "created"
    MERGED = "merged"  # a near-identical memory was there: it was seen again
    SUPERSEDED = "superseded"  # the new memory replaced an older version
    REPLAYED = "replayed"  # the idempotency key was used before: the stored memory is returned


@dataclass(frozen=True, slots=True)
class WriteOutcome:
    memory: Memory
    created: bool  # False: an earlier write (same idempotency key) or a merge target was returned
    embedding_truncated: bool = False
    resolution: Resolution = Resolution.CREATED
    reason: str = ""


# The fields Update may change, by their names in the contract.
MUTABLE_FIELDS: frozenset[str] = frozenset(
    {
        "content",
        "entities",
        "intent",
        "confidence",
        "subject",
        "kind",
        "tier",
        "valid_from",
        "valid_to",
        "expires_at",
    }
)


@dataclass(frozen=True, slots=True)
class MemoryPatch:
    """An Update: only the fields named in `mask` change; a masked field left unset is cleared."""

    tenant_id: str
    memory_id: str
    mask: frozenset[str]
    content: str = ""
    entities: Entities = field(default_factory=dict)
    intent: str = ""
    confidence: float = 1.0
    subject: str = ""
    tier: Tier | None = None
    kind: Kind | None = None
    valid_from: datetime | None = None
    valid_to: datetime | None = None
    expires_at: datetime | None = None
    expected_version: int | None = None
    agent_id: str = ""  # the calling agent: another agent's private memory is not found


class ErasureKind(StrEnum):
    SUBJECT = "subject"  # every memory, session and turn of one subject
    TENANT = "tenant"  # everything of the tenant
    MEMORIES = "memories"  # named memories, with their versions and what was derived from them


@dataclass(frozen=True, slots=True)
class ErasureScope:
    tenant_id: str
    kind: ErasureKind
    subject: str = ""  # SUBJECT
    memory_ids: tuple[str, ...] = ()  # MEMORIES


@dataclass(frozen=True, slots=True)
class ErasureRecord:
    """An erasure's audit record: its scope, state and counts (never content)."""

    id: str
    scope: ErasureScope
    state: str
    requested_at: datetime
    finished_at: datetime | None
    memories: int
    sessions: int
    turns: int
    replies: int


@dataclass(frozen=True, slots=True)
class BatchRemoved:
    """What one batch of an erasure removed; `finished`: nothing of its scope is left."""

    memories: int = 0
    sessions: int = 0
    turns: int = 0
    replies: int = 0
    finished: bool = False


# The request field a CommitPosition travels in (as an opaque consistency token).
READ_AFTER_FIELD = "min_consistency_token"


@dataclass(frozen=True, slots=True)
class CommitPosition:
    """Where a change committed in one database's history: a read carrying one must see the change
    (read-your-writes from streaming replicas, store/routing.py)."""

    database: int  # PostgreSQL's system identifier: the same on a primary and its replicas
    lsn: int  # a WAL position at or after the commit


@dataclass(frozen=True, slots=True)
class ListQuery:
    tenant_id: str
    subject: str = ""
    session_id: str = ""
    tiers: Sequence[Tier] = ()
    kinds: Sequence[Kind] = ()
    statuses: Sequence[Status] = (Status.ACTIVE,)
    page_size: int = 50
    after: PageCursor | None = None
    agent_id: str = ""  # the calling agent: sees shared memories and its own private ones
    read_after: CommitPosition | None = None  # the caller's own latest change, which it must see


@dataclass(frozen=True, slots=True)
class PageCursor:
    """Keyset position: the last row of the previous page in (created_at desc, id desc) order."""

    created_at: datetime
    memory_id: str


@dataclass(frozen=True, slots=True)
class Page:
    memories: Sequence[Memory]
    next_cursor: PageCursor | None


@dataclass(frozen=True, slots=True)
class TimeWindow:
    start: datetime | None = None  # inclusive
    end: datetime | None = None  # exclusive

    @property
    def is_open(self) -> bool:
        return self.start is None and self.end is None

    def holds(self, when: datetime) -> bool:
        return (self.start is None or when >= self.start) and (self.end is None or when < self.end)


@dataclass(frozen=True, slots=True)
class ScoreWeights:
    similarity: float
    recency: float
    tier_priority: float
    entity_match: float

    def normalised(self) -> ScoreWeights:
        total = self.similarity + self.recency + self.tier_priority + self.entity_match
        return ScoreWeights(
            self.similarity / total,
            self.recency / total,
            self.tier_priority / total,
            self.entity_match / total,
        )


@dataclass(frozen=True, slots=True)
class RecallQuery:
    tenant_id: str
    text: str
    now: datetime
    top_k: int
    token_budget: int
    weights: ScoreWeights
    profile: str
    min_score: float
    subject: str = ""
    session_id: str = ""
    tiers: Sequence[Tier] = ()
    kinds: Sequence[Kind] = ()
    entities: Entities = field(default_factory=dict)
    window: TimeWindow = field(default_factory=TimeWindow)
    include_superseded: bool = False
    as_of: datetime | None = None
    explain: bool = False
    agent_id: str = ""  # the calling agent: sees shared memories and its own private ones
    read_after: CommitPosition | None = None  # the caller's own latest change, which it must see


@dataclass(frozen=True, slots=True)
class Subject:
    """One subject of one tenant: what the patterns job looks through, one at a time."""

    tenant_id: str
    subject: str


@dataclass(frozen=True, slots=True)
class Scope:
    """Which memories a recall channel may see; shared by every channel so they agree."""

    tenant_id: str
    now: datetime
    subject: str = ""
    tiers: Sequence[Tier] = ()
    kinds: Sequence[Kind] = ()
    include_superseded: bool = False
    as_of: datetime | None = None
    window: TimeWindow = field(default_factory=TimeWindow)
    agent_id: str = ""  # the calling agent: shared memories and its own private ones

    @classmethod
    def of(cls, query: RecallQuery) -> Scope:
        return cls(
            tenant_id=query.tenant_id,
            now=query.now,
            subject=query.subject,
            tiers=query.tiers,
            kinds=query.kinds,
            include_superseded=query.include_superseded,
            as_of=query.as_of,
            window=query.window,
            agent_id=query.agent_id,
        )


@dataclass(frozen=True, slots=True)
class ChannelHit:
    """One candidate as one channel saw it."""

    memory: Memory
    rank: int  # 1-based
    score: float  # the channel's raw score


@dataclass(frozen=True, slots=True)
class ChannelResult:
    channel: Channel
    hits: Sequence[ChannelHit]
    elapsed_ms: float
    error: str = ""  # non-empty: the channel could not answer
    rare_terms: tuple[str, ...] = ()  # lexical: the query's terms rare in the tenant (domain/bm25.py)


@dataclass(frozen=True, slots=True)
class ScoreBreakdown:
    similarity: float
    recency: float
    tier_priority: float
    entity_match: float
    fusion: float
    rerank: float
    final: float
    exact_evidence: float = 0.0  # the share of the query's rare terms the memory holds
    context_lift: float = 0.0  # what neighbouring turns lent to its mix (deviations)
    query_lift: float = 0.0  # what the time and subject the query names added to its mix (deviations)


@dataclass(frozen=True, slots=True)
class RankedMemory:
    memory: Memory
    channels: Mapping[Channel, ChannelHit]
    score: ScoreBreakdown
    packed: bool = False
    directly_relevant: bool = False  # matched the query's words or meaning (not only its session)


@dataclass(frozen=True, slots=True)
class RecallResult:
    hits: Sequence[RankedMemory]
    injection_text: str
    tokens_used: int
    channels_used: Sequence[Channel]
    channels_degraded: Sequence[Channel]
    window: TimeWindow
    channel_results: Sequence[ChannelResult]
    weights: ScoreWeights
    profile: str
    query_truncated: bool = False
    reranked: bool = False  # the inference tier's cross-encoder rescored the best candidates
