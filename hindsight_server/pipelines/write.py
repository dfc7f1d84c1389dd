"""The write path: validate -> decide status and expiry -> commit (committed = acknowledged).

Also Update and soft Delete, which change stored memories.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from hindsight_server.domain.clock import Clock
from hindsight_server.domain.errors import InvalidArgument
from hindsight_server.domain.ids import new_memory_id
from hindsight_server.domain.lifecycle import default_expiry, initial_status
from hindsight_server.domain.model import EmbeddingState, Memory, MemoryDraft, MemoryPatch, WriteOutcome
from hindsight_server.domain.policy import Limits, TtlPolicy, WritePolicy
from hindsight_server.domain.validation import validate_batch, validate_draft, validate_patch, validate_tenant
from hindsight_server.store.memories import MemoryStore


@dataclass(frozen=True, slots=True)
class WriteSettings:
    limits: Limits
    ttl: TtlPolicy
    policy: WritePolicy
    embeddings_enabled: bool


class WritePipeline:
    def __init__(self, store: MemoryStore, settings: WriteSettings, clock: Clock) -> None:
        self._store = store
        self._settings = settings
        self._clock = clock

    @property
    def _new_embedding_state(self) -> EmbeddingState:
        return EmbeddingState.PENDING if self._settings.embeddings_enabled else EmbeddingState.DISABLED

    async def write(self, draft: MemoryDraft) -> WriteOutcome:
        now = self._clock()
        validate_draft(draft, self._settings.limits, now)
        (outcome,) = await self._store.insert([self._new_memory(draft, now)])
        return outcome

    async def write_batch(self, drafts: Sequence[MemoryDraft]) -> list[WriteOutcome]:
        """All or nothing, in one transaction; results in request order."""
        now = self._clock()
        validate_batch(list(drafts), self._settings.limits, now)
        if len({draft.tenant_id for draft in drafts}) != 1:
            raise InvalidArgument("memories", "every memory of a batch belongs to the request's tenant")
        return await self._store.insert([self._new_memory(draft, now) for draft in drafts])

    def _new_memory(self, draft: MemoryDraft, now: datetime) -> Memory:
        recorded_at = draft.occurred_at or now
        return Memory(
            id=new_memory_id(),
            tenant_id=draft.tenant_id,
            subject=draft.subject,
            agent_id=draft.agent_id,
            session_id=draft.session_id,
            tier=draft.tier,
            kind=draft.kind,
            intent=draft.intent,
            entities=dict(draft.entities),
            content=draft.content,
            confidence=draft.confidence,
            status=initial_status(draft.confidence, self._settings.policy),
            supersedes=None,
            superseded_by=None,
            valid_from=draft.valid_from,
            valid_to=draft.valid_to,
            created_at=recorded_at,
            updated_at=recorded_at,
            expires_at=draft.expires_at
            or default_expiry(draft.tier, draft.kind, recorded_at, self._settings.ttl),
            access_count=0,
            last_accessed_at=None,
            idempotency_key=draft.idempotency_key,
            embedding_state=self._new_embedding_state,
            version=1,
        )

    async def update(self, patch: MemoryPatch) -> Memory:
        validate_patch(patch, self._settings.limits)
        return await self._store.update(patch, self._clock(), self._new_embedding_state)

    async def delete(self, tenant_id: str, memory_id: str) -> Memory:
        validate_tenant(tenant_id, self._settings.limits)
        return await self._store.soft_delete(tenant_id, memory_id, self._clock())
