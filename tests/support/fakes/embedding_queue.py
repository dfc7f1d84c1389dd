"""The embedding queue over the in-memory store (EmbeddingClaims, pipelines/ports.py), with the rules of
store/embeddings.py: the tenants waiting share each claim in turn, each its oldest pending memories, not
offered again while leased or backing off, the vectors each lacks, vectors kept only where the memory
still holds the content embedded, ready once it has every one, and a failure's backoff counted in its
attempts."""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from hindsight_server.domain.clock import Clock
from hindsight_server.domain.language import ENGLISH, OWN_SPACE, language
from hindsight_server.domain.model import EmbeddingState, Memory, Status, VectorSpace
from hindsight_server.domain.vectors import (
    ClaimRequest,
    EmbeddingClaim,
    FloatVector,
    PendingContext,
    PendingEmbedding,
    ShareRounds,
    more_due,
)
from tests.support.fakes.memory_store import InMemoryMemoryStore


def _age(memory: Memory) -> tuple[datetime, str]:
    return memory.created_at, memory.id


def digest(content: str) -> str:
    return hashlib.md5(content.encode()).hexdigest()


@dataclass
class InMemoryEmbeddingQueue(InMemoryMemoryStore):
    clock: Clock | None = None  # the database's now(), which times the leases and backoffs
    retry_at: dict[str, datetime] = field(default_factory=dict)  # leased or backing off until, by id
    attempts: dict[str, int] = field(default_factory=dict)  # failed embeddings, by id
    context_retry_at: dict[str, datetime] = field(default_factory=dict)  # context vectors leased, by id

    def _now(self) -> datetime:
        assert self.clock is not None, "the queue needs a clock"
        return self.clock()

    def _lacks(self, memory: Memory, space: VectorSpace) -> bool:
        return memory.id not in self.vectors.get(space, {})

    def _lacks_own(self, memory: Memory, spaces: Collection[VectorSpace]) -> VectorSpace | None:
        """The memory's own space when it is among `spaces` and the memory lacks its vector."""
        own = OWN_SPACE[language(memory.content)]
        return own if own in spaces and self._lacks(memory, own) else None

    async def claim_pending_embeddings(self, request: ClaimRequest) -> EmbeddingClaim:
        limit, after_tenant = request.limit, request.after_tenant
        self._answer()
        now = self._now()
        waiting = sorted(
            tenant
            for tenant, by_id in self.memories.items()
            if any(
                m.embedding_state is EmbeddingState.PENDING and self.retry_at.get(m.id, now) <= now
                for m in by_id.values()
            )
        )
        tenants = ([t for t in waiting if t > after_tenant] + [t for t in waiting if t <= after_tenant])[
            :limit
        ]
        if not tenants:
            return EmbeddingClaim([], more=False, last_tenant=after_tenant)
        due: list[Memory] = []
        rounds = ShareRounds(tenants, limit)
        while (round_ := rounds.next()) is not None:
            active, share = round_
            taken = {tenant: self._due(tenant, request, now, share) for tenant in active}
            picked = sorted((m for rows in taken.values() for m in rows), key=_age)
            for memory in picked:
                self.retry_at[memory.id] = now + request.lease
            due += picked
            rounds.took({tenant: len(rows) for tenant, rows in taken.items()})
        claimed = []
        for memory in due:
            missing = {VectorSpace.MULTILINGUAL} if self._lacks(memory, VectorSpace.MULTILINGUAL) else set()
            if (needed := self._lacks_own(memory, request.own)) is not None:
                missing.add(needed)
            wants_context = (
                bool(memory.session_id)
                and language(memory.content) == ENGLISH
                and self._lacks(memory, VectorSpace.ENGLISH_CONTEXT)
            )
            claimed.append(
                PendingEmbedding(
                    memory.id,
                    memory.tenant_id,
                    memory.subject,
                    memory.content,
                    not self._lacks(memory, VectorSpace.ENGLISH),
                    frozenset(missing),
                    self.attempts.get(memory.id, 0),
                    digest(memory.content),
                    wants_context,
                    self._previous(memory) if wants_context else None,
                )
            )
        return EmbeddingClaim(claimed, more=more_due(len(due), limit, len(tenants)), last_tenant=tenants[-1])

    def _due(self, tenant: str, request: ClaimRequest, now: datetime, share: int) -> list[Memory]:
        return sorted(
            (
                m
                for m in self.memories[tenant].values()
                if m.embedding_state is EmbeddingState.PENDING
                and self.retry_at.get(m.id, now) <= now
                and (
                    self._lacks(m, VectorSpace.MULTILINGUAL)
                    or self._lacks_own(m, request.own_now) is not None
                    or self._lacks_own(m, request.own) is None
                )
            ),
            key=_age,
        )[:share]

    async def complete(
        self,
        rows: Sequence[PendingEmbedding],
        vectors: Mapping[VectorSpace, Mapping[str, FloatVector]],
        failed: Mapping[str, timedelta],
    ) -> None:
        self._answer()
        now = self._now()
        for row in rows:
            memory = self.memories.get(row.tenant_id, {}).get(row.memory_id)
            if memory is None or memory.embedding_state is not EmbeddingState.PENDING:
                continue
            if digest(memory.content) != row.digest:  # updated since the claim: its new text waits
                continue
            for space, by_id in vectors.items():
                if row.memory_id in by_id:
                    self.vectors.setdefault(space, {})[row.memory_id] = by_id[row.memory_id]
            if all(row.memory_id in vectors.get(space, {}) for space in row.missing):
                self.add(replace(memory, embedding_state=EmbeddingState.READY))
            if row.memory_id in failed:
                self.retry_at[row.memory_id] = now + failed[row.memory_id]
                self.attempts[row.memory_id] = self.attempts.get(row.memory_id, 0) + 1
            else:
                self.retry_at.pop(row.memory_id, None)
                self.attempts.pop(row.memory_id, None)

    async def claim_contexts(self, limit: int, lease: timedelta) -> list[PendingContext]:
        self._answer()
        now = self._now()
        context = VectorSpace.ENGLISH_CONTEXT
        due = sorted(
            (
                m
                for by_id in self.memories.values()
                for m in by_id.values()
                if m.session_id
                and not self._lacks(m, VectorSpace.ENGLISH)
                and self._lacks(m, context)
                and self.context_retry_at.get(m.id, now) <= now
            ),
            key=_age,
        )[:limit]
        for memory in due:
            self.context_retry_at[memory.id] = now + lease
        return [
            PendingContext(m.id, m.tenant_id, m.content, self._previous(m), digest(m.content)) for m in due
        ]

    def _previous(self, memory: Memory) -> str | None:
        """The content of the session's memory recorded last before this one that its readers may read."""
        before = [
            m
            for m in self.memories[memory.tenant_id].values()
            if m.session_id == memory.session_id
            and _age(m) < _age(memory)
            and (m.agent_id, m.visibility) == (memory.agent_id, memory.visibility)
            and m.status in (Status.ACTIVE, Status.SUPERSEDED)
        ]
        return max(before, key=_age).content if before else None

    async def complete_contexts(
        self, rows: Sequence[PendingContext], vectors: Mapping[str, FloatVector | None]
    ) -> None:
        self._answer()
        context = self.vectors.setdefault(VectorSpace.ENGLISH_CONTEXT, {})
        for row in rows:
            memory = self.memories.get(row.tenant_id, {}).get(row.memory_id)
            if row.memory_id not in vectors or memory is None or digest(memory.content) != row.digest:
                continue
            vector = vectors[row.memory_id]
            if vector is None:  # the session's first memory: its own English vector stands in
                vector = self.vectors.get(VectorSpace.ENGLISH, {}).get(row.memory_id)
            if row.memory_id not in context and vector is not None:
                context[row.memory_id] = vector
            self.context_retry_at.pop(row.memory_id, None)
