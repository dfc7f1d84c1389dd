"""The write path: validate -> decide status and expiry -> embed within a small budget -> commit
(committed = acknowledged). An embedding that does not arrive in time is left pending for the
background worker (pipelines/backfill.py): writes never wait on a sick inference tier.

Also Update and soft Delete, which change stored memories.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from hindsight_server.domain.clock import Clock
from hindsight_server.domain.errors import InferenceUnavailable
from hindsight_server.domain.ids import new_memory_id
from hindsight_server.domain.lifecycle import default_expiry, initial_status
from hindsight_server.domain.model import EmbeddingState, Memory, MemoryDraft, MemoryPatch, WriteOutcome
from hindsight_server.domain.policy import Limits, TtlPolicy, WritePolicy
from hindsight_server.domain.validation import validate_batch, validate_draft, validate_patch, validate_tenant
from hindsight_server.inference.tier import DocumentEmbeddings, InferenceTier
from hindsight_server.store.memories import MemoryStore


@dataclass(frozen=True, slots=True)
class WriteSettings:
    limits: Limits
    ttl: TtlPolicy
    policy: WritePolicy
    inline_budget_s: float = 0.1
    inline_budget_per_item_s: float = 0.002


class WritePipeline:
    def __init__(
        self,
        store: MemoryStore,
        settings: WriteSettings,
        clock: Clock,
        inference: InferenceTier | None = None,
    ) -> None:
        self._store = store
        self._settings = settings
        self._clock = clock
        self._inference = inference

    @property
    def _unembedded_state(self) -> EmbeddingState:
        return EmbeddingState.DISABLED if self._inference is None else EmbeddingState.PENDING

    async def write(self, draft: MemoryDraft) -> WriteOutcome:
        now = self._clock()
        validate_draft(draft, self._settings.limits, now)
        (outcome,) = await self._commit([draft], now)
        return outcome

    async def write_batch(self, drafts: Sequence[MemoryDraft]) -> list[WriteOutcome]:
        """All or nothing, in one transaction; results in request order."""
        now = self._clock()
        validate_batch(list(drafts), self._settings.limits, now)
        return await self._commit(drafts, now)

    async def _commit(self, drafts: Sequence[MemoryDraft], now: datetime) -> list[WriteOutcome]:
        memories = [self._new_memory(draft, now) for draft in drafts]
        embedded = await self._embed_inline([m.content for m in memories])
        if embedded is None:
            return await self._store.insert(memories)
        ready = [replace(m, embedding_state=EmbeddingState.READY) for m in memories]
        outcomes = await self._store.insert(ready, list(embedded.vectors))
        return [
            replace(outcome, embedding_truncated=truncated) if outcome.created else outcome
            for outcome, truncated in zip(outcomes, embedded.truncated, strict=True)
        ]

    async def _embed_inline(self, texts: list[str]) -> DocumentEmbeddings | None:
        if self._inference is None or not self._inference.available:
            return None
        budget = self._settings.inline_budget_s + self._settings.inline_budget_per_item_s * len(texts)
        try:
            return await self._inference.embed_documents(texts, timeout_s=budget)
        except InferenceUnavailable:
            return None

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
            embedding_state=self._unembedded_state,
            version=1,
        )

    async def update(self, patch: MemoryPatch) -> Memory:
        """A changed content's embedding is recomputed by the background worker."""
        validate_patch(patch, self._settings.limits)
        return await self._store.update(patch, self._clock(), self._unembedded_state)

    async def delete(self, tenant_id: str, memory_id: str) -> Memory:
        validate_tenant(tenant_id, self._settings.limits)
        return await self._store.soft_delete(tenant_id, memory_id, self._clock())
