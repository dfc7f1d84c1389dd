"""What every pipeline calls on its adapters, stated here where the pipelines own it, in domain types
only: the stores (store/ in production), the inference tier (inference/tier.py), the LLM summarizer and
the webhook sender (outbound/). The adapters satisfy these structurally (mypy checks it where
process/builders.py hands them over); the pipelines' unit tests pass in-memory fakes
(tests/support/fakes) instead. The scope sizes (ScopeCounter) and the planner statistics
(PartitionAnalyzer) have theirs beside the caches that use them; read routing (ReadRoute) beside the
replicas, in store/routing.py. A section per group of pipelines, in the order write, recall, lifecycle,
then the rest."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import date, datetime, timedelta
from typing import Protocol

from hindsight_server.domain.audit import AuditPage, AuditQuery, RecallServed
from hindsight_server.domain.bm25 import Bm25, TermStatistics
from hindsight_server.domain.channels import ChannelRows
from hindsight_server.domain.conflicts import Existing
from hindsight_server.domain.conflicts import Resolution as ConflictResolution
from hindsight_server.domain.conversation import Turn
from hindsight_server.domain.feed import ChangeEvent, Cursor, FeedQuery
from hindsight_server.domain.jobs import JobRun
from hindsight_server.domain.model import (
    BatchRemoved,
    EmbeddingState,
    Entities,
    ErasureRecord,
    ErasureScope,
    ListQuery,
    Memory,
    MemoryPatch,
    Page,
    Scope,
    Subject,
    VectorSpace,
    WriteOutcome,
)
from hindsight_server.domain.portability import ExportQuery, PortableMemory
from hindsight_server.domain.principal import ApiKeyRecord
from hindsight_server.domain.principal import Scope as KeyScope
from hindsight_server.domain.retention import RetentionItem
from hindsight_server.domain.scope_index import IndexedMemory, ScopeChanges
from hindsight_server.domain.session_summary import SessionSummary
from hindsight_server.domain.sessions import AppendedTurn, IdleSession, SessionRecord, TurnInput
from hindsight_server.domain.vectors import (
    ClaimRequest,
    DocumentEmbeddings,
    EmbeddingClaim,
    FloatVector,
    PendingContext,
    PendingEmbedding,
    QueryVector,
    WriteVectors,
)
from hindsight_server.domain.webhooks import (
    DeliveryOutcome,
    Endpoint,
    EndpointFilters,
    Failure,
    Lease,
    Secrets,
    WebhookUrl,
)
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

    async def term_statistics(self, tenant_id: str, terms: Sequence[str]) -> TermStatistics | None: ...

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


class ScopeIndexStore(Protocol):
    """What a server's index of a subject, or of a whole tenant (the subject ""), reads
    (pipelines/hot_scopes.py): the snapshot horizon, how many memories it holds (up to a limit), its
    memories a page at a time (newest first), what changed since a horizon, and memories by key."""

    async def horizon(self) -> int: ...

    async def scope_rows(self, tenant_id: str, subject: str, limit: int) -> int: ...

    async def subject_page(
        self, tenant_id: str, subject: str, after: IndexedMemory | None, limit: int
    ) -> list[IndexedMemory]: ...

    async def changes(self, tenant_id: str, subject: str, since: int, limit: int) -> ScopeChanges: ...

    async def indexed(self, tenant_id: str, memory_ids: Sequence[str]) -> list[IndexedMemory]: ...


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

    def configured(self, space: VectorSpace) -> bool:
        """The deployment embeds in the space (a language's own model: whether or not it answers now)."""

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

    @property
    def rerank_on_gpu(self) -> bool:
        """The cross-encoder runs on a GPU: recall reranks by default (domain/rerank.py)."""

    async def rerank(self, query: str, passages: Sequence[str], timeout_s: float) -> list[float]:
        """A cross-encoder's logit per passage."""


class RecallInference(QueryEmbedder, Reranker, Protocol):
    """What recall asks of the inference tier: the query's vectors, and rescoring the best candidates."""


# ------------------------------------------------------------------------------------------------------
# The change feed, webhooks, the job runner, the embedding backfill and export/import (feed.py,
# webhooks.py, jobs.py, backfill.py, portability.py).


class FeedReader(Protocol):
    """What reads a tenant's change feed in its resumable order (store/feed.py says why it misses none)."""

    async def read(self, query: FeedQuery, after: Cursor, limit: int) -> tuple[list[ChangeEvent], Cursor]:
        """Up to `limit` matching events after `after`, and the position to continue from."""

    async def horizon(self) -> Cursor:
        """Now: the position before every event not yet servable."""

    async def trimmed(self, tenant_id: str) -> Cursor | None:
        """The last position retention dropped for the tenant (None: none dropped)."""


class FeedLog(FeedReader, Protocol):
    """The feed, and what its retention job changes: daily partitions made ahead and dropped whole, the
    default partition trimmed by age. A step whose lock is busy answers False or None."""

    async def partitions(self) -> list[date]: ...

    async def add_partition(self, day: date) -> bool: ...

    async def drop_partition(self, day: date) -> int | None: ...

    async def trim_default(self, before: datetime, limit: int) -> int: ...


class WebhookEndpoints(Protocol):
    """A tenant's webhook endpoints, as the Webhooks RPCs change them. None or False: no such endpoint."""

    async def add(
        self,
        tenant_id: str,
        url: str,
        filters: EndpointFilters,
        viewer: str | None,
        secret: str,
        cursor: Cursor,
        now: datetime,
        max_per_tenant: int,
    ) -> Endpoint | None:
        """A new endpoint delivering from `cursor`; None when the tenant has `max_per_tenant` already."""

    async def endpoints(self, tenant_id: str) -> list[Endpoint]: ...

    async def get(self, tenant_id: str, endpoint_id: str) -> Endpoint | None: ...

    async def remove(self, tenant_id: str, endpoint_id: str) -> bool: ...

    async def rotate(
        self, tenant_id: str, endpoint_id: str, secret: str, previous_until: datetime
    ) -> Endpoint | None: ...

    async def replay(
        self, tenant_id: str, endpoint_id: str, cursor: Cursor, now: datetime
    ) -> Endpoint | None:
        """Delivers again from `cursor` at once, with a clean retry state (a dead endpoint lives again)."""


class WebhookLeases(Protocol):
    """The leases under which one server at a time delivers an endpoint's events, timed by the store's
    clock. Every change is fenced: it applies only while `holder` holds the lease and the cursor is still
    the one it delivered from (None or False otherwise)."""

    async def claim(self, holder: str, lease_s: float, now: datetime, limit: int) -> list[Lease]: ...

    async def renew(
        self, endpoint_id: str, holder: str, lease_s: float, cursor: Cursor
    ) -> Secrets | None: ...

    async def advance(
        self, endpoint_id: str, holder: str, expected: Cursor, cursor: Cursor, delivered: int
    ) -> bool: ...

    async def failed(
        self, endpoint_id: str, holder: str, cursor: Cursor, failure: Failure, error: str
    ) -> None: ...

    async def release(self, endpoint_id: str, holder: str, next_attempt_at: datetime) -> None: ...


class WebhookPoster(Protocol):
    """Where deliveries go over HTTP (outbound/webhook_http.py), to addresses the policy allows only."""

    async def resolve(self, url: WebhookUrl, field: str = "url") -> str:
        """The address to connect to; InvalidArgument naming `field` when it is refused or unknown."""

    async def post(self, url: WebhookUrl, headers: Mapping[str, str], body: bytes) -> DeliveryOutcome: ...


class JobLedger(Protocol):
    """Who runs a job (one holder at a time, across servers) and when each job last ran."""

    def exclusive(self, job: str) -> AbstractAsyncContextManager[bool]:
        """Holds the job's lock for the block; yields False at once when another holder has it."""

    async def started(self, job: str, at: datetime, server: str) -> None: ...

    async def finished(self, job: str, at: datetime, processed: int) -> None: ...

    async def last_runs(self) -> dict[str, JobRun]: ...


class EmbeddingClaims(Protocol):
    """The memories waiting for vectors, leased to the embedding workers while their vectors are computed."""

    async def claim_pending_embeddings(self, request: ClaimRequest) -> EmbeddingClaim:
        """Pending memories not leased or backing off, leased: the tenants waiting share the claim,
        each its oldest first (ClaimRequest)."""

    async def complete(
        self,
        rows: Sequence[PendingEmbedding],
        vectors: Mapping[VectorSpace, Mapping[str, FloatVector]],
        failed: Mapping[str, timedelta],
    ) -> None:
        """The vectors computed, where a memory still holds the content embedded; a failed one waits its
        backoff and counts one more attempt."""

    async def claim_contexts(self, limit: int, lease: timedelta) -> list[PendingContext]:
        """English memories of a session lacking their context vector, oldest first, leased for
        `lease`, each with the turn before it."""

    async def complete_contexts(
        self, rows: Sequence[PendingContext], vectors: Mapping[str, FloatVector | None]
    ) -> None:
        """Each row's context vector (None: its own English vector stands in), where the memory still
        holds the content embedded and has none yet."""


class ExportPages(Protocol):
    """One export's view of the tenant, as it was when the export began, whatever is written meanwhile."""

    async def count(self) -> int:
        """How many memories the query selects."""

    def pages(self, page_size: int) -> AsyncIterator[list[PortableMemory]]:
        """The selected memories in id order, `page_size` at a time."""


class ExportSnapshots(Protocol):
    def snapshot(self, query: ExportQuery) -> AbstractAsyncContextManager[ExportPages]: ...


class ImportWrites(Protocol):
    async def import_batch(
        self, memories: Sequence[Memory], embeddings: WriteVectors, now: datetime
    ) -> set[str]:
        """Exported memories, ids and links final, in one transaction: each inserted unless one with its
        id or idempotency key is here; then each version link set both ways where both ends are here
        (InvalidArgument where they would close a loop). Returns the ids inserted."""


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


# ------------------------------------------------------------------------------------------------------
# Erasure, access tracking, API keys and the recall audit (erasure.py, access.py, tenants.py, audit.py;
# item_isolation.py takes ItemFailures above, scope_sizes.py its ScopeCounter).


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
