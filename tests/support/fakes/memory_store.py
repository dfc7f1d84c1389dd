"""An in-memory store behind the pipelines' ports (WriteStore, RecallStore and AccessCounts,
pipelines/ports.py): a dict of memories per tenant and their vectors per space, with the store's rules
where the pipelines depend on them (idempotency replays, peers that are live and alike, merges and
supersedes as `decide` says, scope rules, access counts, all or nothing per call), cosine similarity for
the vector channel, term overlap for the lexical one. The SQL itself is tested against the real
PostgreSQL in tests/store; this is for the pipelines' logic."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

import numpy as np

from hindsight_server.domain.bm25 import Bm25, TermStatistics
from hindsight_server.domain.channels import ChannelRows
from hindsight_server.domain.conflicts import Action, Existing
from hindsight_server.domain.conflicts import Resolution as ConflictResolution
from hindsight_server.domain.errors import Aborted, FailedPrecondition, HindsightError, NotFound
from hindsight_server.domain.lexical import analyse
from hindsight_server.domain.lifecycle import is_mutable
from hindsight_server.domain.model import (
    ChannelHit,
    EmbeddingState,
    Entities,
    Memory,
    MemoryPatch,
    Resolution,
    Scope,
    Status,
    Tier,
    VectorSpace,
    Visibility,
    WriteOutcome,
)
from hindsight_server.domain.search_plan import ScopeSize
from hindsight_server.domain.vectors import COMPANION_SPACES, FloatVector, Vectors, WriteVectors

PEERS_LIMIT = 20  # as many peers as the store's statement hands `decide`


def cosine(a: FloatVector, b: FloatVector) -> float:
    norms = float(np.linalg.norm(a) * np.linalg.norm(b))
    return 0.0 if norms == 0 else float(a @ b) / norms


def seen_by(memory: Memory, agent_id: str) -> bool:
    return memory.visibility is Visibility.SHARED or memory.agent_id == agent_id


def live(memory: Memory, now: datetime) -> bool:
    return memory.status is Status.ACTIVE and (memory.expires_at is None or memory.expires_at > now)


def in_scope(memory: Memory, scope: Scope) -> bool:
    """The recall scope's rules (store/channels.py where_in_scope), without as_of."""
    when = memory.valid_from or memory.created_at
    statuses = (Status.ACTIVE, Status.SUPERSEDED) if scope.include_superseded else (Status.ACTIVE,)
    return (
        memory.tenant_id == scope.tenant_id
        and seen_by(memory, scope.agent_id)
        and memory.status in statuses
        and (memory.expires_at is None or memory.expires_at > scope.now)
        and (not scope.subject or memory.subject == scope.subject)
        and (not scope.tiers or memory.tier in scope.tiers)
        and (not scope.kinds or memory.kind in scope.kinds)
        and (scope.window.start is None or when >= scope.window.start)
        and (scope.window.end is None or when < scope.window.end)
    )


