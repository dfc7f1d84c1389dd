"""What the write, recall and lifecycle pipelines call on their adapters, stated here where the pipelines
own it, in domain types only: the store (store/ in production) and the inference tier (inference/tier.py).
The adapters satisfy these structurally; the pipelines' tests pass in-memory fakes (tests/support/fakes).
The scope sizes (ScopeCounter) and the planner statistics (PartitionAnalyzer) have theirs beside the
caches that use them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Protocol

from hindsight_server.domain.bm25 import Bm25
from hindsight_server.domain.channels import ChannelRows
from hindsight_server.domain.conflicts import Existing
from hindsight_server.domain.conflicts import Resolution as ConflictResolution
from hindsight_server.domain.conversation import Turn
from hindsight_server.domain.model import (
    EmbeddingState,
    Entities,
    ListQuery,
    Memory,
    MemoryPatch,
    Page,
    Scope,
    Subject,
    VectorSpace,
    WriteOutcome,
)
from hindsight_server.domain.retention import RetentionItem
from hindsight_server.domain.session_summary import SessionSummary
from hindsight_server.domain.sessions import AppendedTurn, IdleSession, SessionRecord, TurnInput
from hindsight_server.domain.vectors import DocumentEmbeddings, FloatVector, QueryVector, WriteVectors
from hindsight_server.pipelines.scope_sizes import ScopeCounter
from hindsight_server.pipelines.statistics import PartitionAnalyzer


class WriteStore(ScopeCounter, PartitionAnalyzer, Protocol):
    """What the write path changes: inserts (as given, or resolving merges and supersedes against each
    memory's peers), edits and the ends of memories' lives. All or nothing per call."""

    async def insert(
        self, memories: Sequence[Memory], embeddings: WriteVectors | None = None, now: datetime | None = None
    ) -> list[WriteOutcome]: ...

    async def insert_resolving(
        self,
        memories: Sequence[Memory],
        embeddings: WriteVectors,
        decide: Callable[[Memory, list[Existing]], ConflictResolution],
        now: datetime,
        *,
        graph_subjects: frozenset[str] = frozenset(),
    ) -> list[WriteOutcome]: ...

    async def update(self, patch: MemoryPatch, now: datetime, embedding_state: EmbeddingState) -> Memory: ...

    async def soft_delete(
        self, tenant_id: str, memory_id: str, now: datetime, agent_id: str = ""
    ) -> Memory: ...

    async def expire_now(self, tenant_id: str, memory_ids: Sequence[str], now: datetime) -> None: ...

    async def decide_pending(
        self, tenant_id: str, memory_id: str, confirm: bool, now: datetime, agent_id: str = ""
    ) -> Memory: ...


class RecallStore(ScopeCounter, Protocol):
    """What recall reads, every channel through the same Scope, and the scope sizes its vector search is
    planned by (ScopeCounter)."""

    async def lexical_channel(
        self, scope: Scope, terms: Sequence[str], limit: int, bm25: Bm25, spaces: Sequence[VectorSpace]
    ) -> ChannelRows: ...

    async def structured_channel(
        self, scope: Scope, entities: Entities, limit: int, spaces: Sequence[VectorSpace]
    ) -> ChannelRows: ...

    async def vector_channel(
        self,
        scope: Scope,
        query: FloatVector,
        limit: int,
        space: VectorSpace,
        spaces: Sequence[VectorSpace],
        *,
        exact: bool = False,
        without_english: bool = False,
    ) -> ChannelRows: ...

    async def session_channel(
        self, scope: Scope, session_id: str, limit: int, spaces: Sequence[VectorSpace]
    ) -> ChannelRows: ...

    async def adjacent_turns(
        self, scope: Scope, memory_ids: Sequence[str], spaces: Sequence[VectorSpace]
    ) -> tuple[ChannelRows, dict[str, tuple[str | None, str | None]]]: ...


class LifecycleBatches(Protocol):
    """What the lifecycle jobs read and change, in bounded batches: each changing call is one transaction
    and returns how many memories (or turns) it changed."""

    async def expire_batch(self, now: datetime, limit: int) -> int: ...

    async def purge_batch(
        self, cutoff: datetime, superseded_before: datetime | None, now: datetime, limit: int
    ) -> int: ...

    async def purge_turns_batch(self, stored_before: datetime, limit: int) -> int: ...

    async def demote_batch(
        self, unused_since: datetime, now: datetime, expires_at: datetime | None, limit: int
    ) -> int: ...

    async def tenants_over(self, quota: int, after: str, limit: int) -> list[tuple[str, int]]:
        """(tenant, live memories) of the tenants after `after` over the quota, in id order."""

    async def retention_items(self, tenant_id: str) -> list[RetentionItem]: ...

    async def evict(self, tenant_id: str, memory_ids: Sequence[str], now: datetime) -> int: ...

    async def subjects_with_episodes(
        self, after: Subject | None, min_episodes: int, now: datetime, limit: int
    ) -> list[Subject]: ...

    async def episodes(self, subject: Subject, now: datetime) -> list[Memory]:
        """A subject's live episodes that have an intent, oldest first."""


class ItemFailures(Protocol):
    """Where a lifecycle job's failing items are recorded, each waiting out a growing backoff."""

    async def failed(
        self, job: str, tenant_id: str, item: str, error: str, now: datetime, backoff_s: tuple[float, float]
    ) -> int:
        """Records one more failure; returns how many times in a row the item failed."""

    async def cleared(self, job: str, tenant_id: str, item: str) -> None: ...


class Embedder(Protocol):
    """Which vector spaces answer now. A call that cannot answer in time raises InferenceUnavailable."""

    def serves(self, space: VectorSpace) -> bool: ...


class DocumentEmbedder(Embedder, Protocol):
    """What the write path embeds memories with."""

    @property
    def available(self) -> bool:
        """The multilingual model answers."""

    @property
    def english_configured(self) -> bool:
        """English memories also get an English model's vector (when it answers)."""

    async def embed_documents(
        self, texts: Sequence[str], timeout_s: float, space: VectorSpace = VectorSpace.MULTILINGUAL
    ) -> DocumentEmbeddings: ...


class QueryEmbedder(Embedder, Protocol):
    async def embed_query(
        self, text: str, timeout_s: float, space: VectorSpace = VectorSpace.MULTILINGUAL, tenant_id: str = ""
    ) -> QueryVector: ...


class Reranker(Protocol):
    @property
    def can_rerank(self) -> bool: ...

    async def rerank(self, query: str, passages: Sequence[str], timeout_s: float) -> list[float]:
        """A cross-encoder's logit per passage."""


class RecallInference(QueryEmbedder, Reranker, Protocol):
    """What recall asks of the inference tier: the query's vectors, and rescoring the best candidates."""


# ---------------------------------- pipelines/sessions.py, replies.py and read.py (activity.py needs none)


class SessionReads(Protocol):
    """What Summarize reads, on a replica when the server has one."""

    async def get(self, tenant_id: str, session_id: str) -> SessionRecord:
        """The session, or NotFound."""

    async def turns(self, tenant_id: str, session_id: str, first: int, last: int | None = None) -> list[Turn]:
        """The turns with first <= index (<= last), in order."""


class SessionTurns(SessionReads, Protocol):
    """What AppendTurn, EndSession and the consolidate job read and change, on the primary."""

    async def append_turn(self, turn: TurnInput, now: datetime) -> AppendedTurn:
        """Numbers and stores the turn, creating its session; a reused idempotency key appends nothing."""

    async def link_turn_memory(self, tenant_id: str, session_id: str, index: int, memory_id: str) -> None: ...

    async def save_summary(
        self, tenant_id: str, session_id: str, summary: SessionSummary, memory_id: str, summarizer: str
    ) -> None:
        """Stores a refreshed summary unless one covering more turns is already there."""

    async def mark_consolidated(
        self, session_id: str, through_turn: int, episode: Memory, now: datetime
    ) -> bool:
        """Records that the turns up to `through_turn` are in the episode; False when a run already did."""

    async def idle_sessions(self, idle_since: datetime, limit: int, now: datetime) -> list[IdleSession]:
        """Sessions with turns in no episode yet and none since `idle_since`, the longest idle first,
        those backing off from a failure left out."""

    async def consolidated_turn_memories(
        self, tenant_id: str, session_id: str, keep_last: int, consolidated_turn: int
    ) -> list[str]:
        """The working memories of turns both in an episode and older than the last `keep_last`."""


class SummaryWriter(Protocol):
    """Words a session summary the rules settled (the optional LLM); None: keep the rules' text."""

    @property
    def name(self) -> str: ...

    async def write(self, turns: Sequence[Turn], rules: SessionSummary) -> str | None: ...


class ReplyLedger(Protocol):
    """The answers kept for requests that carried an idempotency key, per (tenant, method, key)."""

    async def claim(
        self,
        tenant_id: str,
        method: str,
        key: str,
        fingerprint: bytes,
        now: datetime,
        abandoned_after: timedelta,
    ) -> tuple[bool, bytes | None, bytes]:
        """(claimed, stored answer, stored fingerprint): claimed when this call is the first with the key
        or the first one's claim was abandoned; else the first's answer (None while it runs)."""

    async def complete(self, tenant_id: str, method: str, key: str, response: bytes) -> None: ...

    async def release(self, tenant_id: str, method: str, key: str) -> None:
        """Frees a key whose first call failed (one that has an answer stays)."""

    async def forget_older_than(self, before: datetime, limit: int) -> int:
        """Drops up to `limit` entries claimed before `before`; returns how many."""


class MemoryReader(Protocol):
    """What Get, History and List read, on a replica when the server has one."""

    async def get(self, tenant_id: str, memory_id: str, agent_id: str = "") -> Memory:
        """The memory as the agent may see it; another agent's private memory is NotFound."""

    async def history(self, tenant_id: str, memory_id: str, agent_id: str = "") -> list[Memory]:
        """The version chain through the memory, oldest first."""

    async def page(self, query: ListQuery) -> Page: ...
