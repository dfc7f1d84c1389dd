"""What the write, recall and lifecycle pipelines call on their adapters, stated here where the pipelines
own it, in domain types only: the store (store/ in production) and the inference tier (inference/tier.py).
The adapters satisfy these structurally; the pipelines' tests pass in-memory fakes (tests/support/fakes).
The scope sizes (ScopeCounter) and the planner statistics (PartitionAnalyzer) have theirs beside the
caches that use them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Protocol

from hindsight_server.domain.audit import AuditPage, AuditQuery, RecallServed
from hindsight_server.domain.bm25 import Bm25
from hindsight_server.domain.channels import ChannelRows
from hindsight_server.domain.conflicts import Existing
from hindsight_server.domain.conflicts import Resolution as ConflictResolution
from hindsight_server.domain.model import (
    BatchRemoved,
    EmbeddingState,
    Entities,
    ErasureRecord,
    ErasureScope,
    Memory,
    MemoryPatch,
    Scope,
    Subject,
    VectorSpace,
    WriteOutcome,
)
from hindsight_server.domain.principal import ApiKeyRecord
from hindsight_server.domain.principal import Scope as KeyScope
from hindsight_server.domain.retention import RetentionItem
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


# The erasure, access tracking, item isolation, scope sizes, API key and recall audit pipelines.


class ErasureLog(Protocol):
    """What an erasure records and removes: its audit record (never content), and its scope's data one
    batch (one transaction) at a time."""

    async def begin(
        self, scope: ErasureScope, reason: str, requested_by: str, request_id: str, now: datetime
    ) -> ErasureRecord:
        """A new record, running, its heartbeat at `now`."""

    async def get(self, tenant_id: str, erasure_id: str) -> ErasureRecord:
        """NotFound when the tenant has no such erasure."""

    async def stale(self, heartbeat_before: datetime, limit: int) -> list[ErasureRecord]:
        """Running erasures whose last batch is older than `heartbeat_before`, the oldest first."""

    async def finished_since(self, after: datetime | None) -> tuple[datetime | None, list[str]]:
        """When the latest erasure finished, and the tenants with one finished after `after` (none
        without an `after`)."""

    async def remove_batch(self, erasure: ErasureRecord, limit: int, now: datetime) -> BatchRemoved:
        """Up to `limit` of the scope's memories with everything linked to them, or once none is left
        its sessions and kept answers; moves the heartbeat on, adds to the counts, and marks the record
        done with the batch that finishes."""


class AccessCounts(Protocol):
    """Where recall's accesses of memories are counted, for retention scoring."""

    async def record_access(self, accesses: Sequence[tuple[str, str, int, datetime]]) -> None:
        """Adds each (tenant, memory id, count, last access) to that memory's access count and moves its
        last access on (never back), in one transaction; ids that name no memory are skipped."""


class ApiKeyTable(Protocol):
    """Where API keys are kept, by key id: only the hash of each secret."""

    async def add(
        self,
        key_id: str,
        tenant_id: str,
        key_hash: bytes,
        label: str,
        now: datetime,
        *,
        scopes: frozenset[KeyScope],
        agent_id: str,
    ) -> None: ...

    async def find(self, key_id: str) -> ApiKeyRecord | None:
        """The key, revoked or not; None when no key has the id."""

    async def list(self, tenant_id: str = "") -> list[ApiKeyRecord]:
        """The tenant's keys ("": every tenant's), by tenant, oldest first."""

    async def revoke(self, key_id: str, now: datetime) -> bool:
        """False when no active key has the id."""


class AuditLog(Protocol):
    """Where the recall audit's entries are kept, each with its recall.served event."""

    async def record(self, entries: Sequence[RecallServed]) -> None:
        """The entries, in one transaction; those already recorded (a retried write that had committed)
        are skipped, so none is recorded twice."""

    async def page(self, query: AuditQuery) -> AuditPage:
        """Up to page_size entries of the query, newest first (by time, then id), after its cursor."""

    async def trim_batch(self, before: datetime, limit: int) -> int:
        """Deletes up to `limit` entries recorded before `before` (any tenant); returns how many."""