@dataclass
class InMemoryMemoryStore:
    memories: dict[str, dict[str, Memory]] = field(default_factory=dict)  # by tenant, by id
    vectors: Vectors = field(default_factory=dict)  # per space, by memory id
    failing: HindsightError | None = None  # raised by every call: a database that cannot answer
    counted: list[tuple[str, str]] = field(default_factory=list)  # the scopes sized, in order
    analyzed: list[str] = field(default_factory=list)  # the tenants whose statistics were refreshed

    def add(self, memory: Memory, vectors: Mapping[VectorSpace, FloatVector] | None = None) -> None:
        """Stores a memory as given (a test's starting state)."""
        self.memories.setdefault(memory.tenant_id, {})[memory.id] = memory
        for space, vector in (vectors or {}).items():
            self.vectors.setdefault(space, {})[memory.id] = vector

    def get(self, tenant_id: str, memory_id: str, agent_id: str = "") -> Memory:
        memory = self.memories.get(tenant_id, {}).get(memory_id)
        if memory is None or not seen_by(memory, agent_id):
            raise NotFound("memory", memory_id)
        return memory

    def of_tenant(self, tenant_id: str) -> list[Memory]:
        """The tenant's memories, oldest write first."""
        return list(self.memories.get(tenant_id, {}).values())

    def _answer(self) -> None:
        if self.failing is not None:
            raise self.failing

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[None]:
        """All or nothing: a call that raises leaves the store as it found it."""
        self._answer()
        memories = {tenant: dict(by_id) for tenant, by_id in self.memories.items()}
        vectors = {space: dict(by_id) for space, by_id in self.vectors.items()}
        try:
            yield
        except BaseException:
            self.memories, self.vectors = memories, vectors
            raise

    def _store(self, memory: Memory, vectors: Mapping[VectorSpace, FloatVector | None]) -> WriteOutcome:
        self.add(memory, {space: v for space, v in vectors.items() if v is not None})
        return WriteOutcome(memory, created=True)

    def _replayed(self, memory: Memory) -> WriteOutcome | None:
        """The memory an earlier write with this idempotency key created (store/writes.py _replayed)."""
        if not memory.idempotency_key:
            return None
        stored = next(
            (m for m in self.of_tenant(memory.tenant_id) if m.idempotency_key == memory.idempotency_key),
            None,
        )
        if stored is None:
            return None
        if not seen_by(stored, memory.agent_id):
            raise FailedPrecondition("idempotency_key was used for another agent's memory")
        return WriteOutcome(stored, created=False, resolution=Resolution.REPLAYED)

    def _peers(self, memory: Memory, vector: FloatVector | None, now: datetime) -> list[Existing]:
        """The memory's live peers (same subject, kind, tier and visibility), nearest by meaning first."""
        peers = [
            m
            for m in self.of_tenant(memory.tenant_id)
            if (m.subject, m.kind, m.tier, m.visibility)
            == (memory.subject, memory.kind, memory.tier, memory.visibility)
            and live(m, now)
            and seen_by(m, memory.agent_id)
        ]
        stored = self.vectors.get(VectorSpace.MULTILINGUAL, {})
        found = [
            Existing.of(m, None if vector is None or m.id not in stored else cosine(vector, stored[m.id]))
            for m in peers
        ]
        found.sort(key=lambda peer: -peer.similarity if peer.similarity is not None else np.inf)
        return found[:PEERS_LIMIT]

    def _live_target(self, tenant_id: str, memory_id: str | None, now: datetime) -> Memory | None:
        target = self.memories.get(tenant_id, {}).get(memory_id or "")
        return target if target is not None and live(target, now) else None

    # WriteStore

    async def insert(
        self, memories: Sequence[Memory], embeddings: WriteVectors | None = None, now: datetime | None = None
    ) -> list[WriteOutcome]:
        with self._transaction():
            return [
                self._replayed(m) or self._store(m, _row(embeddings or {}, index))
                for index, m in enumerate(memories)
            ]

    async def insert_resolving(
        self,
        memories: Sequence[Memory],
        embeddings: WriteVectors,
        decide: Callable[[Memory, list[Existing]], ConflictResolution],
        now: datetime,
        *,
        graph_subjects: frozenset[str] = frozenset(),
    ) -> list[WriteOutcome]:
        outcomes = []
        with self._transaction():
            for index, memory in enumerate(memories):
                replayed = self._replayed(memory)
                if replayed is not None:
                    outcomes.append(replayed)
                    continue
                vectors = _row(embeddings, index)
                resolution = decide(memory, self._peers(memory, vectors.get(VectorSpace.MULTILINGUAL), now))
                target = self._live_target(memory.tenant_id, resolution.target_id, now)
                if resolution.action is Action.MERGE and target is not None:
                    outcomes.append(self._seen_again(target, memory, resolution.reason, now))
                elif resolution.action is Action.SUPERSEDE and target is not None:
                    outcomes.append(self._supersede(target, memory, vectors, resolution.reason, now))
                else:
                    outcomes.append(self._store(memory, vectors))
        return outcomes

    def _seen_again(self, target: Memory, said: Memory, reason: str, now: datetime) -> WriteOutcome:
        expires_at = (
            None
            if target.expires_at is None or said.expires_at is None
            else max(target.expires_at, said.expires_at)
        )
        merged = replace(
            target,
            seen_count=target.seen_count + 1,
            last_seen_at=now,
            updated_at=now,
            version=target.version + 1,
            confidence=max(target.confidence, said.confidence),
            expires_at=expires_at,
        )
        self.add(merged)
        return WriteOutcome(merged, created=False, resolution=Resolution.MERGED, reason=reason)

    def _supersede(
        self,
        old: Memory,
        new: Memory,
        vectors: Mapping[VectorSpace, FloatVector | None],
        reason: str,
        now: datetime,
    ) -> WriteOutcome:
        stored = self._store(replace(new, supersedes=old.id), vectors)
        valid_from = new.valid_from or now
        ends = old.valid_to is None and (old.valid_from is None or old.valid_from < valid_from)
        self.add(
            replace(
                old,
                status=Status.SUPERSEDED,
                superseded_by=new.id,
                updated_at=now,
                version=old.version + 1,
                valid_to=valid_from if ends else old.valid_to,
            )
        )
        return replace(stored, resolution=Resolution.SUPERSEDED, reason=reason)

    async def update(self, patch: MemoryPatch, now: datetime, embedding_state: EmbeddingState) -> Memory:
        with self._transaction():
            current = self.get(patch.tenant_id, patch.memory_id, patch.agent_id)
            if not is_mutable(current.status):
                raise FailedPrecondition(f"memory {current.id!r} is {current.status.value}")
            if patch.expected_version is not None and patch.expected_version != current.version:
                raise Aborted(f"memory {current.id!r} is at version {current.version}")
            changes = {path: getattr(patch, path) for path in patch.mask}
            if "content" in patch.mask:  # new text: its vectors are recomputed
                changes["embedding_state"] = embedding_state
                for by_id in self.vectors.values():
                    by_id.pop(current.id, None)
            updated = replace(current, **changes, updated_at=now, version=current.version + 1)
            self.add(updated)
            return updated

    async def soft_delete(self, tenant_id: str, memory_id: str, now: datetime, agent_id: str = "") -> Memory:
        with self._transaction():
            current = self.get(tenant_id, memory_id, agent_id)
            if current.status is Status.DELETED:
                return current  # deleting twice is not an error
            deleted = replace(current, status=Status.DELETED, updated_at=now, version=current.version + 1)
            self.add(deleted)
            return deleted

    async def expire_now(self, tenant_id: str, memory_ids: Sequence[str], now: datetime) -> None:
        with self._transaction():
            for memory_id in memory_ids:
                memory = self.memories.get(tenant_id, {}).get(memory_id)
                lives_on = memory is not None and (memory.expires_at is None or memory.expires_at > now)
                if memory is not None and lives_on and is_mutable(memory.status):
                    self.add(replace(memory, expires_at=now, updated_at=now, version=memory.version + 1))

    async def decide_pending(
        self, tenant_id: str, memory_id: str, confirm: bool, now: datetime, agent_id: str = ""
    ) -> Memory:
        with self._transaction():
            current = self.get(tenant_id, memory_id, agent_id)
            if current.status is not Status.PENDING:
                raise FailedPrecondition(f"memory {memory_id!r} is {current.status.value}, not pending")
            status = Status.ACTIVE if confirm else Status.DELETED
            decided = replace(current, status=status, updated_at=now, version=current.version + 1)
            self.add(decided)
            return decided

    async def analyze_partition_of(self, tenant_id: str) -> None:
        self._answer()
        self.analyzed.append(tenant_id)

    # AccessCounts

    async def record_access(self, accesses: Sequence[tuple[str, str, int, datetime]]) -> None:
        with self._transaction():
            for tenant_id, memory_id, count, at in accesses:
                memory = self.memories.get(tenant_id, {}).get(memory_id)
                if memory is not None:  # as greatest() in SQL, a missing last access loses to any
                    last = at if memory.last_accessed_at is None else max(memory.last_accessed_at, at)
                    self.add(replace(memory, access_count=memory.access_count + count, last_accessed_at=last))

    # RecallStore

    async def scope_size(self, tenant_id: str, subject: str) -> ScopeSize:
        self._answer()
        self.counted.append((tenant_id, subject))
        multilingual = self.vectors.get(VectorSpace.MULTILINGUAL, {})
        english = self.vectors.get(VectorSpace.ENGLISH, {})
        embedded = [
            m.id
            for m in self.of_tenant(tenant_id)
            if m.status is Status.ACTIVE and (not subject or m.subject == subject) and m.id in multilingual
        ]
        table_rows = sum(len(by_id) for by_id in self.memories.values())
        return ScopeSize(len(embedded), sum(i not in english for i in embedded), table_rows)

    def _seen(self, scope: Scope) -> list[Memory]:
        self._answer()
        return [m for m in self.of_tenant(scope.tenant_id) if in_scope(m, scope)]

    def _rows(
        self, scored: Iterable[tuple[float, Memory]], limit: int, spaces: Sequence[VectorSpace]
    ) -> ChannelRows:
        """The best `limit` hits, and each one's vector in the first of `spaces` it has one in."""
        best = sorted(scored, key=lambda pair: (-pair[0], -pair[1].created_at.timestamp()))[:limit]
        return ChannelRows(
            [ChannelHit(m, rank, score) for rank, (score, m) in enumerate(best, start=1)],
            self._vectors_of([m for _, m in best], spaces),
        )

    def _vectors_of(self, memories: Sequence[Memory], spaces: Sequence[VectorSpace]) -> Vectors:
        """As store/channels.vector_columns reads them: a memory's vector in the first judging space it
        has one in, and in each companion space whatever else it has."""
        found: Vectors = {}
        judging = [s for s in spaces if s not in COMPANION_SPACES]
        for memory in memories:
            first = next((s for s in judging if memory.id in self.vectors.get(s, {})), None)
            companions = [s for s in spaces if s in COMPANION_SPACES and memory.id in self.vectors.get(s, {})]
            for space in [first, *companions] if first is not None else companions:
                found.setdefault(space, {})[memory.id] = self.vectors[space][memory.id]
        return found

    async def term_statistics(self, tenant_id: str, terms: Sequence[str]) -> TermStatistics | None:
        self._answer()
        documents = [analyse(m.content) for m in self.of_tenant(tenant_id)]
        if not documents:
            return None
        df = {term: sum(term in d.distinct for d in documents) for term in terms}
        return TermStatistics(len(documents), sum(d.length for d in documents), df)

    async def lexical_channel(
        self, scope: Scope, terms: Sequence[str], limit: int, bm25: Bm25, spaces: Sequence[VectorSpace]
    ) -> ChannelRows:
        wanted = set(terms)
        scored = [(float(len(wanted & analyse(m.content).distinct)), m) for m in self._seen(scope)]
        return self._rows([(score, m) for score, m in scored if score > 0], limit, spaces)

    async def structured_channel(
        self, scope: Scope, entities: Entities, limit: int, spaces: Sequence[VectorSpace]
    ) -> ChannelRows:
        matched = [
            (float(sum(m.entities.get(k) == v for k, v in entities.items())), m) for m in self._seen(scope)
        ]
        return self._rows([(s, m) for s, m in matched if s > 0 or not entities], limit, spaces)

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
    ) -> ChannelRows:
        in_space = self.vectors.get(space, {})
        english = self.vectors.get(VectorSpace.ENGLISH, {})
        scored = [
            (cosine(query, in_space[m.id]), m)
            for m in self._seen(scope)
            if m.id in in_space and not (without_english and m.id in english)
        ]
        return self._rows(scored, limit, spaces)

    async def session_channel(
        self, scope: Scope, session_id: str, limit: int, spaces: Sequence[VectorSpace]
    ) -> ChannelRows:
        own = [
            m
            for m in self._seen(scope)
            if m.session_id == session_id and m.tier in (Tier.WORKING, Tier.EPISODIC)
        ]
        return self._rows([(m.created_at.timestamp(), m) for m in own], limit, spaces)

    async def adjacent_turns(
        self, scope: Scope, memory_ids: Sequence[str], spaces: Sequence[VectorSpace]
    ) -> tuple[ChannelRows, dict[str, tuple[str | None, str | None]]]:
        seen = self._seen(scope)
        around: dict[str, tuple[str | None, str | None]] = {}
        found: dict[str, Memory] = {}
        for memory_id in memory_ids:
            memory = next((m for m in seen if m.id == memory_id and m.session_id), None)
            if memory is None:
                continue
            turns = sorted(
                (m for m in seen if m.session_id == memory.session_id), key=lambda m: (m.created_at, m.id)
            )
            at = turns.index(memory)
            before = turns[at - 1] if at > 0 else None
            after = turns[at + 1] if at + 1 < len(turns) else None
            around[memory_id] = (before.id if before else None, after.id if after else None)
            found.update((m.id, m) for m in (before, after) if m is not None)
        hits = [ChannelHit(m, 1, 0.0) for m in found.values()]
        return ChannelRows(hits, self._vectors_of(list(found.values()), spaces)), around


def _row(embeddings: WriteVectors, index: int) -> dict[VectorSpace, FloatVector | None]:
    """One memory's vectors out of a write's, per space."""
    return {space: vectors[index] for space, vectors in embeddings.items()}
