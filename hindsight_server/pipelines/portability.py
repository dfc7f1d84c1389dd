"""Export and import of a tenant's memories (domain/portability.py holds the rules).

Export reads one snapshot of the primary, a page at a time; the header counts what follows in the same
snapshot. Import writes one batch per call in one transaction, through the write store's own insert (the
BM25 statistics counted as for any write), keeping each memory as it was exported: its status, versions,
provenance, times and counters. Embeddings of a model this deployment names the same way (space, name,
dimension) are kept; otherwise the memory waits for the embedding worker.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator, Sequence
from dataclasses import replace

from hindsight_server.domain.clock import Clock
from hindsight_server.domain.errors import InvalidArgument, ResourceExhausted
from hindsight_server.domain.language import OWN_SPACE, language
from hindsight_server.domain.model import EmbeddingState, VectorSpace
from hindsight_server.domain.policy import Limits
from hindsight_server.domain.portability import (
    EmbeddingModel,
    ExportHeader,
    ExportQuery,
    ImportOutcome,
    PortableMemory,
    embedding_state,
    retargeted,
    reusable_spaces,
)
from hindsight_server.domain.validation import (
    require_memory_id,
    validate_identifiers,
    validate_imported,
    validate_tenant,
    validate_window,
)
from hindsight_server.pipelines.ports import ExportSnapshots, ImportWrites
from hindsight_server.pipelines.scope_sizes import ScopeSizes
from hindsight_server.pipelines.statistics import StatisticsRefresh

EXPORT_PAGE = 500


class PortabilityPipeline:
    def __init__(
        self,
        exports: ExportSnapshots,
        writes: ImportWrites,
        models: Sequence[EmbeddingModel],
        limits: Limits,
        clock: Clock,
        *,
        inference: bool,
        max_concurrent_exports: int = 2,
        max_exports_per_tenant: int = 1,
        statistics: StatisticsRefresh | None = None,
        scope_sizes: ScopeSizes | None = None,
    ) -> None:
        self._exports = exports
        self._writes = writes
        self._models = tuple(models)
        self._limits = limits
        self._clock = clock
        self._inference = inference
        self._exports_left = max_concurrent_exports  # each export holds a connection while it streams
        # Of those, one tenant's at once: another tenant's export still finds a slot.
        self._max_exports_per_tenant = max_exports_per_tenant
        self._exports_by_tenant: Counter[str] = Counter()
        # An import is a tenant growing at once: its plans and the vector search's sizes must know.
        self._statistics = statistics
        self._scope_sizes = scope_sizes

    @property
    def models(self) -> tuple[EmbeddingModel, ...]:
        """This deployment's embedding models, as exports name them."""
        return self._models

    async def export(self, query: ExportQuery) -> AsyncIterator[ExportHeader | PortableMemory]:
        """The header, then every selected memory in id order, from one snapshot."""
        validate_tenant(query.tenant_id, self._limits)
        if query.subject is not None:
            validate_identifiers(self._limits, subject=query.subject)
        validate_window(query.window)
        if query.after_id is not None:
            query = replace(query, after_id=require_memory_id(query.after_id, "after_id"))
        if self._exports_left == 0:
            raise ResourceExhausted(
                "this server runs as many exports as database.max_concurrent_exports allows; retry later",
                retry_after_s=5.0,
            )
        running = self._exports_by_tenant[query.tenant_id]
        if running >= self._max_exports_per_tenant:
            raise ResourceExhausted(
                f"tenant {query.tenant_id!r} runs {running} exports on this server, as many as "
                "database.max_exports_per_tenant allows; retry once one ends",
                retry_after_s=5.0,
            )
        self._exports_left -= 1
        self._exports_by_tenant[query.tenant_id] += 1
        try:
            async with self._exports.snapshot(query) as snapshot:
                count = await snapshot.count()
                yield ExportHeader(query.tenant_id, query.subject, count, self._models, self._clock())
                async for page in snapshot.pages(EXPORT_PAGE):
                    for memory in page:
                        yield memory
        finally:
            self._exports_left += 1
            self._exports_by_tenant[query.tenant_id] -= 1
            if not self._exports_by_tenant[query.tenant_id]:
                del self._exports_by_tenant[query.tenant_id]

    async def import_batch(
        self,
        tenant_id: str,
        memories: Sequence[PortableMemory],
        *,
        new_ids: bool,
        models: Sequence[EmbeddingModel],
    ) -> ImportOutcome:
        validate_tenant(tenant_id, self._limits)
        if not memories:
            raise InvalidArgument("memories", "required: at least one exported memory")
        if len(memories) > self._limits.max_batch_size:
            raise InvalidArgument("memories", f"at most {self._limits.max_batch_size} a call")
        for index, item in enumerate(memories):
            validate_imported(item.memory, self._limits, f"memories[{index}].memory.")
        reusable = reusable_spaces(models, self._models)
        here = {model.space for model in self._models}
        stored = [self._stored(tenant_id, item, new_ids, reusable, here) for item in memories]
        vectors = {space: [item.vectors.get(space) for item in stored] for space in VectorSpace}
        inserted = await self._writes.import_batch([item.memory for item in stored], vectors, self._clock())
        new = [item for item in stored if item.memory.id in inserted]
        self._note_grown(tenant_id, new)
        pending = sum(1 for item in new if item.memory.embedding_state is EmbeddingState.PENDING)
        return ImportOutcome(
            ids=[item.memory.id for item in stored],
            imported=len(inserted),
            already_present=len(stored) - len(inserted),
            embeddings_reused=sum(1 for item in new if item.vectors),
            embeddings_pending=pending,
        )

    def _note_grown(self, tenant_id: str, new: Sequence[PortableMemory]) -> None:
        if self._statistics is not None and new:
            self._statistics.note_written(tenant_id, len(new))
        if self._scope_sizes is None:
            return
        rows: Counter[str] = Counter(item.memory.subject for item in new)
        lacking: Counter[str] = Counter(
            item.memory.subject for item in new if VectorSpace.ENGLISH not in item.vectors
        )
        for subject, count in rows.items():
            self._scope_sizes.note_written(tenant_id, subject, count, lacking[subject])

    def _stored(
        self,
        tenant_id: str,
        item: PortableMemory,
        new_ids: bool,
        reusable: frozenset[VectorSpace],
        here: set[VectorSpace],
    ) -> PortableMemory:
        memory = retargeted(item.memory, tenant_id, new_ids=new_ids)
        kept = {
            space: vector
            for space, vector in item.vectors.items()
            if space in reusable and len(vector) == self._dimension(space)
        }
        needed = {VectorSpace.MULTILINGUAL}
        if (own := OWN_SPACE[language(memory.content)]) in here:
            needed.add(own)
        state = embedding_state(kept, frozenset(needed), self._inference)
        return PortableMemory(replace(memory, embedding_state=state), kept)

    def _dimension(self, space: VectorSpace) -> int:
        return next((model.dimension for model in self._models if model.space is space), -1)
