"""The write path: validate -> decide status and expiry -> embed within a small budget -> commit
(committed = acknowledged). An embedding that does not arrive in time is left pending for the
background worker (pipelines/backfill.py): writes never wait on a sick inference tier. English
memories need a second, English-model vector; small writes get it inline, bulk batches from the worker.

Also Update and soft Delete, which change stored memories.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

from hindsight_server.domain.clock import Clock
from hindsight_server.domain.conflicts import Action, ConflictPolicy, Existing, NewMemory, resolve
from hindsight_server.domain.conflicts import Resolution as ConflictResolution
from hindsight_server.domain.errors import InferenceUnavailable
from hindsight_server.domain.ids import new_memory_id
from hindsight_server.domain.language import OWN_SPACE, language
from hindsight_server.domain.lifecycle import default_expiry, initial_status, resolves_conflicts
from hindsight_server.domain.model import (
    EmbeddingState,
    Memory,
    MemoryDraft,
    MemoryPatch,
    VectorSpace,
    WriteOutcome,
)
from hindsight_server.domain.policy import Limits, TtlPolicy, WritePolicy
from hindsight_server.domain.search_plan import prefers_exact_search
from hindsight_server.domain.validation import validate_batch, validate_draft, validate_patch, validate_tenant
from hindsight_server.domain.vectors import DocumentEmbeddings, FloatVector, WriteVectors
from hindsight_server.offload import run_pure
from hindsight_server.pipelines.activity import WriteActivity
from hindsight_server.pipelines.ports import DocumentEmbedder, WriteStore
from hindsight_server.pipelines.scope_sizes import ScopeSizes
from hindsight_server.pipelines.statistics import StatisticsRefresh
from hindsight_server.telemetry.recorder import Recorder, staged


@dataclass(frozen=True, slots=True)
class WriteSettings:
    limits: Limits
    ttl: TtlPolicy
    policy: WritePolicy
    inline_budget_s: float = 0.1
    inline_budget_per_item_s: float = 0.002
    english_inline_max_batch: int = 16
    conflicts: ConflictPolicy = field(default_factory=ConflictPolicy)
    exact_search_factor: float = 180.0  # how a memory's nearest peers are searched (domain/search_plan.py)


# What a new memory does to its peers (domain.conflicts.resolve, or a fixed answer).
Decide = Callable[[Memory, list[Existing]], ConflictResolution]


@dataclass(frozen=True, slots=True)
class InlineEmbeddings:
    multilingual: DocumentEmbeddings
    # A language's own vectors, by space, by position in the write: those that got one inline.
    own: dict[VectorSpace, dict[int, FloatVector]]

    def has_own(self, index: int, space: VectorSpace | None) -> bool:
        return space is None or index in self.own.get(space, {})


class WritePipeline:
    def __init__(
        self,
        store: WriteStore,
        settings: WriteSettings,
        clock: Clock,
        inference: DocumentEmbedder | None = None,
        *,
        recorder: Recorder | None = None,
        activity: WriteActivity | None = None,
        scope_sizes: ScopeSizes | None = None,
        statistics: StatisticsRefresh | None = None,
    ) -> None:
        self._store = store
        self._settings = settings
        self._clock = clock
        self._inference = inference
        self._recorder = recorder or Recorder()  # spans and latency of Write / WriteBatch
        self._activity = activity or WriteActivity()  # the backfill worker gives way to inline embedding
        self._scope_sizes = scope_sizes or ScopeSizes(store)  # shared with recall by the server
        self._statistics = statistics or StatisticsRefresh(store, after_rows=0)

    @property
    def _unembedded_state(self) -> EmbeddingState:
        return EmbeddingState.DISABLED if self._inference is None else EmbeddingState.PENDING

    async def write(self, draft: MemoryDraft) -> WriteOutcome:
        """Stores one memory, or merges it into the same one said before, or supersedes an older version
        of it (domain.conflicts)."""
        now = self._clock()
        validate_draft(draft, self._settings.limits, now)
        with self._recorder.write("write"):
            (outcome,) = await self.commit([self.new_memory(draft, now)], now, verbatim=False)
        return outcome

    async def write_batch(
        self, drafts: Sequence[MemoryDraft], *, verbatim: bool = False
    ) -> list[WriteOutcome]:
        """All or nothing, in one transaction; results in request order. `verbatim` (imports of
        history): every item is stored as given, without merging or superseding."""
        now = self._clock()
        validate_batch(list(drafts), self._settings.limits, now)
        with self._recorder.write("write_batch") as span:
            span.set_attribute("hindsight.batch_size", len(drafts))
            return await self.commit(
                [self.new_memory(draft, now) for draft in drafts], now, verbatim=verbatim
            )

    async def commit(
        self,
        memories: Sequence[Memory],
        now: datetime,
        *,
        verbatim: bool,
        decide: Decide | None = None,
        inline: bool = True,
    ) -> list[WriteOutcome]:
        """Embeds (within the inline budget) and stores memories built by this pipeline or by the
        lifecycle (episodes, patterns); all or nothing. `decide` replaces the conflict rules. `inline`
        False: stored at once, their vectors left to the background worker (a caller that must not wait
        for the encoders and needs no vector to decide: a session's turns and summary)."""
        contents = [m.content for m in memories]
        wanted = await self._own_spaces(contents) if inline else []
        embedded = await self._embed_inline(contents, wanted) if inline else None
        if embedded is None:
            # Nothing embedded: these memories enter the scope's counts when the worker embeds them.
            outcomes = await self._store_all(memories, {}, now, verbatim=verbatim, decide=decide)
        else:
            # Ready once it has every vector it needs; its own language's still missing comes from the worker.
            complete = [
                replace(m, embedding_state=EmbeddingState.READY) if embedded.has_own(i, space) else m
                for i, (m, space) in enumerate(zip(memories, wanted, strict=True))
            ]
            vectors = {
                VectorSpace.MULTILINGUAL: list(embedded.multilingual.vectors),
                **{
                    space: [by_row.get(i) for i in range(len(memories))]
                    for space, by_row in embedded.own.items()
                },
            }
            stored = await self._store_all(complete, vectors, now, verbatim=verbatim, decide=decide)
            self._note_created(stored, frozenset(embedded.own.get(VectorSpace.ENGLISH, {})))
            outcomes = [
                replace(outcome, embedding_truncated=truncated) if outcome.created else outcome
                for outcome, truncated in zip(stored, embedded.multilingual.truncated, strict=True)
            ]
        self._note_tenants_grew(outcomes)
        return outcomes

    def _note_created(self, outcomes: Sequence[WriteOutcome], with_english: frozenset[int]) -> None:
        """Counts the new memories (each has its multilingual vector) into their scopes' sizes at once,
        those lacking an English vector apart, so an English recall right after does not skip the
        search that finds them."""
        created: Counter[tuple[str, str]] = Counter()
        lacking: Counter[tuple[str, str]] = Counter()
        for index, outcome in enumerate(outcomes):
            if outcome.created:
                scope = (outcome.memory.tenant_id, outcome.memory.subject)
                created[scope] += 1
                lacking[scope] += index not in with_english
        for (tenant_id, subject), rows in created.items():
            self._scope_sizes.note_written(tenant_id, subject, rows, lacking[(tenant_id, subject)])

    def _note_tenants_grew(self, outcomes: Sequence[WriteOutcome]) -> None:
        grown = Counter(outcome.memory.tenant_id for outcome in outcomes if outcome.created)
        for tenant_id, rows in grown.items():
            self._statistics.note_written(tenant_id, rows)

    @staged("write.store")  # insert, or insert resolving merges and supersedes, in one transaction
    async def _store_all(
        self,
        memories: Sequence[Memory],
        vectors: WriteVectors,
        now: datetime,
        *,
        verbatim: bool,
        decide: Decide | None,
    ) -> list[WriteOutcome]:
        if decide is None and (verbatim or not any(resolves_conflicts(m) for m in memories)):
            return await self._store.insert(memories, vectors, now)
        graph = await self._graph_subjects(memories) if vectors else frozenset()
        return await self._store.insert_resolving(
            memories, vectors, decide or self._decide, now, graph_subjects=graph
        )

    async def _graph_subjects(self, memories: Sequence[Memory]) -> frozenset[str]:
        """The subjects large enough that their nearest peers are found through HNSW."""
        tenant_id = memories[0].tenant_id  # a request has one tenant
        subjects = sorted({m.subject for m in memories})
        sizes = await asyncio.gather(*(self._scope_sizes.of(tenant_id, subject) for subject in subjects))
        factor = self._settings.exact_search_factor
        return frozenset(
            subject
            for subject, size in zip(subjects, sizes, strict=True)
            if not prefers_exact_search(size.rows, size.table_rows, factor)
        )

    def _decide(self, memory: Memory, peers: list[Existing]) -> ConflictResolution:
        if not resolves_conflicts(memory):
            return ConflictResolution(Action.NEW, None, "not checked: working memory or pending")
        candidate = NewMemory(
            memory.subject, memory.kind, memory.tier, memory.content, memory.intent, memory.entities
        )
        return resolve(candidate, peers, self._settings.conflicts)

    async def supersede(
        self, memory: Memory, old_id: str, reason: str, now: datetime, *, inline: bool = True
    ) -> WriteOutcome:
        """Stores `memory` as the new version of `old_id`, whatever the conflict rules would say (the
        session summary: each refresh is a version, so History and as_of show what was settled when)."""
        fixed = ConflictResolution(Action.SUPERSEDE, old_id, reason)
        (outcome,) = await self.commit(
            [memory], now, verbatim=False, decide=lambda _m, _p: fixed, inline=inline
        )
        return outcome

    async def expire_now(self, tenant_id: str, memory_ids: Sequence[str]) -> None:
        if memory_ids:
            await self._store.expire_now(tenant_id, memory_ids, self._clock())

    async def _own_spaces(self, contents: list[str]) -> list[VectorSpace | None]:
        """The space of each content's own language when the deployment embeds in it (English: an English
        model's; Chinese: a second multilingual model's), else None. Detecting the language of a
        megabyte batch takes tens of ms: off the loop (offload.py)."""
        inference = self._inference
        configured = [s for s in OWN_SPACE.values() if inference is not None and inference.configured(s)]
        if not configured:
            return [None] * len(contents)
        return await run_pure(sum(map(len, contents)), _own_spaces, contents, frozenset(configured))

    @staged("write.embed")
    async def _embed_inline(
        self, texts: list[str], wanted: list[VectorSpace | None]
    ) -> InlineEmbeddings | None:
        """The multilingual vectors (None when they do not arrive in the budget) and, concurrently, the
        languages' own ones of a small write."""
        inference = self._inference
        if inference is None or not inference.available:
            return None
        self._activity.touch()
        budget = self._settings.inline_budget_s + self._settings.inline_budget_per_item_s * len(texts)
        rows = {
            space: [i for i, own in enumerate(wanted) if own is space]
            for space in OWN_SPACE.values()
            if space in wanted
            and len(texts) <= self._settings.english_inline_max_batch
            and inference.serves(space)
        }
        jobs = [inference.embed_documents(texts, timeout_s=budget)] + [
            inference.embed_documents([texts[i] for i in indexes], timeout_s=budget, space=space)
            for space, indexes in rows.items()
        ]
        multilingual, *own_results = await asyncio.gather(*jobs, return_exceptions=True)
        if isinstance(multilingual, BaseException):
            if isinstance(multilingual, InferenceUnavailable):
                return None
            raise multilingual
        own: dict[VectorSpace, dict[int, FloatVector]] = {}
        for (space, indexes), result in zip(rows.items(), own_results, strict=True):
            if isinstance(result, BaseException):
                if not isinstance(result, InferenceUnavailable):
                    raise result
                continue  # the worker gives them theirs
            own[space] = dict(zip(indexes, result.vectors, strict=True))
        return InlineEmbeddings(multilingual, own)

    def new_memory(self, draft: MemoryDraft, now: datetime) -> Memory:
        """A memory built from a draft as Write stores it: id, status, expiry, embedding state."""
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
            visibility=draft.visibility,
        )

    async def update(self, patch: MemoryPatch) -> Memory:
        """A changed content's embedding is recomputed by the background worker."""
        validate_patch(patch, self._settings.limits)
        return await self._store.update(patch, self._clock(), self._unembedded_state)

    async def decide_pending(
        self, tenant_id: str, memory_id: str, *, confirm: bool, agent_id: str = ""
    ) -> Memory:
        """Confirm (active: recall uses it) or reject (deleted) a memory waiting in the pending area."""
        validate_tenant(tenant_id, self._settings.limits)
        return await self._store.decide_pending(tenant_id, memory_id, confirm, self._clock(), agent_id)

    async def delete(self, tenant_id: str, memory_id: str, agent_id: str = "") -> Memory:
        validate_tenant(tenant_id, self._settings.limits)
        return await self._store.soft_delete(tenant_id, memory_id, self._clock(), agent_id)


def _own_spaces(contents: list[str], configured: frozenset[VectorSpace]) -> list[VectorSpace | None]:
    return [space if (space := OWN_SPACE[language(content)]) in configured else None for content in contents]
