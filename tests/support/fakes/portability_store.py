"""Export and import over the in-memory store (ExportSnapshots and ImportWrites, pipelines/ports.py), with
the rules of store/portability.py and store/writes.py import_batch: an export reads a copy taken when it
began, selected as its query says, in id order; an import inserts what is not here yet (by id or
idempotency key), all or nothing, then links versions both ways where both ends are here and neither
links elsewhere, refusing a loop."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from hindsight_server.domain.errors import InvalidArgument
from hindsight_server.domain.model import Memory
from hindsight_server.domain.portability import CURRENT_STATUSES, ExportQuery, PortableMemory, first_loop
from hindsight_server.domain.vectors import Vectors, WriteVectors
from tests.support.fakes.memory_store import InMemoryMemoryStore, _row, seen_by


def selected(memory: Memory, query: ExportQuery) -> bool:
    window = query.window
    return (
        (query.subject is None or memory.subject == query.subject)
        and (query.viewer is None or seen_by(memory, query.viewer))
        and (not query.tiers or memory.tier in query.tiers)
        and (not query.kinds or memory.kind in query.kinds)
        and (window.start is None or memory.created_at >= window.start)
        and (window.end is None or memory.created_at < window.end)
        and (query.include_history or memory.status in CURRENT_STATUSES)
    )


@dataclass(frozen=True, slots=True)
class FrozenExport:
    """The tenant's memories and vectors as they were when the export began."""

    query: ExportQuery
    memories: tuple[Memory, ...]
    vectors: Vectors

    def _after(self, after_id: str | None) -> list[Memory]:
        return [m for m in self.memories if after_id is None or m.id > after_id]

    async def count(self) -> int:
        return len(self._after(self.query.after_id))

    async def pages(self, page_size: int) -> AsyncIterator[list[PortableMemory]]:
        after = self.query.after_id
        while page := self._after(after)[:page_size]:
            yield [self._portable(m) for m in page]
            after = page[-1].id

    def _portable(self, memory: Memory) -> PortableMemory:
        if not self.query.include_embeddings:
            return PortableMemory(memory)
        found = {space: by_id[memory.id] for space, by_id in self.vectors.items() if memory.id in by_id}
        return PortableMemory(memory, found)


@dataclass
class InMemoryPortabilityStore(InMemoryMemoryStore):
    @contextlib.asynccontextmanager
    async def snapshot(self, query: ExportQuery) -> AsyncIterator[FrozenExport]:
        self._answer()
        chosen = sorted(
            (m for m in self.of_tenant(query.tenant_id) if selected(m, query)), key=lambda m: m.id
        )
        yield FrozenExport(
            query, tuple(chosen), {space: dict(by_id) for space, by_id in self.vectors.items()}
        )

    async def import_batch(
        self, memories: Sequence[Memory], embeddings: WriteVectors, now: datetime
    ) -> set[str]:
        with self._transaction():
            inserted = set()
            for index, memory in enumerate(memories):
                here = self.of_tenant(memory.tenant_id)
                key = memory.idempotency_key
                if any(m.id == memory.id or (key and m.idempotency_key == key) for m in here):
                    continue
                vectors = {space: v for space, v in _row(embeddings, index).items() if v is not None}
                self.add(replace(memory, supersedes=None, superseded_by=None), vectors)
                inserted.add(memory.id)
            self._link_versions(memories)
            return inserted

    def _link_versions(self, memories: Sequence[Memory]) -> None:
        pairs = {(m.id, m.supersedes) for m in memories if m.supersedes}
        pairs |= {(m.superseded_by, m.id) for m in memories if m.superseded_by}
        if not pairs:
            return
        stored = self.memories.get(memories[0].tenant_id, {})
        linkable = [
            (newer, older)
            for newer, older in sorted(pairs)
            if newer in stored
            and older in stored
            and stored[newer].supersedes in (None, older)
            and stored[older].superseded_by in (None, newer)
        ]
        for newer, older in linkable:
            stored[newer] = replace(stored[newer], supersedes=older)
            stored[older] = replace(stored[older], superseded_by=newer)
        looped = first_loop({m.id: m.supersedes for m in stored.values()})
        if looped is not None:
            raise InvalidArgument("memories", f"the version links would form a loop through memory {looped}")
